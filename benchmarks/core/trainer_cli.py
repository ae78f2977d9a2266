"""Ours through `alx_trainer`'s command line, each step in a child process: train then evaluate
on test, and a sweep over a grid (for `benchmarks.quality gowalla`)."""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from benchmarks.core.children import run_child


def run_ours(config: str, data: str, model_dir: str) -> dict:
    """Train with the config file, evaluate on test; metrics, s/epoch and the training's peak."""
    child = run_child(
        [
            sys.executable,
            "-m",
            "alx_trainer",
            "train",
            "--config",
            config,
            "--data",
            data,
            "--model_dir",
            model_dir,
            "--eval_every",
            "0",
            "--checkpoint_every",
            "0",
            "--no-progress",
        ]
    )
    with open(os.path.join(model_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    result_path = os.path.join(model_dir, "eval.json")
    run_child(
        [
            sys.executable,
            "-m",
            "alx_trainer",
            "eval",
            "--data",
            data,
            "--model_dir",
            model_dir,
            "--k",
            "20",
            "--ndcg_k",
            "20",
            "--output",
            result_path,
        ]
    )
    with open(result_path) as f:
        result = json.load(f)
    seconds = [r["seconds"] for r in records[1:]] or [records[0]["seconds"]]
    return dict(result, seconds_per_epoch=float(np.mean(seconds)), rss_mib=child.peak_gib * 1024)


def ours_sweep(args: argparse.Namespace, data: str, d: int, grid: dict[float, list[float]]) -> dict:
    """`alx_trainer sweep` over the grid at d (`grid`: {nu: [lambda, ...]}; one call per nu;
    resumes WORK/sweep_dD), then its final run of the best point on train, evaluated on test:
    sweep.json's best and final."""
    out = os.path.join(args.work_dir, f"sweep_d{d}")
    groups = list(grid.items())
    for i, (nu, lams) in enumerate(groups):
        last = i == len(groups) - 1
        child = run_child(
            [
                sys.executable,
                "-m",
                "alx_trainer",
                "sweep",
                "--data",
                data,
                "--out_dir",
                out,
                "--dims",
                d,
                "--alphas",
                args.grid_alphas,
                "--nus",
                f"{nu:g}",
                "--lambdas",
                ",".join(f"{v:g}" for v in lams),
                "--epochs",
                args.grid_epochs,
                "--eval_every",
                args.grid_eval_every,
                "--eval_rows",
                args.eval_rows,
                "--eval_k",
                "20",
                "--ndcg_k",
                "20",
                "--cg_iters",
                args.cg_iters,
                "--no-progress",
                *args.ours_flags.split(),
                *([] if last else ["--no_final"]),
            ]
        )
    with open(os.path.join(out, "sweep.json")) as f:
        return dict(json.load(f), rss_mib=child.peak_gib * 1024)
