"""Seconds per epoch at high dimensions on Gowalla: CG vs the iALS++ block solver vs implicit's CG.

    python benchmarks/high_dim.py [--data data/gowalla] [--dims 256,512,1024,2048] [--block_size 128]
        [--cg_iters 3] [--epochs 2] [--recall_max_dim 1024] [--implicit_max_dim 2048]

Data: the LightGCN Gowalla split (`train.txt`, `test.txt`: `user item item ...` per line; 29,858
users x 40,981 items, 810,128 training pairs), made into a dataset by the pipeline (`--edge_format given_split`); the
test pairs are used only for Recall@20.

Ours runs through the command line (`python -m alx_trainer train`, one process per fit), so each
solver gets the CPU devices the command line gives it: CG with the matrix-free product on one JAX
device per core ('owner' layout), the block solver (which calls LAPACK) on one device. Seconds per
epoch are the last epoch's `seconds` in `metrics.jsonl` (the first epoch includes compilation);
`fit CPU s` is the CPU time of the whole fit process (start-up, compilation, every epoch), a guide
when the machine is shared.
implicit (`implicit.cpu.als`, CG with the same number of steps, its own threads) runs in this
process on the same training pairs, interleaved with ours at each d. Recall@20 (LightGCN's
definition: hits / |test items|, all items ranked, training items excluded) of the trained user
rows after `--epochs` epochs (not a tuned figure) for d <= `--recall_max_dim`.

FLOPs per epoch are counted from the matrix shape (useful work only, both sides):
- CG, c steps: per side, b and the c+1 products (A p: 4|S|d for sum_i h_i (h_i.p), 2 n d^2 for G p),
  the loss pass (2|S|d) and the Gramian of the fixed table (2 m d^2).
- block, blocks of b: per side, the initial errors (2|S|d), per block the b x b statistics (2|S|b^2),
  the error-weighted sum (2|S|b) and the error update (2|S|b); per row and block the Gramian term
  (2 d b), the Cholesky factor (b^3/3) and two triangular solves (2 b^2); and the Gramian (2 m d^2).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(pathlib.Path(__file__).parent))

ALPHA, REG, REG_EXPONENT = 0.02, 0.002, 1.0  # our Eq. 3 weights with frequency-scaled regularization


@dataclasses.dataclass
class Matrix:
    """Users x items from `user item item ...` lines (Gowalla's ids are already dense from 0)."""

    items: list[np.ndarray]
    num_rows: int
    num_cols: int

    @property
    def num_pairs(self) -> int:
        return int(sum(len(i) for i in self.items))


def gowalla(data: str, data_dir: str) -> tuple[Matrix, dict[int, np.ndarray]]:
    """The given split made by the pipeline (`--edge_format given_split`) into `data_dir`, read back:
    (training matrix, test user -> test items)."""
    from pipeline_split import make_split

    split = make_split(data_dir, "--edge_format", "given_split", "--input", os.path.join(data, "train.txt"),
                       "--test_input", os.path.join(data, "test.txt"), "--num_shards", "4")
    empty = np.zeros(0, np.int64)
    matrix = Matrix([split.train.get(r, empty) for r in range(split.num_rows)], split.num_rows, split.num_cols)
    return matrix, {r: gt for r, (_, gt) in split.test.items()}


def cg_flops(nnz: int, n_rows: int, n_cols: int, d: int, iters: int) -> float:
    total = 0.0
    for solved, fixed in ((n_rows, n_cols), (n_cols, n_rows)):
        total += nnz * d + (iters + 1) * (4 * nnz * d + 2 * solved * d**2) + 2 * nnz * d + 2 * fixed * d**2
    return total


def block_flops(nnz: int, n_rows: int, n_cols: int, d: int, block: int) -> float:
    b = min(block, d)
    blocks = -(-d // b)
    total = 0.0
    for solved, fixed in ((n_rows, n_cols), (n_cols, n_rows)):
        per_block = 2 * nnz * b * b + 4 * nnz * b + solved * (2 * d * b + b**3 / 3 + 2 * b * b)
        total += 2 * nnz * d + blocks * per_block + 2 * fixed * d**2
    return total


def run_ours(data_dir: str, model_dir: str, dim: int, epochs: int, solver_flags: list[str]) -> tuple[float, float, float]:
    """(seconds of the last epoch, peak RSS MiB, CPU seconds of the whole process) of one command-line fit."""
    cmd = [sys.executable, "-m", "alx_trainer", "train", "--data", data_dir, "--model_dir", model_dir,
           "--dim", str(dim), "--epochs", str(epochs), "--alpha", str(ALPHA), "--reg", str(REG),
           "--reg_exponent", str(REG_EXPONENT), "--eval_every", "0", "--checkpoint_every", "0",
           "--no-progress", *solver_flags]
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, cwd=REPO)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak RSS
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{err.read()[-2000:]}")
    with open(os.path.join(model_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return records[-1]["seconds"], usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def recall_at_20(row_table: np.ndarray, col_table: np.ndarray, matrix, test: dict[int, np.ndarray]) -> float:
    """LightGCN's Recall@20: mean over test users of hits in the top 20 / |test items|, training items excluded."""
    from alx_trainer.evaluation import evaluate

    users = sorted(test)
    scorer = evaluate.ShardedScorer(np.asarray(col_table, np.float32), evaluate.one_device_mesh())
    _, top = scorer.topk(np.asarray(row_table[users], np.float32), [matrix.items[u] for u in users], 20)
    return float(np.mean([len(set(top[i].tolist()) & set(test[u].tolist())) / len(test[u]) for i, u in enumerate(users)]))


def run_implicit(matrix, dim: int, cg_iters: int, epochs: int) -> tuple[float, np.ndarray, np.ndarray]:
    """(seconds of the last epoch, user factors, item factors) of implicit's CPU CG ALS at our (alpha, lambda)."""
    import scipy.sparse as sp
    from implicit.cpu.als import AlternatingLeastSquares
    from threadpoolctl import threadpool_limits

    rows = np.concatenate([np.full(len(v), r) for r, v in enumerate(matrix.items)])
    cols = np.concatenate(matrix.items)
    user_items = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(matrix.num_rows, matrix.num_cols))
    # our objective mapped (benchmarks/gowalla.py): confidence 1 + 1/alpha, L2 weight lambda_r (1 + alpha) / alpha
    # (implicit has one L2 weight: ours at the mean row length)
    mean_len = len(rows) / matrix.num_rows
    reg = REG * (mean_len + ALPHA * matrix.num_cols) ** REG_EXPONENT * (1 + ALPHA) / ALPHA
    model = AlternatingLeastSquares(factors=dim, regularization=reg, alpha=1 + 1 / ALPHA,
                                    iterations=epochs, use_cg=True, random_state=0)
    model.cg_steps = cg_iters
    seconds: list[float] = []
    with threadpool_limits(1, "blas"):
        model.fit(user_items, show_progress=False, callback=lambda it, elapsed, loss: seconds.append(elapsed))
    return seconds[-1], np.asarray(model.user_factors), np.asarray(model.item_factors)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(REPO / "data" / "gowalla"), help="train.txt/test.txt folder")
    parser.add_argument("--dims", default="256,512,1024,2048")
    parser.add_argument("--block_size", type=int, default=32)
    parser.add_argument("--cg_iters", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2, help="epochs per fit; the last one is timed")
    parser.add_argument("--recall_max_dim", type=int, default=1024, help="Recall@20 only up to this d (scoring cost)")
    parser.add_argument("--implicit_max_dim", type=int, default=2048, help="implicit only up to this d")
    parser.add_argument("--solvers", default="cg,block,implicit", help="which of cg, block, implicit to run")
    args = parser.parse_args(argv)
    from ials_vs_implicit import matmul_peak

    from alx_trainer.model import load_model

    solvers = args.solvers.split(",")
    tmp = tempfile.TemporaryDirectory()
    data_dir = os.path.join(tmp.name, "gowalla")
    matrix, test = gowalla(args.data, data_dir)
    nnz = matrix.num_pairs
    print(f"Gowalla (pipeline given split): {matrix.num_rows} users x {matrix.num_cols} items, {nnz} training pairs, "
          f"{sum(len(v) for v in test.values())} test pairs of {len(test)} users; "
          f"{args.epochs} epochs per fit, the last timed; alpha={ALPHA}, lambda={REG}, nu={REG_EXPONENT}; "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    peak = matmul_peak()
    print(f"measured float32 matmul peak: {peak / 1e9:.1f} GFLOP/s (one JAX device, all cores)")
    print(f"{'d':>5} {'solver':<22} {'s/epoch':>8} {'GFLOP':>8} {'GFLOP/s':>8} {'%peak':>6} {'RSS MiB':>8} "
          f"{'Recall@20':>9} {'load':>5} {'fit CPU s':>9}")
    with tmp:
        for dim in [int(x) for x in args.dims.split(",")]:
            runs = []
            if "cg" in solvers:
                runs.append((f"ours cg {args.cg_iters} steps", ["--solver", "cg", "--cg_iters", str(args.cg_iters)],
                             cg_flops(nnz, matrix.num_rows, matrix.num_cols, dim, args.cg_iters)))
            if "block" in solvers:
                runs.append((f"ours block b={min(args.block_size, dim)}",
                             ["--solver", "block", "--block_size", str(args.block_size)],
                             block_flops(nnz, matrix.num_rows, matrix.num_cols, dim, args.block_size)))
            for name, flags, flops in runs:
                model_dir = os.path.join(tmp.name, f"{name.replace(' ', '_')}_{dim}")
                seconds, rss, cpu = run_ours(data_dir, model_dir, dim, args.epochs, flags)
                recall = ""
                if dim <= args.recall_max_dim:
                    model = load_model(model_dir)
                    recall = f"{recall_at_20(model.row_table, model.col_table, matrix, test):.4f}"
                print(f"{dim:>5} {name:<22} {seconds:>8.2f} {flops / 1e9:>8.1f} {flops / seconds / 1e9:>8.1f} "
                      f"{100 * flops / seconds / peak:>6.1f} {rss:>8.0f} {recall:>9} {os.getloadavg()[0]:>5.2f} {cpu:>9.0f}",
                      flush=True)
            if "implicit" in solvers and dim <= args.implicit_max_dim:
                flops = cg_flops(nnz, matrix.num_rows, matrix.num_cols, dim, args.cg_iters)
                seconds, users, items = run_implicit(matrix, dim, args.cg_iters, args.epochs)
                recall = f"{recall_at_20(users, items, matrix, test):.4f}" if dim <= args.recall_max_dim else ""
                print(f"{dim:>5} {'implicit cg ' + str(args.cg_iters) + ' steps':<22} {seconds:>8.2f} {flops / 1e9:>8.1f} "
                      f"{flops / seconds / 1e9:>8.1f} {100 * flops / seconds / peak:>6.1f} {'':>8} {recall:>9} "
                      f"{os.getloadavg()[0]:>5.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
