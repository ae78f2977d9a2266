"""Our sharded iALS vs `implicit`'s CPU ALS on MovieLens-1M: seconds per epoch, Recall@20, FLOP rate.

    python benchmarks/ials_vs_implicit.py [--epochs 6] [--dim 128] [--cg_iters 3] [--grid small|one] [--devices N]

Both run in this process on the same held-out-users split, made by the pipeline (the contract's
strong-generalization split: 10% of users held out by a seeded hash; 80% of each held-out user's
items fold the user in, 20% are the ground truth), with
`cg_iters` conjugate-gradient steps per solve, `dim` factors, and each with its best parameters from
the same small grid (implicit's parameters mapped from ours: confidence C = 1 + 1/alpha for an
observed pair, regularization lambda / alpha). Recall@20 of both comes from T2's
`alx_trainer.evaluation.evaluate.evaluate` (held-out users folded in with an exact solve of each model's own
objective, fold-in items excluded from the ranking). Seconds per epoch skip the first epoch of ours
(XLA compilation). The FLOPs of one of our epochs are counted from the shapes actually run and
compared with the machine's measured float32 matmul rate (a large `jnp.dot`). Ours runs as the
command line does on a CPU host: the host split into one JAX device per core (`--devices`), the
'owner' layout (each device solves the rows of its own table shard with the fixed table
replicated, no collective per step, packed batches in memory as implicit holds its CSR matrix).
Ours on one device and implicit on one thread are timed too (per-core comparison).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# (alpha, lambda) of ours; implicit gets C = 1 + 1/alpha and reg = lambda/alpha at each point.
GRID = {"small": [(0.1, 5.0), (0.3, 10.0), (0.5, 10.0), (1.0, 10.0), (1.0, 20.0)], "one": [(1.0, 10.0)]}


def build_split(data_dir: str, seed: int = 0):
    from pipeline_split import make_split

    ml1m = REPO / "data" / "ml-1m-implicit"
    return make_split(data_dir, "--edge_format", "adjacency", "--bipartite", "--input", ml1m / "train.txt",
                      "--input", ml1m / "test.txt", "--test_fraction", "0.1", "--holdout_fraction", "0.2",
                      "--seed", seed, "--num_shards", "4")


def _matmul_rate(n: int, repeats: int) -> float:
    import jax
    import jax.numpy as jnp

    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    b = jax.random.normal(jax.random.key(1), (n, n), jnp.float32)
    f = jax.jit(jnp.dot)
    f(a, b).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        f(a, b).block_until_ready()
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best


def matmul_peak(n: int = 4096, repeats: int = 5) -> float:
    """Measured float32 FLOP/s of a large matmul with JAX as it starts by default (one device, every core).

    Run in a fresh process: this one's CPU client is set up for one thread per device (`per_core`).
    """
    code = f"import ials_vs_implicit as b; print(b._matmul_rate({n}, {repeats}))"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(pathlib.Path(__file__).parent), *sys.path]))
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return float(run.stdout.split()[-1])


def epoch_flops(split, num_rows: int, num_cols: int, dim: int, cg_iters: int) -> float:
    """FLOPs of one epoch of our matrix-free CG (both sides), counting only the useful work.

    Per side with |S| observed pairs and R solved rows: b (|S| d), each of the cg_iters + 1
    matvecs (4 |S| d for sum_i h_i (h_i . p), 2 R d^2 for G p), the loss terms (2 |S| d), and the
    gramian of the fixed table (2 N d^2).
    """
    nnz = sum(len(v) for v in split.train.values())
    rows = len(split.train)
    cols = len({int(c) for v in split.train.values() for c in v})
    total = 0.0
    for solved, other in ((rows, num_cols), (cols, num_rows)):
        total += nnz * dim + (cg_iters + 1) * (4 * nnz * dim + 2 * solved * dim**2) + 2 * nnz * dim + 2 * other * dim**2
    return total


def run_ours(data_dir, model_dir, dim, cg_iters, epochs, alpha, reg, batch_pieces, devices=None):
    import jax

    from alx_trainer.config import TrainConfig
    from alx_trainer.evaluation import evaluate
    from alx_trainer.ops.mesh import make_mesh
    from alx_trainer.train import train

    config = TrainConfig(data=data_dir, model_dir=model_dir, dim=dim, epochs=epochs, alpha=alpha, reg=reg,
                         solver="cg", cg_iters=cg_iters, progress=False, eval_every=0, batch_pieces=batch_pieces,
                         piece_len=16, checkpoint_every=0, init_stddev=0.1)
    model = train(config, mesh=make_mesh(jax.devices()[:devices]))
    seconds = [r["seconds"] for r in model.metrics]
    exact = dataclasses.replace(config, solver="cholesky")
    result = evaluate.evaluate(model, data_dir, exact, ks=(20,), ndcg_k=None, mesh=evaluate.one_device_mesh())
    return float(np.median(seconds[1:])), result["recall@20"], seconds[1:]


def run_implicit(split, dim, cg_iters, epochs, alpha, reg, data_dir, num_threads=0):
    import scipy.sparse as sp
    from implicit.cpu.als import AlternatingLeastSquares
    from threadpoolctl import threadpool_limits

    from alx_trainer.evaluation import evaluate

    rows = np.concatenate([np.full(len(v), r) for r, v in split.train.items()])
    cols = np.concatenate(list(split.train.values()))
    user_items = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(split.num_rows, split.num_cols))
    confidence, regularization = 1.0 + 1.0 / alpha, reg / alpha
    model = AlternatingLeastSquares(factors=dim, regularization=regularization, alpha=confidence, iterations=epochs,
                                    use_cg=True, random_state=0, num_threads=num_threads)
    model.cg_steps = cg_iters
    seconds: list[float] = []
    with threadpool_limits(1, "blas"):  # implicit's own advice: its threads, not BLAS's
        model.fit(user_items, show_progress=False, callback=lambda it, elapsed, loss: seconds.append(elapsed))
    items = np.asarray(model.item_factors, np.float64)
    gram = items.T @ items

    def fold_in(col_table, fold_rows, _config):
        """Exact solve of implicit's objective for each new user: (Y^T Y + Y_u^T (C-1) Y_u + reg I) x = C Y_u^T 1."""
        out = np.zeros((len(fold_rows), items.shape[1]), np.float32)
        for k, c in enumerate(fold_rows):
            y = items[np.asarray(c, np.int64)]
            a = gram + (confidence - 1) * y.T @ y + regularization * np.eye(items.shape[1])
            out[k] = np.linalg.solve(a, confidence * y.sum(axis=0))
        return out

    result = evaluate.evaluate((None, items.astype(np.float32)), data_dir, None, ks=(20,), ndcg_k=None, fold_in_fn=fold_in,
                               mesh=evaluate.one_device_mesh())
    return float(np.median(seconds[1:])), result["recall@20"], seconds[1:]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=6, help="epochs per fit (the first is excluded from timing)")
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--cg_iters", type=int, default=3)
    parser.add_argument("--grid", choices=sorted(GRID), default="small", help="(alpha, lambda) grid")
    parser.add_argument("--batch_pieces", type=int, default=256, help="ours: pieces of 16 ids per device batch")
    parser.add_argument("--devices", type=int, default=os.cpu_count(), help="ours: JAX CPU devices (default: one per core)")
    args = parser.parse_args(argv)
    from alx_trainer.ops import per_core

    per_core.use_cpu_devices(args.devices)  # as the command line splits a CPU host
    import jax

    with tempfile.TemporaryDirectory() as tmp:
        data_dir = os.path.join(tmp, "ml1m")
        split = build_split(data_dir)
        nnz = sum(len(v) for v in split.train.values())
        print(f"ML-1M: {split.num_rows} users x {split.num_cols} items, {nnz} training pairs, "
              f"{len(split.test)} held-out users; d={args.dim}, {args.cg_iters} CG steps, {args.epochs} epochs per fit; "
              f"ours on {len(jax.devices())} JAX CPU devices, implicit on {os.cpu_count()} threads")
        peak = matmul_peak()
        flops = epoch_flops(split, split.num_rows, split.num_cols, args.dim, args.cg_iters)
        print(f"measured float32 matmul peak: {peak / 1e9:.1f} GFLOP/s; one epoch of ours = {flops / 1e9:.2f} GFLOP")

        best = {}
        for alpha, reg in GRID[args.grid]:
            ours = run_ours(data_dir, os.path.join(tmp, f"m_{alpha}_{reg}"), args.dim, args.cg_iters, args.epochs, alpha, reg,
                            args.batch_pieces)
            theirs = run_implicit(split, args.dim, args.cg_iters, args.epochs, alpha, reg, data_dir)
            print(f"alpha={alpha:<5} lambda={reg:<5} | ours: {ours[0]:.3f} s/epoch, Recall@20 {ours[1]:.4f} | "
                  f"implicit (C={1 + 1 / alpha:.3g}, reg={reg / alpha:.3g}): {theirs[0]:.3f} s/epoch, Recall@20 {theirs[1]:.4f}")
            for name, res in (("ours", ours), ("implicit", theirs)):
                if name not in best or res[1] > best[name][1][1]:
                    best[name] = ((alpha, reg), res)

        (p_ours, ours), (p_imp, imp) = best["ours"], best["implicit"]
        print()
        print(f"best ours     (alpha={p_ours[0]}, lambda={p_ours[1]}): {ours[0]:.3f} s/epoch, Recall@20 {ours[1]:.4f}")
        print(f"best implicit (alpha={p_imp[0]}, lambda={p_imp[1]}): {imp[0]:.3f} s/epoch, Recall@20 {imp[1]:.4f}")
        print(f"epoch time ratio ours/implicit: {ours[0] / imp[0]:.2f} (< 1: ours faster; medians of epochs 2..)")
        print(f"fastest epoch: ours {min(ours[2]):.3f} s, implicit {min(imp[2]):.3f} s, ratio {min(ours[2]) / min(imp[2]):.2f}")
        print(f"ours: {flops / ours[0] / 1e9:.2f} GFLOP/s = {100 * flops / ours[0] / peak:.1f}% of the measured matmul peak")
        one_thread = run_implicit(split, args.dim, args.cg_iters, 4, *p_imp, data_dir, num_threads=1)
        one_device = run_ours(data_dir, os.path.join(tmp, "one"), args.dim, args.cg_iters, 4, *p_ours, args.batch_pieces, 1)
        print(f"per core: ours on one device {one_device[0]:.3f} s/epoch, implicit on one thread {one_thread[0]:.3f} s/epoch, "
              f"ratio {one_device[0] / one_thread[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
