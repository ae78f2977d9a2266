"""Recall@20/50 of our iALS vs `implicit`'s CPU ALS on MovieLens-1M, strong generalization.

    python benchmarks/recall_vs_implicit.py [--dim 128] [--epochs 8] [--lambdas 5,10,20] [--alphas 0.25,0.5,1]

One split for both, made by the pipeline (`python -m webgraph_pipeline --edge_format adjacency
--bipartite`: the contract's strong-generalization split, 10% of users held out by a seeded hash;
80% of each held-out user's items fold the user in, 20% are the ground truth; the others train).
Each library trains on the same training users with the same
dimension and number of epochs over a grid of the same size, and its best cell by Recall@20 is
reported. implicit's grid is ours in its own parametrization: our objective (paper Eq. 3) divided
by alpha puts weight 1 + 1/alpha on an observed pair and 1 on the rest with L2 weight lambda/alpha,
so `implicit(alpha=1/alpha, regularization=lambda/alpha)`.

Held-out users are folded in by each library's own exact solve: ours by the trainer's `fold_in`
(Eq. 4, Cholesky), implicit's by `recalculate_user` (its Cholesky least squares). Both are then
ranked and scored by the same code (`alx_trainer.evaluation.evaluate.evaluate`: fold-in items excluded, exact
top-k, Recall@K with denominator min(K, |gt|), NDCG@100), next to the popularity baseline.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
import sys
import tempfile
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def make_split(data_dir: str, test_fraction: float, seed: int):
    from pipeline_split import make_split as pipeline_split

    ml1m = REPO / "data" / "ml-1m-implicit"
    return pipeline_split(data_dir, "--edge_format", "adjacency", "--bipartite", "--input", ml1m / "train.txt",
                          "--input", ml1m / "test.txt", "--test_fraction", test_fraction,
                          "--holdout_fraction", "0.2", "--seed", seed, "--num_shards", "2")


def fit_ours(data_dir: str, model_dir: str, dim: int, epochs: int, reg: float, alpha: float) -> dict:
    from alx_trainer.config import TrainConfig
    from alx_trainer.evaluation.evaluate import evaluate
    from alx_trainer.train import train

    config = TrainConfig(data=data_dir, model_dir=model_dir, dim=dim, epochs=epochs, alpha=alpha, reg=reg,
                         eval_every=0, checkpoint_every=0, progress=False)
    t = time.perf_counter()
    model = train(config)
    seconds = time.perf_counter() - t
    result = evaluate(model, data_dir, dataclasses.replace(config, solver="cholesky"))
    return {**result, "train_seconds": seconds}


def fit_implicit(split, data_dir: str, dim: int, epochs: int, reg: float, confidence: float) -> dict:
    import scipy.sparse as sp
    from implicit.cpu.als import AlternatingLeastSquares
    from threadpoolctl import threadpool_limits

    from alx_trainer.evaluation.evaluate import evaluate

    rows = np.concatenate([np.full(len(v), r) for r, v in split.train.items()])
    cols = np.concatenate(list(split.train.values()))
    user_items = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)),
                               shape=(split.num_rows, split.num_cols))
    with threadpool_limits(1, "blas"):  # implicit's advice: its own threads, not BLAS's
        model = AlternatingLeastSquares(factors=dim, regularization=reg, alpha=confidence, iterations=epochs,
                                        random_state=0)
        t = time.perf_counter()
        model.fit(user_items, show_progress=False)
        seconds = time.perf_counter() - t

    def fold_in(_col_table, fold_rows, _config):
        indptr = np.cumsum([0] + [len(c) for c in fold_rows])
        indices = np.concatenate(fold_rows) if fold_rows else np.zeros(0, np.int64)
        new = sp.csr_matrix((np.ones(len(indices), np.float32), indices, indptr),
                            shape=(len(fold_rows), split.num_cols))
        return model.recalculate_user(np.arange(len(fold_rows)), new)

    result = evaluate((None, np.asarray(model.item_factors, np.float32)), data_dir, fold_in_fn=fold_in)
    return {**result, "train_seconds": seconds}


def floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",") if v.strip()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--lambdas", type=floats, default=[5.0, 10.0, 20.0], help="our L2 regularization grid")
    p.add_argument("--alphas", type=floats, default=[0.25, 0.5, 1.0], help="our unobserved-weight grid")
    p.add_argument("--test_fraction", type=float, default=0.1, help="share of users held out (pipeline hash)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        data_dir = os.path.join(tmp, "ml1m")
        split = make_split(data_dir, args.test_fraction, args.seed)
        print(f"ML-1M: {split.num_rows} users x {split.num_cols} movies, "
              f"{sum(len(v) for v in split.train.values())} training pairs; "
              f"{len(split.test)} held-out users (80% fold-in / 20% ground truth), seed {args.seed}; "
              f"d={args.dim}, {args.epochs} epochs, grid {len(args.lambdas)}x{len(args.alphas)}", flush=True)
        header = f"{'library':<9} {'lambda':>7} {'alpha':>7} {'R@20':>7} {'R@50':>7} {'NDCG@100':>9} {'train s':>8}"
        print(header, flush=True)
        best: dict[str, dict] = {}
        for lam in args.lambdas:
            for alpha in args.alphas:
                cells = [
                    ("ours", fit_ours(data_dir, os.path.join(tmp, f"m{lam}_{alpha}"), args.dim, args.epochs,
                                      lam, alpha)),
                    ("implicit", fit_implicit(split, data_dir, args.dim, args.epochs, lam / alpha,
                                              1.0 / alpha)),
                ]
                for name, r in cells:
                    r.update({"lambda": lam, "alpha": alpha})
                    print(f"{name:<9} {lam:>7g} {alpha:>7g} {r['recall@20']:>7.4f} {r['recall@50']:>7.4f} "
                          f"{r['ndcg@100']:>9.4f} {r['train_seconds']:>8.1f}", flush=True)
                    if name not in best or r["recall@20"] > best[name]["recall@20"]:
                        best[name] = r
        pop = best["ours"]
        print("\nbest cell of each (by Recall@20):")
        print(f"{'':<34} {'Recall@20':>9} {'Recall@50':>9} {'NDCG@100':>9}")
        for name, r in best.items():
            label = f"{name} (lambda={r['lambda']:g}, alpha={r['alpha']:g})"
            if name == "implicit":
                label = f"implicit (reg={r['lambda'] / r['alpha']:g}, alpha={1 / r['alpha']:g})"
            print(f"{label:<34} {r['recall@20']:>9.4f} {r['recall@50']:>9.4f} {r['ndcg@100']:>9.4f}")
        print(f"{'popularity':<34} {pop['popularity/recall@20']:>9.4f} {pop['popularity/recall@50']:>9.4f} "
              f"{pop['popularity/ndcg@100']:>9.4f}")
        ratio = best["ours"]["recall@20"] / best["implicit"]["recall@20"]
        print(f"ours / implicit Recall@20: {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
