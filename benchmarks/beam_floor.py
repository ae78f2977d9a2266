"""The DirectRunner's own cost of moving edges through shuffles: a minimal Beam pipeline that does
what the graph stage does to its edges, minus the graph work.

Edge batches of 100k (source, target) uint64 pairs are made inside the job, cut into pieces by a hash
bucket of one endpoint (16 buckets, as `graph.py`), and sent through S GroupByKeys, each followed by
a concatenation and a re-cut; then the edges are counted. Each run is a fresh process, timed in CPU
seconds; the difference between S shuffles and none, per edge and shuffle, is what one edge shuffle
costs on this runner however fast the record logic is. The run with none is the fixed cost
(imports, pipeline construction, start-up) plus making the edges.

The element shape is a choice: `--dtype uint32` moves 8 bytes per edge instead of 16, `--as_bytes`
sends each piece as raw `bytes` (Beam's bytes coder) instead of a pickled NumPy array, `--batch`
sets the edges per batch (pieces are batch / 16 edges).

  python benchmarks/beam_floor.py --edges 3000000 --shuffles 0 6
  python benchmarks/beam_floor.py --edges 3000000 --shuffles 0 7 --dtype uint32 --as_bytes
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time

import numpy as np

BATCH = 100_000
BUCKETS = 16


def job(num_edges: int, shuffles: int, dtype: str = "uint64", as_bytes: bool = False, batch: int = BATCH) -> None:
    import apache_beam as beam
    import numpy as np
    from apache_beam.options.pipeline_options import PipelineOptions

    kind = np.dtype(dtype)

    def make(i: int):
        rng = np.random.default_rng(i)
        n = min(batch, num_edges - i * batch)
        return rng.integers(0, np.iinfo(kind).max, (2, n), dtype=kind)

    def wire(piece):
        return piece.tobytes() if as_bytes else piece

    def unwire(piece):
        return np.frombuffer(piece, kind).reshape(2, -1) if as_bytes else piece

    def cut(edges, by: int):
        bucket = (edges[by] % kind.type(BUCKETS)).astype(np.uint8)
        order = np.argsort(bucket, kind="stable")
        ends = np.cumsum(np.bincount(bucket, minlength=BUCKETS))
        for b in range(BUCKETS):
            take = order[ends[b - 1] if b else 0: ends[b]]
            if len(take):
                yield b, wire(edges[:, take])

    with beam.Pipeline(options=PipelineOptions(["--direct_num_workers", "1"])) as p:
        pieces = (p | beam.Create(range((num_edges + batch - 1) // batch)) | beam.Reshuffle()
                  | beam.Map(make) | "Cut0" >> beam.FlatMap(cut, 0))
        for s in range(shuffles):
            pieces = (pieces | f"Group{s}" >> beam.GroupByKey()
                      | f"Concat{s}" >> beam.Map(lambda kv: np.concatenate([unwire(p) for p in kv[1]], axis=1))
                      | f"Cut{s + 1}" >> beam.FlatMap(cut, (s + 1) % 2))
        _ = (pieces | beam.Map(lambda kv: unwire(kv[1]).shape[1]) | beam.CombineGlobally(sum)
             | beam.Map(lambda n: print(f"edges {n}", flush=True)))


def measured(num_edges: int, shuffles: int, args) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one job in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.time()
    shape = ["--dtype", args.dtype, "--batch", str(args.batch)] + (["--as_bytes"] if args.as_bytes else [])
    subprocess.run([sys.executable, __file__, "--job", str(num_edges), str(shuffles), *shape], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, time.time() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--edges", type=int, default=3_000_000)
    ap.add_argument("--shuffles", type=int, nargs="+", default=[0, 6])
    ap.add_argument("--dtype", choices=("uint64", "uint32"), default="uint64", help="type of an endpoint")
    ap.add_argument("--as_bytes", action="store_true", help="pieces cross Beam as raw bytes, not pickled arrays")
    ap.add_argument("--batch", type=int, default=BATCH, help="edges per batch")
    ap.add_argument("--job", nargs=2, type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.job:
        job(*args.job, dtype=args.dtype, as_bytes=args.as_bytes, batch=args.batch)
        return 0
    runs = {}
    for s in args.shuffles:
        cpu, wall = measured(args.edges, s, args)
        runs[s] = cpu
        print(f"{args.edges:,} edges, {s} shuffle(s): {cpu:.1f} CPU s, {wall:.1f} s wall; "
              f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    lo, hi = min(runs), max(runs)
    if hi > lo:
        per = (runs[hi] - runs[lo]) / (hi - lo) / args.edges
        width = 2 * np.dtype(args.dtype).itemsize
        print(f"one edge shuffle: {per * 1e6:.2f} CPU us per edge ({width} bytes, "
              f"{'raw bytes' if args.as_bytes else 'pickled arrays'}, batches of {args.batch:,}); "
              f"fixed + making the edges: {runs[lo]:.1f} CPU s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
