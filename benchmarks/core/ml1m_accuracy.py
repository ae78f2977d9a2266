"""Accuracy on MovieLens-1M, ours against implicit: one strong-generalization split, the same
(lambda, alpha) grid for both, each library's best cell by Recall@20 (the `ml1m` subcommand of
`benchmarks.recall_vs_implicit`)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
import time

import numpy as np

from benchmarks.core import datasets, implicit_als


def fit_ours(
    data_dir: str, model_dir: str, dim: int, epochs: int, reg: float, alpha: float
) -> dict:
    """Ours trained at one cell, held-out users folded in by Cholesky and scored."""
    from alx_trainer.config import TrainConfig
    from alx_trainer.evaluation.evaluate import evaluate_dataset
    from alx_trainer.train import train

    config = TrainConfig(
        data=data_dir,
        model_dir=model_dir,
        dim=dim,
        epochs=epochs,
        alpha=alpha,
        reg=reg,
        eval_every=0,
        checkpoint_every=0,
        progress=False,
    )
    t = time.perf_counter()
    model = train(config)
    seconds = time.perf_counter() - t
    result = evaluate_dataset(model, data_dir, dataclasses.replace(config, solver="cholesky"))
    return {**result, "train_seconds": seconds}


def fit_implicit(
    split: datasets.Split, data_dir: str, dim: int, epochs: int, reg: float, alpha: float
) -> dict:
    """implicit fitted at one cell mapped to its parameters, held-out users folded in by its
    `recalculate_user`, scored by our evaluation."""
    from alx_trainer.evaluation.evaluate import evaluate_dataset

    indptr, cols = split.train_csr()
    matrix, regularization = implicit_als.implicit_problem(
        indptr, cols, split.num_cols, alpha, reg, 0.0
    )
    model = implicit_als.implicit_model(dim, regularization, epochs, cg_iters=3)
    t = time.perf_counter()
    implicit_als.fit(model, matrix)
    seconds = time.perf_counter() - t
    confidence = float(matrix.data[0])

    def fold_in(_col_table, fold_rows, _config):
        new = implicit_als.confidence_rows(list(fold_rows), split.num_cols, confidence)
        return model.recalculate_user(np.arange(len(fold_rows)), new)

    result = evaluate_dataset(
        (None, np.asarray(model.item_factors, np.float32)), data_dir, fold_in_fn=fold_in
    )
    return {
        **result,
        "train_seconds": seconds,
        "confidence": confidence,
        "regularization": regularization,
    }


def ml1m(args: argparse.Namespace) -> int:
    """The grid for both libraries, a line per cell, then each one's best cell and the ratio."""
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = os.path.join(tmp, "ml1m")
        split = datasets.ml1m_split(data_dir, args.seed, args.test_fraction, shards=2)
        print(
            f"ML-1M: {split.num_rows} users x {split.num_cols} movies, {split.nnz} training "
            f"pairs; {len(split.test)} held-out users (80% fold-in / 20% ground truth), seed "
            f"{args.seed}; d={args.dim}, {args.epochs} epochs, grid "
            f"{len(args.lambdas)}x{len(args.alphas)}",
            flush=True,
        )
        print(
            f"{'library':<9} {'lambda':>7} {'alpha':>7} {'R@20':>7} {'R@50':>7} {'NDCG@100':>9} "
            f"{'train s':>8}"
        )
        best: dict[str, dict] = {}
        for lam in args.lambdas:
            for alpha in args.alphas:
                cells = [
                    (
                        "ours",
                        fit_ours(
                            data_dir,
                            os.path.join(tmp, f"m{lam}_{alpha}"),
                            args.dim,
                            args.epochs,
                            lam,
                            alpha,
                        ),
                    ),
                    ("implicit", fit_implicit(split, data_dir, args.dim, args.epochs, lam, alpha)),
                ]
                for name, r in cells:
                    r.update({"lambda": lam, "alpha": alpha})
                    print(
                        f"{name:<9} {lam:>7g} {alpha:>7g} {r['recall@20']:>7.4f} "
                        f"{r['recall@50']:>7.4f} {r['ndcg@100']:>9.4f} "
                        f"{r['train_seconds']:>8.1f}",
                        flush=True,
                    )
                    if name not in best or r["recall@20"] > best[name]["recall@20"]:
                        best[name] = r
        pop = best["ours"]
        print("\nbest cell of each (by Recall@20):")
        print(f"{'':<52} {'Recall@20':>9} {'Recall@50':>9} {'NDCG@100':>9}")
        for name, r in best.items():
            label = f"{name} (lambda={r['lambda']:g}, alpha={r['alpha']:g})"
            if name == "implicit":
                label += f" = (reg {r['regularization']:.3g}, C {r['confidence']:.3g})"
            print(
                f"{label:<52} {r['recall@20']:>9.4f} {r['recall@50']:>9.4f} {r['ndcg@100']:>9.4f}"
            )
        print(
            f"{'popularity':<52} {pop['popularity/recall@20']:>9.4f} "
            f"{pop['popularity/recall@50']:>9.4f} {pop['popularity/ndcg@100']:>9.4f}"
        )
        ratio = best["ours"]["recall@20"] / best["implicit"]["recall@20"]
        print(f"ours / implicit Recall@20: {ratio:.3f}")
    return 0
