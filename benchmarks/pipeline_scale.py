"""Wall time, CPU time and peak memory of the WebGraph job on the DirectRunner, 1 vs 2 workers.

Generates a synthetic web-like graph (power-law degrees, ~10 links per page) of N pages, packs it
into gzipped WAT files with `webgraph_pipeline.wat_writer` (cached under --work_dir), then runs
`python -m webgraph_pipeline` on it once per worker setting, in a fresh process, and reports
wall time, peak resident memory of the whole process tree (sampled from /proc every 0.2 s),
throughput, and the 1-worker / 2-worker ratio. As a floor it also times the plain read of the same
files (warcio + JSON parse, one process), the least any extraction must do, and the extraction
stage alone as a Beam job (`ExtractEdges` counting its edges), so whole job / extraction-only is the
graph stage's share.

The graph stage alone (`--graph_edges N ...`): edge batches of a generated power-law graph (node
`i` drawn as floor(n u^3), so degrees follow a power law of exponent 2.5; n = edges / 8) are made
inside the job from (seed, batch index), then BuildWebGraph -> WriteTfRecords: edges per CPU-second
(edges/s/core), wall, peak memory, and CPU microseconds per edge at each size. `--text_edges N ...`
writes the same graph as a `src dst` text file and runs the whole job on it (`--input_format edges`,
parsing included).

  python benchmarks/pipeline_scale.py --pages 20000 100000 --workers 1 2
  python benchmarks/pipeline_scale.py --pages 1000000 --workers 1 2 --graph_edges 1000000 3000000 10000000 \
      --text_edges 10000000
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def tree_rss_bytes(root_pid: int) -> int:
    """Resident memory of a process and all its descendants (Linux /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            fields = stat[stat.rindex(")") + 2:].split()
            pid, ppid, pages = int(entry), int(fields[1]), int(fields[21])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(pid)
        rss[pid] = pages * page
    total, stack = 0, [root_pid]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack.extend(children.get(pid, []))
    return total


def run_measured(cmd: list[str], log_path: str) -> tuple[float, int, int, float]:
    """(wall seconds, peak tree RSS bytes, exit code, CPU seconds of the command's processes)."""
    start = time.time()
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak = 0
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        while proc.poll() is None:
            peak = max(peak, tree_rss_bytes(proc.pid))
            time.sleep(0.2)
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime
    return time.time() - start, peak, proc.returncode, cpu


BATCH_EDGES = 100_000


def powerlaw_batch(seed: int, index: int, size: int, num_nodes: int) -> tuple[list[str], list[str]]:
    """One batch of a generated power-law graph: node ids floor(n u^3), scrambled, as `n<id>` names."""
    import numpy as np

    rng = np.random.default_rng([seed, index])
    ends = (num_nodes * rng.random((2, size)) ** 3).astype(np.int64)
    ends = (ends * 2654435761) % num_nodes  # spread the popular ids over the id range
    names = np.char.add("n", ends.astype(str))
    return names[0].tolist(), names[1].tolist()


def graph_stage_job(num_edges: int, out: str) -> None:
    """The graph stage alone: power-law batches made in the job -> BuildWebGraph -> WriteTfRecords."""
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
            | beam.MapTuple(lambda i, n: powerlaw_batch(0, i, n, max(num_edges // 8, 1)))
            | BuildWebGraph(config)
        )
        graph | WriteTfRecords(out, config.to_dict(), ["generated"], num_shards=8)


def write_powerlaw_edges(num_edges: int, work_dir: str) -> str:
    """The same generated graph as graph_stage_job's, as a `src dst` text file of integer ids (cached)."""
    path = os.path.join(work_dir, f"powerlaw_{num_edges}.txt")
    if not os.path.exists(path):
        with open(path + ".tmp", "w") as f:
            for i, start in enumerate(range(0, num_edges, BATCH_EDGES)):
                src, dst = powerlaw_batch(0, i, min(BATCH_EDGES, num_edges - start), max(num_edges // 8, 1))
                # bare integer ids: a line of two `n<id>` words would read as a header line
                f.write("".join(f"{a[1:]} {b[1:]}\n" for a, b in zip(src, dst)))
        os.rename(path + ".tmp", path)
    return path


def extract_only_job(pattern: str) -> None:
    """The extraction stage alone, as a Beam job: ExtractEdges, then count the edges."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from webgraph_pipeline.extract import ExtractEdges
    from webgraph_pipeline.pipeline import match_inputs

    with beam.Pipeline(options=PipelineOptions(["--direct_num_workers", "1"])) as p:
        _ = (p | ExtractEdges(match_inputs([pattern])) | beam.Map(lambda b: len(b[0]))
             | beam.CombineGlobally(sum) | beam.Map(lambda n: print(f"extracted {n} edges", flush=True)))


def make_wat(pages: int, work_dir: str, records_per_file: int) -> tuple[str, float, int]:
    """(glob, seconds to write, bytes) of the cached WAT input for `pages` pages."""
    from webgraph_pipeline.wat_writer import synthetic_pages, write_wat_files

    out = os.path.join(work_dir, f"wat_{pages}")
    pattern = os.path.join(out, "*.warc.wat.gz")
    done = os.path.join(out, "DONE")
    seconds = 0.0
    if not os.path.exists(done):
        start = time.time()
        write_wat_files(synthetic_pages(pages, mean_out=10, seed=0), out, records_per_file)
        seconds = time.time() - start
        with open(done, "w") as f:
            f.write(f"{seconds}\n")
    else:
        seconds = float(open(done).read())
    size = sum(os.path.getsize(f) for f in glob.glob(pattern))
    return pattern, seconds, size


def read_floor(pattern: str) -> tuple[float, int]:
    """Seconds to read and JSON-parse every record of the files in one process; response records."""
    import orjson
    from warcio.archiveiterator import ArchiveIterator

    start, n = time.time(), 0
    for path in sorted(glob.glob(pattern)):
        with open(path, "rb") as f:
            for record in ArchiveIterator(f):
                if record.rec_type == "metadata":
                    payload = orjson.loads(record.content_stream().read())
                    n += "HTTP-Response-Metadata" in payload["Envelope"]["Payload-Metadata"]
    return time.time() - start, n


def load_line() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def job_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "webgraph_pipeline", *args]


def identical_outputs(a: str, b: str) -> bool:
    """Whether two output directories hold the same files with the same bytes."""
    names = sorted(os.listdir(a))
    return names == sorted(os.listdir(b)) and all(
        open(os.path.join(a, n), "rb").read() == open(os.path.join(b, n), "rb").read() for n in names)


def bench_wat(pages: int, args) -> dict:
    pattern, gen_s, size = make_wat(pages, args.work_dir, args.records_per_file)
    floor_s, responses = read_floor(pattern) if args.read_floor else (float("nan"), 0)
    print(f"{pages:,} pages: WAT {size / 2**20:.1f} MiB in {len(glob.glob(pattern))} files "
          f"(written in {gen_s:.0f} s); plain read+parse floor {floor_s:.1f} s for {responses:,} pages; "
          f"{load_line()}", flush=True)
    row = {"pages": pages, "wat_bytes": size, "write_wat_s": gen_s, "read_floor_s": floor_s, "runs": {}}
    row["extract_only"] = {"exit": None}
    if args.extract_only:
        wall, peak, code, cpu = run_measured([sys.executable, __file__, "--extract_only_job", pattern],
                                             os.path.join(args.work_dir, f"extract_{pages}.log"))
        row["extract_only"] = {"wall_s": wall, "cpu_s": cpu, "peak_rss_bytes": peak, "exit": code}
        print(f"  extraction only (ExtractEdges, 1 worker): {wall:7.1f} s wall, {cpu:.1f} CPU s, "
              f"peak RSS {peak / 2**30:.2f} GiB" + ("" if code == 0 else f" FAILED (exit {code})"), flush=True)
    for workers in args.workers:
        out = os.path.join(args.work_dir, f"out_{pages}_{workers}")
        mode = ["--direct_num_workers", "1"] if workers == 1 else [
            "--direct_running_mode", "multi_processing", "--direct_num_workers", str(workers)]
        cmd = job_cmd("--input", pattern, "--output", out, *args.job_flags.split(), *mode)
        wall, peak, code, cpu = run_measured(cmd, out + ".log")
        if code != 0:
            print(f"  {workers} worker(s): FAILED (exit {code}), see {out}.log", flush=True)
            row["runs"][workers] = {"exit": code}
            continue
        stats = json.load(open(os.path.join(out, "stats.json")))
        print(f"  whole job, {workers} worker(s): {wall:7.1f} s wall, {cpu:.1f} CPU s, peak RSS "
              f"{peak / 2**30:.2f} GiB, {pages / wall:,.0f} pages/s; graph {stats['nodes']:,} nodes "
              f"{stats['edges']:,} edges; {load_line()}", flush=True)
        row["runs"][workers] = {"wall_s": wall, "cpu_s": cpu, "peak_rss_bytes": peak, "nodes": stats["nodes"],
                                "edges": stats["edges"]}
    runs = row["runs"]
    if "wall_s" in runs.get(1, {}) and row["extract_only"]["exit"] == 0:
        extract = row["extract_only"]
        print(f"  whole job / extraction only (1 worker): {runs[1]['wall_s'] / extract['wall_s']:.2f}x wall, "
              f"{runs[1]['cpu_s'] / extract['cpu_s']:.2f}x CPU; DirectRunner / plain read floor: "
              f"{runs[1]['wall_s'] / floor_s:.1f}x", flush=True)
    if "wall_s" in runs.get(1, {}) and "wall_s" in runs.get(2, {}):
        same = identical_outputs(os.path.join(args.work_dir, f"out_{pages}_1"),
                                 os.path.join(args.work_dir, f"out_{pages}_2"))
        row["identical_1_vs_2"] = same
        print(f"  1 worker / 2 workers wall: {runs[1]['wall_s'] / runs[2]['wall_s']:.2f}x; "
              f"outputs byte-identical: {same}", flush=True)
    return row


def bench_graph_stage(num_edges: int, args) -> dict:
    out = os.path.join(args.work_dir, f"graph_{num_edges}")
    wall, peak, code, cpu = run_measured([sys.executable, __file__, "--graph_stage_job", str(num_edges), out],
                                         out + ".log")
    row = {"edges_in": num_edges, "wall_s": wall, "cpu_s": cpu, "peak_rss_bytes": peak, "exit": code}
    if code == 0:
        stats = json.load(open(os.path.join(out, "stats.json")))
        row.update(nodes=stats["nodes"], edges=stats["edges"])
        print(f"graph stage, {num_edges:,} power-law edges in ({stats['edges']:,} kept, {stats['nodes']:,} nodes): "
              f"{wall:.1f} s wall, {cpu:.1f} CPU s, {num_edges / cpu:,.0f} edges/s/core, "
              f"{cpu / num_edges * 1e6:.2f} CPU us/edge, peak RSS {peak / 2**30:.2f} GiB; {load_line()}", flush=True)
    else:
        print(f"graph stage, {num_edges:,} edges: FAILED (exit {code}), see {out}.log", flush=True)
    return row


def bench_text_edges(num_edges: int, args) -> dict:
    path = write_powerlaw_edges(num_edges, args.work_dir)
    out = os.path.join(args.work_dir, f"text_{num_edges}")
    cmd = job_cmd("--input_format", "edges", "--input", path, "--output", out, "--min_links", "3",
                  "--num_shards", "8", "--direct_num_workers", "1")
    wall, peak, code, cpu = run_measured(cmd, out + ".log")
    print(f"whole job on a {num_edges:,}-edge text edge list ({os.path.getsize(path) / 2**20:.0f} MiB): "
          f"{wall:.1f} s wall, {cpu:.1f} CPU s, {num_edges / cpu:,.0f} edges/s/core, peak RSS "
          f"{peak / 2**30:.2f} GiB" + ("" if code == 0 else f" FAILED (exit {code})") + f"; {load_line()}", flush=True)
    return {"edges_in": num_edges, "wall_s": wall, "cpu_s": cpu, "peak_rss_bytes": peak, "exit": code}


def print_marginal_costs(rows: list[dict], what: str) -> None:
    """CPU us per edge between consecutive sizes: the per-edge cost without the fixed start-up
    (imports of Beam and TensorFlow, pipeline construction), and the start-up it implies."""
    done = sorted((r for r in rows if r.get("exit") == 0), key=lambda r: r["edges_in"])
    for a, b in zip(done, done[1:]):
        per_edge = (b["cpu_s"] - a["cpu_s"]) / (b["edges_in"] - a["edges_in"])
        fixed = a["cpu_s"] - per_edge * a["edges_in"]
        print(f"{what}, {a['edges_in']:,} -> {b['edges_in']:,} edges: {per_edge * 1e6:.2f} CPU us per extra edge "
              f"({1 / per_edge:,.0f} edges/s/core beyond a fixed {fixed:.1f} CPU s)", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pages", type=int, nargs="*", default=[20_000])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--work_dir", default="/tmp/webgraph_bench")
    ap.add_argument("--records_per_file", type=int, default=5_000)
    ap.add_argument("--job_flags", default="--min_links 3 --num_shards 8",
                    help="graph flags for the job (default: K=3, 8 shards)")
    ap.add_argument("--graph_edges", type=int, nargs="*", default=[],
                    help="sizes (edges) of the graph-stage-only runs on generated power-law batches")
    ap.add_argument("--text_edges", type=int, nargs="*", default=[],
                    help="sizes (edges) of whole-job runs on the same graph as a text edge list")
    ap.add_argument("--no_read_floor", dest="read_floor", action="store_false",
                    help="skip the plain read of the WAT files (a floor, about 2 min at 1M pages)")
    ap.add_argument("--no_extract_only", dest="extract_only", action="store_false",
                    help="skip the extraction-only job (to split a long series into runs of its parts)")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--graph_stage_job", nargs=2, metavar=("EDGES", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--extract_only_job", metavar="GLOB", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.graph_stage_job:
        graph_stage_job(int(args.graph_stage_job[0]), args.graph_stage_job[1])
        return 0
    if args.extract_only_job:
        extract_only_job(args.extract_only_job)
        return 0
    os.makedirs(args.work_dir, exist_ok=True)
    results = {"wat": [bench_wat(pages, args) for pages in args.pages]}
    results["graph_stage"] = [bench_graph_stage(n, args) for n in args.graph_edges]
    results["text_edges"] = [bench_text_edges(n, args) for n in args.text_edges]
    print_marginal_costs(results["text_edges"], "text edge list (whole job)")
    print_marginal_costs(results["graph_stage"], "graph stage alone")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
