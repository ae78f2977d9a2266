"""Wall time and peak memory of the whole WebGraph job on the DirectRunner, 1 vs 2 workers.

Generates a synthetic web-like graph (power-law degrees, ~10 links per page) of N pages, packs it
into gzipped WAT files with `webgraph_pipeline.wat_writer` (cached under --work_dir), then runs
`python -m webgraph_pipeline` on it once per worker setting, in a fresh process, and reports
wall time, peak resident memory of the whole process tree (sampled from /proc every 0.2 s),
throughput, and the 1-worker / 2-worker ratio. As a floor it also times the plain read of the same
files (warcio + JSON parse, one process), the least any extraction must do.

  python benchmarks/pipeline_scale.py --pages 20000 100000 --workers 1 2
"""

from __future__ import annotations

import argparse
import glob
import json
import os
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


def run_measured(cmd: list[str], log_path: str) -> tuple[float, int, int]:
    """(wall seconds, peak tree RSS bytes, exit code) of a command."""
    start = time.time()
    peak = 0
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        while proc.poll() is None:
            peak = max(peak, tree_rss_bytes(proc.pid))
            time.sleep(0.2)
    return time.time() - start, peak, proc.returncode


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


def make_edge_list(pages: int, work_dir: str) -> str:
    """The same synthetic graph as a `src dst` URL edge list (cached), for the graph-only run."""
    from webgraph_pipeline.wat_writer import synthetic_pages

    path = os.path.join(work_dir, f"edges_{pages}.txt")
    if not os.path.exists(path):
        with open(path + ".tmp", "w") as f:
            for url, links in synthetic_pages(pages, mean_out=10, seed=0):
                f.writelines(f"{url} {t}\n" for t in links)
        os.rename(path + ".tmp", path)
    return path


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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pages", type=int, nargs="+", default=[20_000])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--work_dir", default="/tmp/webgraph_bench")
    ap.add_argument("--records_per_file", type=int, default=5_000)
    ap.add_argument("--job_flags", default="--min_links 3 --num_shards 8",
                    help="graph flags for the job (default: K=3, 8 shards)")
    ap.add_argument("--edges_too", action="store_true",
                    help="also run the same graph as an edge list (1 worker): the job minus WAT extraction")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)
    results = []
    for pages in args.pages:
        pattern, gen_s, size = make_wat(pages, args.work_dir, args.records_per_file)
        floor_s, responses = read_floor(pattern)
        print(f"{pages:,} pages: WAT {size / 2**20:.1f} MiB in {len(glob.glob(pattern))} files "
              f"(written in {gen_s:.0f} s); plain read+parse floor {floor_s:.1f} s for {responses:,} pages",
              flush=True)
        row = {"pages": pages, "wat_bytes": size, "write_wat_s": gen_s, "read_floor_s": floor_s, "runs": {}}
        for workers in args.workers:
            out = os.path.join(args.work_dir, f"out_{pages}_{workers}")
            mode = ["--direct_num_workers", "1"] if workers == 1 else [
                "--direct_running_mode", "multi_processing", "--direct_num_workers", str(workers)]
            cmd = [sys.executable, "-m", "webgraph_pipeline", "--input", pattern, "--output", out,
                   *args.job_flags.split(), *mode]
            wall, peak, code = run_measured(cmd, out + ".log")
            if code != 0:
                print(f"  {workers} worker(s): FAILED (exit {code}), see {out}.log", flush=True)
                row["runs"][workers] = {"exit": code}
                continue
            stats = json.load(open(os.path.join(out, "stats.json")))
            print(f"  {workers} worker(s): {wall:7.1f} s wall, peak RSS {peak / 2**30:.2f} GiB, "
                  f"{pages / wall:,.0f} pages/s; graph {stats['nodes']:,} nodes {stats['edges']:,} edges",
                  flush=True)
            row["runs"][workers] = {"wall_s": wall, "peak_rss_bytes": peak, "nodes": stats["nodes"],
                                    "edges": stats["edges"]}
        if args.edges_too:
            out = os.path.join(args.work_dir, f"out_{pages}_edges")
            cmd = [sys.executable, "-m", "webgraph_pipeline", "--input_format", "edges",
                   "--input", make_edge_list(pages, args.work_dir), "--output", out, *args.job_flags.split()]
            wall, peak, code = run_measured(cmd, out + ".log")
            print(f"  edge-list input, 1 worker: {wall:7.1f} s wall, peak RSS {peak / 2**30:.2f} GiB"
                  + ("" if code == 0 else f" FAILED (exit {code})"), flush=True)
            row["runs"]["edges"] = {"wall_s": wall, "peak_rss_bytes": peak, "exit": code}
        runs = row["runs"]
        if 1 in runs and 2 in runs and "wall_s" in runs[1] and "wall_s" in runs[2]:
            print(f"  ratio 1 worker / 2 workers: {runs[1]['wall_s'] / runs[2]['wall_s']:.2f}x; "
                  f"DirectRunner (1 worker) / plain read floor: {runs[1]['wall_s'] / floor_s:.1f}x", flush=True)
        results.append(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
