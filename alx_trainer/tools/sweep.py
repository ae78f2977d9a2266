"""Grid search over lambda (L2 reg) x alpha (unobserved weight), as in the paper's section 6.1.

Each cell trains a model with the trainer and evaluates it on the test split; the results go to a
CSV as soon as a cell finishes, so an interrupted sweep resumes where it stopped (finished cells
are skipped). The summary is a printed table with the best cell marked and a Recall@K heatmap PNG.
"""

from __future__ import annotations

import csv
import dataclasses
import logging
import os
import shutil
import time
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from alx_trainer.evaluation.evaluate import evaluate
from alx_trainer.train import train

PAPER_LAMBDAS: tuple[float, ...] = (5e-2, 1e-2, 5e-3, 1e-3, 5e-4, 1e-4)
PAPER_ALPHAS: tuple[float, ...] = (1e-3, 5e-4, 1e-4, 5e-5, 1e-5, 5e-6, 1e-6)
RESULTS_CSV = "sweep.csv"
HEATMAP_PNG = "sweep_heatmap.png"

logger = logging.getLogger(__name__)

TrainFn = Callable[[Any], Any]
EvalFn = Callable[[Any, Any], Mapping[str, float]]


def cell_key(lam: float, alpha: float) -> str:
    """A stable text key of one grid cell (what the CSV stores)."""
    return f"{float(lam):.6g}|{float(alpha):.6g}"


def parse_grid(text: str) -> tuple[float, ...]:
    """`"5e-2,1e-2"` -> (0.05, 0.01), with a one-line error for a bad value."""
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ValueError(f"grid: expected comma-separated numbers, got {text!r}") from None
    if not values or min(values) < 0:
        raise ValueError(f"grid: expected non-negative numbers, got {text!r}")
    return values


def read_results(path: str) -> list[dict[str, Any]]:
    """The rows of a sweep CSV (numbers as floats); [] when the file does not exist yet."""
    if not os.path.exists(path):
        return []
    with open(path, newline="", encoding="utf-8") as f:
        rows = []
        for n, row in enumerate(csv.DictReader(f), 2):
            try:
                rows.append({k: float(v) if v not in ("", None) else float("nan") for k, v in row.items()})
            except ValueError:
                raise ValueError(f"{path}:{n}: not a number in {row}") from None
        return rows


def _append(path: str, row: Mapping[str, float]) -> None:
    existing = read_results(path)
    fields = list(row)
    if existing and list(existing[0]) != fields:
        raise ValueError(f"{path}: columns {list(existing[0])} differ from this sweep's {fields}; use a new out_dir")
    new = not os.path.exists(path)
    with open(path, "a", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        if new:
            writer.writeheader()
        writer.writerow(row)


def run_sweep(
    base_config: Any,
    out_dir: str,
    lambdas: Sequence[float] = PAPER_LAMBDAS,
    alphas: Sequence[float] = PAPER_ALPHAS,
    *,
    train_fn: TrainFn | None = None,
    eval_fn: EvalFn | None = None,
    keep_models: bool = False,
    log: Callable[[str], None] = logger.info,
) -> list[dict[str, Any]]:
    """Train and evaluate every (lambda, alpha) cell not yet in `out_dir/sweep.csv`; return all rows.

    `base_config` is a trainer config (dataclass with `reg`, `alpha`, `model_dir`); each cell gets
    `reg=lambda, alpha=alpha` and its own model directory under `out_dir/models/`.
    `train_fn(config) -> model` defaults to `alx_trainer.train.train`; `eval_fn(model, config)`
    to `evaluate(model, config.data, config, ks=config.recall_ks())`.
    """
    train_fn = train_fn or train
    if eval_fn is None:

        def eval_fn(model: Any, config: Any) -> Mapping[str, float]:
            ks = config.recall_ks() if hasattr(config, "recall_ks") else (20, 50)
            return evaluate(model, config.data, config, ks=ks)

    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, RESULTS_CSV)
    done = {cell_key(r["lambda"], r["alpha"]) for r in read_results(path)}
    cells = [(lam, a) for lam in lambdas for a in alphas]
    for i, (lam, alpha) in enumerate(cells, 1):
        key = cell_key(lam, alpha)
        if key in done:
            log(f"[{i}/{len(cells)}] lambda={lam:g} alpha={alpha:g}: done before, skipped")
            continue
        model_dir = os.path.join(out_dir, "models", f"reg{lam:g}_alpha{alpha:g}")
        config = dataclasses.replace(base_config, reg=float(lam), alpha=float(alpha), model_dir=model_dir)
        if hasattr(config, "eval_every"):
            config = dataclasses.replace(config, eval_every=0)
        t0 = time.perf_counter()
        model = train_fn(config)
        t1 = time.perf_counter()
        result = eval_fn(model, config)
        t2 = time.perf_counter()
        row = {"lambda": float(lam), "alpha": float(alpha)}
        row.update({k: float(v) for k, v in result.items()})
        row.update({"train_seconds": round(t1 - t0, 3), "eval_seconds": round(t2 - t1, 3)})
        _append(path, row)
        done.add(key)
        if not keep_models:
            shutil.rmtree(model_dir, ignore_errors=True)
        log(f"[{i}/{len(cells)}] lambda={lam:g} alpha={alpha:g}: "
            + " ".join(f"{k}={v:.4f}" for k, v in result.items() if "@" in k and "/" not in k))
    return read_results(path)


def best_row(rows: Sequence[Mapping[str, float]], metric: str = "recall@20") -> Mapping[str, float]:
    """The row with the highest `metric` (first one on ties)."""
    if not rows:
        raise ValueError("no sweep results")
    return max(rows, key=lambda r: (np.nan_to_num(r.get(metric, float("nan")), nan=-1.0)))


def _grid(rows: Sequence[Mapping[str, float]], metric: str) -> tuple[list[float], list[float], np.ndarray]:
    lambdas = sorted({r["lambda"] for r in rows}, reverse=True)
    alphas = sorted({r["alpha"] for r in rows}, reverse=True)
    grid = np.full((len(lambdas), len(alphas)), np.nan)
    for r in rows:
        grid[lambdas.index(r["lambda"]), alphas.index(r["alpha"])] = r.get(metric, np.nan)
    return lambdas, alphas, grid


def format_table(rows: Sequence[Mapping[str, float]], metric: str = "recall@20") -> str:
    """lambda (rows) x alpha (columns) table of `metric`; the best cell is marked with `*`."""
    lambdas, alphas, grid = _grid(rows, metric)
    best = best_row(rows, metric)
    corner = f"{metric} lambda/alpha"
    head = f"{corner:>22}" + "".join(f"{a:>10.0e}" for a in alphas)
    lines = [head]
    for i, lam in enumerate(lambdas):
        cells = []
        for j, a in enumerate(alphas):
            mark = "*" if (lam, a) == (best["lambda"], best["alpha"]) else " "
            cells.append("       -  " if np.isnan(grid[i, j]) else f"{grid[i, j]:>9.4f}{mark}")
        lines.append(f"{lam:>22.0e}" + "".join(cells))
    others = ", ".join(f"{k}={v:.4f}" for k, v in best.items() if "@" in k and k != metric)
    lines.append(f"best (*): lambda={best['lambda']:g} alpha={best['alpha']:g} {metric}={best[metric]:.4f}"
                 + (f" ({others})" if others else ""))
    return "\n".join(lines)


def plot_heatmap(rows: Sequence[Mapping[str, float]], path: str, metric: str = "recall@20") -> str:
    """A lambda x alpha heatmap of `metric` with values written in and the best cell boxed."""
    lambdas, alphas, grid = _grid(rows, metric)
    best = best_row(rows, metric)
    fig = Figure(figsize=(1.2 * len(alphas) + 2.5, 0.8 * len(lambdas) + 1.8))  # no pyplot: no GUI backend
    ax = fig.subplots()
    im = ax.imshow(np.ma.masked_invalid(grid), cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(alphas)), [f"{a:.0e}" for a in alphas])
    ax.set_yticks(range(len(lambdas)), [f"{lam:.0e}" for lam in lambdas])
    ax.set_xlabel("alpha (unobserved weight)")
    ax.set_ylabel("lambda (L2 regularization)")
    ax.set_title(f"{metric} over the grid")
    finite = grid[np.isfinite(grid)]
    mid = float(finite.mean()) if finite.size else 0.0
    for i in range(len(lambdas)):
        for j in range(len(alphas)):
            if np.isfinite(grid[i, j]):
                ax.text(j, i, f"{grid[i, j]:.3f}", ha="center", va="center",
                        color="black" if grid[i, j] > mid else "white", fontsize=8)
    bi, bj = lambdas.index(best["lambda"]), alphas.index(best["alpha"])
    ax.add_patch(Rectangle((bj - 0.5, bi - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2.5))
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path
