"""Ours vs implicit 0.7.x (CPU) on generated power-law matrices: seconds per epoch, peak memory, work rates.

    python benchmarks/trainer_scale.py [--sizes ml1m,25m,60m] [--dims 64,128] [--epochs 3] [--cg_iters 3]
                                       [--work /tmp/trainer_scale] [--hugepages both|on|off]
                                       [--ours_flags='--stream_batches ...'] [--train_loss both|off|on]

Each size is written once by `python -m webgraph_contract.synthetic_matrix` (seeded, reused when
its stats.json matches); `ml1m-real` is MovieLens-1M itself, the training split of
`ials_vs_implicit.py` (90% of the users), made by the pipeline once. Then, per size and d, every
trainer runs in its own subprocess under `/usr/bin/time -v` (peak RSS): ours as a new user runs
it (`python -m alx_trainer train ... --eval_every 0`, the CLI's CPU split and 'owner' layout),
and implicit's CPU ALS with `use_cg`, the same d, `cg_steps` = our `cg_iters`, `num_threads` =
the cores, BLAS at one thread, on the same TFRecords read into a CSR matrix. Seconds per epoch
are medians over the epochs after the first (ours compiles in its first). `--hugepages`: ours
with glibc's `malloc.hugetlb=1` tunable (large allocations, the tables among them, on transparent
huge pages), without, or both. `--ours_flags`:
more `alx_trainer train` flags for ours (e.g. `--stream_batches` for the in-sparse size).
`--train_loss`: the same work both ways, each line saying which: `off`, neither computes the
training loss (ours `--train_loss_every 0`, implicit `calculate_training_loss=False`); `on`, both
do, every epoch (ours' default, one more pass over the column side's pairs; implicit's `True`).
Each ratio is against implicit with the same setting.

Work per epoch is counted, not measured: FLOPs of the matrix-free CG (`epoch_work`) and the
bytes the steps must move at least (every gathered embedding once per pass that reads it); rates
are set against the machine's matmul peak (a large float32 `jnp.dot`) and memory bandwidth (a
large NumPy copy), both measured here.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time
from typing import Sequence

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

# name -> (rows, cols, nnz)
SIZES = {
    "ml1m": (6_040, 3_706, 1_000_000),
    "25m": (1_000_000, 250_000, 25_000_000),
    "60m": (2_500_000, 600_000, 60_000_000),
    "in-sparse": (1_500_000, 1_500_000, 149_000_000),
    "de-sparse": (19_700_000, 19_700_000, 1_190_000_000),
}
HUGEPAGES_ENV = "glibc.malloc.hugetlb=1"
REAL = "ml1m-real"  # MovieLens-1M itself: `ials_vs_implicit`'s held-out-users split, made by the pipeline


def ensure_matrix(work: str, name: str, seed: int = 0) -> str:
    out = os.path.join(work, f"matrix-{name}")
    if name == REAL:
        if not os.path.exists(os.path.join(out, "stats.json")):
            from ials_vs_implicit import build_split

            build_split(out, seed)
        return out
    rows, cols, nnz = SIZES[name]
    stats_path = os.path.join(out, "stats.json")
    if os.path.exists(stats_path):
        stats = json.load(open(stats_path))
        if (stats.get("num_rows"), stats.get("num_cols"), stats.get("edges"), stats.get("config", {}).get("seed")) == (
            rows, cols, nnz, seed
        ):
            return out
    cmd = [sys.executable, "-m", "webgraph_contract.synthetic_matrix", "--out", out, "--rows", str(rows),
           "--cols", str(cols), "--nnz", str(nnz), "--seed", str(seed)]
    run = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if run.returncode:
        raise RuntimeError(f"generator failed: {run.stderr.strip().splitlines()[-1]}")
    print(run.stdout.strip(), flush=True)
    return out


def timed(cmd: list[str], env: dict | None = None) -> tuple[str, float]:
    """Run `cmd` under /usr/bin/time -v; its stdout and peak RSS in GiB."""
    run = subprocess.run(["/usr/bin/time", "-v", *cmd], cwd=REPO, capture_output=True, text=True,
                         env=dict(os.environ, **(env or {})))
    if run.returncode:
        raise RuntimeError(f"{' '.join(cmd[:4])} failed:\n{run.stderr[-3000:]}")
    peak_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", run.stderr).group(1))
    return run.stdout, peak_kb / 2**20


def run_ours(data: str, dim: int, epochs: int, cg_iters: int, hugepages: bool, flags: Sequence[str] = (),
             train_loss: bool = True) -> dict:
    with tempfile.TemporaryDirectory() as model_dir:
        cmd = [sys.executable, "-m", "alx_trainer", "train", "--data", data, "--model_dir", model_dir,
               "--dim", str(dim), "--epochs", str(epochs), "--cg_iters", str(cg_iters), "--eval_every", "0",
               "--checkpoint_every", "0", "--no-progress", "--train_loss_every", str(int(train_loss)), *flags]
        _, peak = timed(cmd, {"GLIBC_TUNABLES": HUGEPAGES_ENV} if hugepages else {"GLIBC_TUNABLES": ""})
        records = [json.loads(line) for line in open(os.path.join(model_dir, "metrics.jsonl"))]
    seconds = [r["seconds"] for r in records]
    return {"seconds": seconds, "s_per_epoch": float(np.median(seconds[1:] or seconds)), "peak_gib": peak}


def implicit_worker(data: str, dim: int, epochs: int, cg_iters: int, threads: int, train_loss: bool) -> None:
    """(subprocess) implicit's CPU ALS on the dataset's train split; prints its per-epoch seconds as JSON."""
    import scipy.sparse as sp
    from implicit.cpu.als import AlternatingLeastSquares
    from threadpoolctl import threadpool_limits

    from alx_trainer.data import records
    from webgraph_contract import layout, stats_json

    stats = stats_json.read_stats(data)
    num_rows, num_cols = stats_json.matrix_shape(stats)
    files = list(layout.iter_split_files(data, "train"))
    rows, cols = [], []
    for chunk in records.read_chunks(files, 8192, num_rows, num_cols):
        rows.append(np.repeat(chunk.row_ids, chunk.lengths))
        cols.append(chunk.cols)
    row_ids, col_ids = np.concatenate(rows), np.concatenate(cols)
    del rows, cols
    user_items = sp.csr_matrix((np.ones(len(col_ids), np.float32), (row_ids, col_ids)), shape=(num_rows, num_cols))
    del row_ids, col_ids
    model = AlternatingLeastSquares(factors=dim, regularization=1.0, alpha=10.0, iterations=epochs, use_cg=True,
                                    random_state=0, num_threads=threads, calculate_training_loss=train_loss)
    model.cg_steps = cg_iters
    seconds: list[float] = []
    with threadpool_limits(1, "blas"):  # implicit's own advice: its threads, not BLAS's
        model.fit(user_items, show_progress=False, callback=lambda it, elapsed, loss: seconds.append(elapsed))
    print(json.dumps({"seconds": seconds}))


def run_implicit(data: str, dim: int, epochs: int, cg_iters: int, threads: int, train_loss: bool) -> dict:
    cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), "--implicit_worker", "--data", data, "--dims", str(dim),
           "--epochs", str(epochs), "--cg_iters", str(cg_iters), "--threads", str(threads),
           "--train_loss", "on" if train_loss else "off"]
    out, peak = timed(cmd)
    seconds = json.loads(out.strip().splitlines()[-1])["seconds"]
    return {"seconds": seconds, "s_per_epoch": float(np.median(seconds[1:] or seconds)), "peak_gib": peak}


def epoch_work(num_rows: int, num_cols: int, nnz: int, dim: int, cg_iters: int,
               table_bytes: int = 4) -> tuple[float, float]:
    """(FLOPs, bytes) of one epoch's useful work, both sides, tables of `table_bytes` per value.

    FLOPs as `ials_vs_implicit.epoch_flops`: per side b and r0 (3 |S| d), cg_iters matvecs
    (4 |S| d + 2 R d^2 each), the observed loss (2 |S| d), the gramian (2 N d^2). Bytes: each
    observed pair's fixed-table row gathered once (d table_bytes) plus its id (4), every solved row
    read and written (2 d table_bytes) and the fixed table read for the gramian (N d table_bytes).
    """
    flops = byte_count = 0.0
    for solved, other in ((num_rows, num_cols), (num_cols, num_rows)):
        flops += 3 * nnz * dim + cg_iters * (4 * nnz * dim + 2 * solved * dim**2) + 2 * nnz * dim + 2 * other * dim**2
        byte_count += nnz * (table_bytes * dim + 4) + solved * 2 * table_bytes * dim + other * table_bytes * dim
    return flops, byte_count


def memory_bandwidth(mib: int = 512, repeats: int = 3) -> float:
    """Bytes/s of a large NumPy copy (read + write counted)."""
    a = np.ones(mib * 2**20 // 8)
    b = np.empty_like(a)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t)
    return 2 * a.nbytes / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="ml1m,25m", help=f"comma-separated, of {sorted(SIZES) + [REAL]}")
    parser.add_argument("--dims", default="64,128")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--cg_iters", type=int, default=3)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "trainer_scale"))
    parser.add_argument("--hugepages", choices=("both", "on", "off"), default="both")
    parser.add_argument("--ours_flags", default="", help="more flags for ours, e.g. '--stream_batches'")
    parser.add_argument("--train_loss", choices=("both", "off", "on"), default="both",
                        help="training loss computed by neither (off), by both (on), or each way in turn")
    parser.add_argument("--data", help="(with --implicit_worker) the dataset directory")
    parser.add_argument("--implicit_worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.implicit_worker:
        implicit_worker(args.data, int(args.dims), args.epochs, args.cg_iters, args.threads, args.train_loss == "on")
        return
    from ials_vs_implicit import matmul_peak

    os.makedirs(args.work, exist_ok=True)
    peak_flops, bandwidth = matmul_peak(), memory_bandwidth()
    print(f"machine: matmul peak {peak_flops / 1e9:.1f} GFLOP/s, copy bandwidth {bandwidth / 1e9:.1f} GB/s, "
          f"load {os.getloadavg()[0]:.1f}; ours: {args.ours_flags or 'CLI defaults'}", flush=True)
    modes = {"both": (True, False), "on": (True,), "off": (False,)}[args.hugepages]
    for name in args.sizes.split(","):
        data = ensure_matrix(args.work, name)
        stats = json.load(open(os.path.join(data, "stats.json")))
        for dim in (int(d) for d in args.dims.split(",")):
            nnz = stats.get("split_edges", {}).get("train", stats["edges"])
            flops, byte_count = epoch_work(stats["num_rows"], stats["num_cols"], nnz, dim, args.cg_iters)
            for loss in {"both": (False, True), "off": (False,), "on": (True,)}[args.train_loss]:
                results = {}
                for hp in modes:  # ours and implicit interleaved in one run
                    results[f"ours{'+hp' if hp else ''}"] = run_ours(data, dim, args.epochs, args.cg_iters, hp,
                                                                     args.ours_flags.split(), loss)
                    if "implicit" not in results:
                        results["implicit"] = run_implicit(data, dim, args.epochs, args.cg_iters, args.threads, loss)
                base = results["implicit"]["s_per_epoch"]
                for who, r in results.items():
                    s = r["s_per_epoch"]
                    print(json.dumps({
                        "size": name, "dim": dim, "who": who, "train_loss": "on" if loss else "off",
                        "s_per_epoch": round(s, 3), "ratio": round(s / base, 3),
                        "peak_gib": round(r["peak_gib"], 2), "gflop_s": round(flops / s / 1e9, 2),
                        "pct_matmul_peak": round(100 * flops / s / peak_flops, 1),
                        "gb_s": round(byte_count / s / 1e9, 2), "pct_bandwidth": round(100 * byte_count / s / bandwidth, 1),
                        "epochs_s": [round(x, 2) for x in r["seconds"]], "load": round(os.getloadavg()[0], 1),
                    }), flush=True)

if __name__ == "__main__":
    main()
