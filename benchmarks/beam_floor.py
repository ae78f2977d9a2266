"""The DirectRunner's own cost of moving edges through shuffles: a minimal Beam pipeline that does
what the graph stage does to its edges, minus the graph work.

Edge batches of 100k (source, target) uint64 pairs are made inside the job, cut into pieces by a hash
bucket of one endpoint (16 buckets, as `graph.py`), and sent through S GroupByKeys, each followed by
a concatenation and a re-cut; then the edges are counted. Each run is a fresh process, timed in CPU
seconds; the difference between S shuffles and none, per edge and shuffle, is what one edge shuffle
costs on this runner however fast the record logic is. The run with none is the fixed cost
(imports, pipeline construction, start-up) plus making the edges.

  python benchmarks/beam_floor.py --edges 3000000 --shuffles 0 6
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time

BATCH = 100_000
BUCKETS = 16


def job(num_edges: int, shuffles: int) -> None:
    import apache_beam as beam
    import numpy as np
    from apache_beam.options.pipeline_options import PipelineOptions

    def make(i: int):
        rng = np.random.default_rng(i)
        n = min(BATCH, num_edges - i * BATCH)
        return rng.integers(0, 2**63, (2, n), dtype=np.uint64)

    def cut(edges, by: int):
        bucket = (edges[by] % np.uint64(BUCKETS)).astype(np.int64)
        order = np.argsort(bucket, kind="stable")
        ends = np.cumsum(np.bincount(bucket, minlength=BUCKETS))
        for b in range(BUCKETS):
            take = order[ends[b - 1] if b else 0: ends[b]]
            if len(take):
                yield b, edges[:, take]

    with beam.Pipeline(options=PipelineOptions(["--direct_num_workers", "1"])) as p:
        pieces = (p | beam.Create(range((num_edges + BATCH - 1) // BATCH)) | beam.Reshuffle()
                  | beam.Map(make) | "Cut0" >> beam.FlatMap(cut, 0))
        for s in range(shuffles):
            pieces = (pieces | f"Group{s}" >> beam.GroupByKey()
                      | f"Concat{s}" >> beam.Map(lambda kv: np.concatenate(list(kv[1]), axis=1))
                      | f"Cut{s + 1}" >> beam.FlatMap(cut, (s + 1) % 2))
        _ = (pieces | beam.Map(lambda kv: kv[1].shape[1]) | beam.CombineGlobally(sum)
             | beam.Map(lambda n: print(f"edges {n}", flush=True)))


def measured(num_edges: int, shuffles: int) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one job in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.time()
    subprocess.run([sys.executable, __file__, "--job", str(num_edges), str(shuffles)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, time.time() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--edges", type=int, default=3_000_000)
    ap.add_argument("--shuffles", type=int, nargs="+", default=[0, 6])
    ap.add_argument("--job", nargs=2, type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.job:
        job(*args.job)
        return 0
    runs = {}
    for s in args.shuffles:
        cpu, wall = measured(args.edges, s)
        runs[s] = cpu
        print(f"{args.edges:,} edges, {s} shuffle(s): {cpu:.1f} CPU s, {wall:.1f} s wall; "
              f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    lo, hi = min(runs), max(runs)
    if hi > lo:
        per = (runs[hi] - runs[lo]) / (hi - lo) / args.edges
        print(f"one edge shuffle: {per * 1e6:.2f} CPU us per edge (16 bytes); "
              f"fixed + making the edges: {runs[lo]:.1f} CPU s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
