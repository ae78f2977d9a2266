"""The pipeline's throughput: WAT extraction per core, the whole Beam job, the graph stage alone,
and the trainer's reader of what it writes against tf.data.

    python -m benchmarks.pipeline --wat_records 100000
    python -m benchmarks.pipeline --pages 20000 100000 --workers 1 2
    python -m benchmarks.pipeline --pages --graph_edges 1000000 3000000 10000000 \
        --text_edges 1000000 3000000 10000000
    python -m benchmarks.pipeline --pages --reader 25m in-sparse

The pipeline runs on the host's cores only (Apache Beam's DirectRunner): it has no `--device`.

`--wat_records N`: extraction throughput on the real records of data/commoncrawl replicated with
varied page URLs and hosts into one per-record-gzip WAT file of at least N records, in records per
CPU-second of this one process (best of `--repeat`): (a) ours, `webgraph_pipeline.wat.wat_edges`
(validation, normalization, dedup, every drop counted) with the warcio reader and (a') the
FastWARC one; (b) a plain loop the way cc-pyspark extracts links (warcio + json + urljoin); (c) the
floor, gzip-decompress and JSON-decode (orjson) alone; (r) warcio reading alone; and json against
orjson on the same payloads.

`--pages N ...` (20,000 when no other part is asked): a synthetic web-like graph of N pages (about
10 links each) as gzipped WAT files (cached under --work_dir), then `python -m webgraph_pipeline` on
them once per `--workers` setting, in a fresh process: wall, CPU, peak memory of the whole process
tree (sampled every 0.2 s), throughput, 1 / 2 workers and whether their outputs are byte-identical.
As floors, the plain read of the same files (warcio + JSON) and the extraction stage alone as a
Beam job (`ExtractEdges` counting its edges): whole job / extraction-only is the graph
stage's share.

`--graph_edges N ...`: the graph stage alone, edge batches of a generated power-law graph
(`benchmarks.core.power_law.edge_batch`, n = edges / 8 nodes) made inside the job, then
BuildWebGraph -> WriteTfRecords: edges per CPU-second and CPU microseconds per edge. `--text_edges
N ...` writes the same graph as a `src dst` text file and runs the whole job on it (parsing
included). Both print the cost per extra edge between consecutive sizes.

`--reader SIZE ...`: the trainer's TFRecord reader against tf.data on a generated dataset
directory of each size (`benchmarks.core.reader`; needs TensorFlow).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import pathlib
import sys
import time

from benchmarks.core import wat_files
from benchmarks.core.children import run_child
from benchmarks.core.datasets import SIZES
from benchmarks.core.machine import load_line
from benchmarks.core.power_law import edge_batch
from benchmarks.core.wat_extraction import bench_extraction

MODULE = "benchmarks.pipeline"
BATCH_EDGES = 100_000


# ---------------------------------------------------------------- the Beam job


def graph_stage_job(num_edges: int, out: str) -> None:
    """(In a child) the graph stage alone: power-law batches made in the job -> BuildWebGraph ->
    WriteTfRecords."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from webgraph_pipeline.graph import BuildWebGraph
    from webgraph_pipeline.graph_config import GraphConfig
    from webgraph_pipeline.write import WriteTfRecords

    config = GraphConfig(min_links=3)
    sizes = [min(BATCH_EDGES, num_edges - i) for i in range(0, num_edges, BATCH_EDGES)]
    os.makedirs(out, exist_ok=True)
    with beam.Pipeline(options=PipelineOptions(["--direct_num_workers", "1"])) as p:
        graph = (
            p
            | beam.Create(list(enumerate(sizes)))
            | beam.Reshuffle()
            | beam.MapTuple(lambda i, n: edge_batch(0, i, n, max(num_edges // 8, 1)))
            | BuildWebGraph(config)
        )
        graph | WriteTfRecords(out, config.to_dict(), ["generated"], num_shards=8)


def extract_only_job(pattern: str) -> None:
    """(In a child) the extraction stage alone as a Beam job: ExtractEdges, the edges counted."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from webgraph_pipeline.extract import ExtractEdges
    from webgraph_pipeline.pipeline import match_inputs

    with beam.Pipeline(options=PipelineOptions(["--direct_num_workers", "1"])) as p:
        batches, _ = p | ExtractEdges(match_inputs([pattern]))
        _ = (
            batches
            | beam.Map(lambda b: len(b[0]))
            | beam.CombineGlobally(sum)
            | beam.Map(lambda n: print(f"extracted {n} edges", flush=True))
        )


def write_edges(num_edges: int, work_dir: str) -> str:
    """graph_stage_job's graph as a `src dst` text file of integer ids (cached)."""
    path = os.path.join(work_dir, f"powerlaw_{num_edges}.txt")
    if not os.path.exists(path):
        with open(path + ".tmp", "w") as f:
            for i, start in enumerate(range(0, num_edges, BATCH_EDGES)):
                src, dst = edge_batch(
                    0, i, min(BATCH_EDGES, num_edges - start), max(num_edges // 8, 1)
                )
                # bare integer ids: a line of two `n<id>` words would read as a header line
                f.write("".join(f"{a[1:]} {b[1:]}\n" for a, b in zip(src, dst)))
        os.rename(path + ".tmp", path)
    return path


def measured(cmd: list, log: str) -> dict:
    """A job in a child: wall, CPU, peak memory of its process tree, exit status."""
    child = run_child(cmd, log=log, tree=True, check=False)
    return {
        "wall_s": child.wall_s,
        "cpu_s": child.cpu_s,
        "peak_gib": child.peak_gib,
        "exit": child.returncode,
    }


def job_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "webgraph_pipeline", *args]


def identical_outputs(a: str, b: str) -> bool:
    """Whether two output directories hold the same files with the same bytes."""
    names = sorted(os.listdir(a))
    return names == sorted(os.listdir(b)) and all(
        pathlib.Path(a, n).read_bytes() == pathlib.Path(b, n).read_bytes() for n in names
    )


def bench_wat(pages: int, args) -> dict:
    pattern, gen_s, size = wat_files.synthetic_wat(pages, args.work_dir, args.records_per_file)
    floor_s, responses = float("nan"), 0
    if args.read_floor:
        start = time.time()
        responses = wat_files.response_pages(pattern)
        floor_s = time.time() - start
    print(
        f"{pages:,} pages: WAT {size / 2**20:.1f} MiB in {len(glob.glob(pattern))} files "
        f"(written in {gen_s:.0f} s); plain read+parse floor {floor_s:.1f} s for "
        f"{responses:,} pages; {load_line()}",
        flush=True,
    )
    row = {
        "pages": pages,
        "wat_bytes": size,
        "write_wat_s": gen_s,
        "read_floor_s": floor_s,
        "runs": {},
        "extract_only": {"exit": None},
    }
    if args.extract_only:
        log = os.path.join(args.work_dir, f"extract_{pages}.log")
        e = row["extract_only"] = measured(
            [sys.executable, "-m", MODULE, "--extract_only_job", pattern], log
        )
        print(
            f"  extraction only (ExtractEdges, 1 worker): {e['wall_s']:7.1f} s wall, "
            f"{e['cpu_s']:.1f} CPU s, peak RSS {e['peak_gib']:.2f} GiB"
            + (f" FAILED (exit {e['exit']})" if e["exit"] else "")
        )
    for workers in args.workers:
        out = os.path.join(args.work_dir, f"out_{pages}_{workers}")
        mode = (
            ["--direct_num_workers", "1"]
            if workers == 1
            else ["--direct_running_mode", "multi_processing", "--direct_num_workers", str(workers)]
        )
        r = measured(
            job_cmd("--input", pattern, "--output", out, *args.job_flags.split(), *mode),
            out + ".log",
        )
        if r["exit"]:
            print(f"  {workers} worker(s): FAILED (exit {r['exit']}), see {out}.log", flush=True)
            row["runs"][workers] = r
            continue
        with open(os.path.join(out, "stats.json")) as f:
            stats = json.load(f)
        r.update(nodes=stats["nodes"], edges=stats["edges"])
        print(
            f"  whole job, {workers} worker(s): {r['wall_s']:7.1f} s wall, "
            f"{r['cpu_s']:.1f} CPU s, peak RSS {r['peak_gib']:.2f} GiB, "
            f"{pages / r['wall_s']:,.0f} pages/s; graph {stats['nodes']:,} nodes "
            f"{stats['edges']:,} edges; {load_line()}",
            flush=True,
        )
        row["runs"][workers] = r
    runs, extract = row["runs"], row["extract_only"]
    if runs.get(1, {}).get("exit") == 0 and extract["exit"] == 0:
        print(
            f"  whole job / extraction only (1 worker): "
            f"{runs[1]['wall_s'] / extract['wall_s']:.2f}x wall, "
            f"{runs[1]['cpu_s'] / extract['cpu_s']:.2f}x CPU; DirectRunner / plain read floor: "
            f"{runs[1]['wall_s'] / floor_s:.1f}x",
            flush=True,
        )
    if runs.get(1, {}).get("exit") == 0 and runs.get(2, {}).get("exit") == 0:
        same = row["identical_1_vs_2"] = identical_outputs(
            os.path.join(args.work_dir, f"out_{pages}_1"),
            os.path.join(args.work_dir, f"out_{pages}_2"),
        )
        print(
            f"  1 worker / 2 workers wall: {runs[1]['wall_s'] / runs[2]['wall_s']:.2f}x; "
            f"outputs byte-identical: {same}",
            flush=True,
        )
    return row


def bench_edges(num_edges: int, args, text: bool) -> dict:
    """The graph stage alone (`text` False) or the whole job on the text edge list."""
    if text:
        path = write_edges(num_edges, args.work_dir)
        out = os.path.join(args.work_dir, f"text_{num_edges}")
        cmd = job_cmd(
            "--input_format",
            "edges",
            "--input",
            path,
            "--output",
            out,
            "--min_links",
            "3",
            "--num_shards",
            "8",
            "--direct_num_workers",
            "1",
        )
        mib = os.path.getsize(path) / 2**20
        what = f"whole job on a {num_edges:,}-edge text edge list ({mib:.0f} MiB)"
    else:
        out = os.path.join(args.work_dir, f"graph_{num_edges}")
        cmd = [sys.executable, "-m", MODULE, "--graph_stage_job", str(num_edges), out]
        what = f"graph stage, {num_edges:,} power-law edges in"
    row = dict(measured(cmd, out + ".log"), edges_in=num_edges)
    if row["exit"]:
        print(f"{what}: FAILED (exit {row['exit']}), see {out}.log", flush=True)
        return row
    if not text:
        with open(os.path.join(out, "stats.json")) as f:
            stats = json.load(f)
        row.update(nodes=stats["nodes"], edges=stats["edges"])
        what += f" ({stats['edges']:,} kept, {stats['nodes']:,} nodes)"
    print(
        f"{what}: {row['wall_s']:.1f} s wall, {row['cpu_s']:.1f} CPU s, "
        f"{num_edges / row['cpu_s']:,.0f} edges/s/core, {row['cpu_s'] / num_edges * 1e6:.2f} CPU "
        f"us/edge, peak RSS {row['peak_gib']:.2f} GiB; {load_line()}",
        flush=True,
    )
    return row


def print_marginal_costs(rows: list[dict], what: str) -> None:
    """CPU us per edge between consecutive sizes: the per-edge cost without the fixed start-up
    (imports of Beam and TensorFlow, pipeline construction), and the start-up it implies."""
    done = sorted((r for r in rows if r.get("exit") == 0), key=lambda r: r["edges_in"])
    for a, b in zip(done, done[1:]):
        per_edge = (b["cpu_s"] - a["cpu_s"]) / (b["edges_in"] - a["edges_in"])
        fixed = a["cpu_s"] - per_edge * a["edges_in"]
        print(
            f"{what}, {a['edges_in']:,} -> {b['edges_in']:,} edges: {per_edge * 1e6:.2f} CPU us "
            f"per extra edge ({1 / per_edge:,.0f} edges/s/core beyond a fixed {fixed:.1f} CPU s)",
            flush=True,
        )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog=f"python -m {MODULE}",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--wat_records", type=int, default=0, help="extraction per core on this many records"
    )
    ap.add_argument(
        "--repeat", type=int, default=1, help="(--wat_records) runs per method, the best kept"
    )
    ap.add_argument(
        "--pages",
        type=int,
        nargs="*",
        help="whole-job runs on this many pages (default 20000 "
        "when nothing else is asked; give none to skip)",
    )
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--work_dir", default="/tmp/webgraph_bench")
    ap.add_argument("--records_per_file", type=int, default=5_000)
    ap.add_argument(
        "--job_flags",
        default="--min_links 3 --num_shards 8",
        help="graph flags for the job (default: K=3, 8 shards)",
    )
    ap.add_argument(
        "--graph_edges",
        type=int,
        nargs="*",
        default=[],
        help="sizes (edges) of graph-stage-only runs on generated power-law batches",
    )
    ap.add_argument(
        "--text_edges",
        type=int,
        nargs="*",
        default=[],
        help="sizes (edges) of whole-job runs on the same graph as a text edge list",
    )
    ap.add_argument(
        "--no_read_floor",
        dest="read_floor",
        action="store_false",
        help="skip the plain read of the WAT files (a floor, about 2 min at 1M pages)",
    )
    ap.add_argument(
        "--no_extract_only",
        dest="extract_only",
        action="store_false",
        help="skip the extraction-only job (to split a long series into runs)",
    )
    ap.add_argument(
        "--reader",
        nargs="*",
        default=[],
        choices=sorted(SIZES),
        help="sizes of the reader comparison (ours against tf.data)",
    )
    ap.add_argument("--reader_repeats", type=int, default=3, help="passes of each reader")
    ap.add_argument("--chunk_rows", type=int, default=2048, help="rows per chunk of the readers")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--graph_stage_job", nargs=2, metavar=("EDGES", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--extract_only_job", metavar="GLOB", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.graph_stage_job:
        graph_stage_job(int(args.graph_stage_job[0]), args.graph_stage_job[1])
        return 0
    if args.extract_only_job:
        extract_only_job(args.extract_only_job)
        return 0
    if args.pages is None:
        asked = args.wat_records or args.graph_edges or args.text_edges or args.reader
        args.pages = [] if asked else [20_000]
    os.makedirs(args.work_dir, exist_ok=True)
    results = {
        "extraction": bench_extraction(args.wat_records, args.repeat, args.work_dir)
        if args.wat_records
        else None
    }
    results["wat"] = [bench_wat(pages, args) for pages in args.pages]
    results["graph_stage"] = [bench_edges(n, args, text=False) for n in args.graph_edges]
    results["text_edges"] = [bench_edges(n, args, text=True) for n in args.text_edges]
    print_marginal_costs(results["text_edges"], "text edge list (whole job)")
    print_marginal_costs(results["graph_stage"], "graph stage alone")
    if args.reader:
        # TensorFlow's import (in `reader`) only where the readers are compared
        from benchmarks.core.reader import reader_section

        results["reader"] = reader_section(
            args.reader, args.work_dir, args.reader_repeats, args.chunk_rows
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
