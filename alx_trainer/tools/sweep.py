"""Tuning on the validation split, then one run on the full training data reported on test.

`run_sweep` trains every point of a grid over (d, alpha, lambda, nu) on `validation_train` and
evaluates it on `validation` every `--eval_every` epochs, so those epoch counts up to `--epochs` are
points of the table too (one row per point and evaluated epoch). The test split is never read while
tuning. Rows go to `sweep.csv` as soon as a point finishes, so an interrupted sweep resumes where it
stopped. Each row records what its result depends on besides the point (`run_key`): the dataset's
fingerprint, the seed, solver, CG iterations, initial scale, table dtype, the run's epochs and
evaluation cadence, and a hash of every other setting that changes the result (`settings`, spelled
out in `sweep_settings.json`); a rerun reuses only the rows of exactly the same key, says how many
points it reused and why it retrains the others, and drops the rows of another key from
`sweep.csv`. `final/` is reused likewise only when `final.json` records the same key and point.
The points run in one process: the step kernels take alpha, lambda and nu as arguments, so points
of the same d reuse the compiled programs (the `compiles` column counts XLA compilations per
point), and the dataset is opened, read, planned and packed once per d (`train.prepare`; its
batches stay on the devices across that d's points). Each row records its point's cost:
`init_seconds` (before its first epoch: its tables and the evaluation's set-up), `train_seconds`
and `eval_seconds` (the epochs and the evaluations up to its epoch); the log line of a point says
them too. A point's model is checkpointed only with `keep_models`. `final_run` then trains the
best point on the full training data and evaluates it on test.
Outputs: `sweep.csv`, `sweep.json` (rows, best point, final result), `sweep_heatmap.png` (lambda x
alpha at the best d, nu and epochs), `best_config.json` (a `train --config` file) and `final/`.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import logging
import os
import shutil
import time
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from alx_trainer import compile_cache
from alx_trainer.callbacks import Callback
from alx_trainer.config import ConfigError
from alx_trainer.evaluation.evaluate import Ranking, evaluate_dataset
from alx_trainer.evaluation.metrics import ACTIVITY_BUCKETS
from alx_trainer.train import prepare, train
from webgraph_contract import fileio

PAPER_LAMBDAS: tuple[float, ...] = (5e-2, 1e-2, 5e-3, 1e-3, 5e-4, 1e-4)
PAPER_ALPHAS: tuple[float, ...] = (1e-3, 5e-4, 1e-4, 5e-5, 1e-5, 5e-6, 1e-6)
RESULTS_CSV = "sweep.csv"
RESULTS_JSON = "sweep.json"
HEATMAP_PNG = "sweep_heatmap.png"
BEST_CONFIG = "best_config.json"
SETTINGS_JSON = "sweep_settings.json"
FINAL_JSON = "final.json"
DEFAULT_METRIC = "recall_gt@20"  # hits / |gt|: the published Gowalla tables' Recall@20
# what a training run fixes; `epochs` varies within one
POINT = ("dim", "alpha", "lambda", "nu")
# what else a row's result depends on, one column each (`run_key`); `settings` hashes the rest
KEY = (
    "dataset",
    "seed",
    "solver",
    "cg_iters",
    "init_stddev",
    "table_dtype",
    "max_epochs",
    "eval_every",
    "settings",
)
# TrainConfig fields that do not change a run's result (where it goes, what it prints, how it
# resumes), or that the point and KEY already name; every other field is a setting of the key
NOT_SETTINGS = frozenset(
    {
        "data",
        "tfds_data_dir",
        "model_dir",
        "validation",
        "dim",
        "alpha",
        "reg",
        "reg_exponent",
        "epochs",
        "eval_every",
        "checkpoint_every",
        "keep_checkpoints",
        "progress",
        "log_level",
        "compile_cache",
        "distributed",
        "coordinator_address",
        "num_processes",
        "process_id",
        "distributed_timeout",
    }
)

logger = logging.getLogger(__name__)

# `train` or a function called like it
TrainFn = Callable[..., Any]


def point_key(row: Mapping[str, Any]) -> str:
    """A stable text key of one grid point (dim, alpha, lambda, nu)."""
    return "|".join(f"{float(row[k]):.6g}" for k in POINT)


def other_settings(config: Any) -> dict[str, Any]:
    """The settings of `config` that change a run's result besides the point and the KEY
    columns."""
    named = set(KEY)
    return {
        f.name: getattr(config, f.name)
        for f in dataclasses.fields(config)
        if f.name not in NOT_SETTINGS and f.name not in named
    }


def settings_hash(settings: Mapping[str, Any]) -> str:
    """12 hex digits of the SHA-256 of `settings` as sorted JSON."""
    text = json.dumps(dict(settings), sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def run_key(config: Any, fingerprint: str | None) -> dict[str, Any]:
    """What a sweep row's result depends on besides its point (the KEY columns): the dataset's
    fingerprint ("none" when it records none), the named settings, the run's epochs and
    evaluation cadence, and `settings_hash` of `other_settings`."""
    return {
        "dataset": fingerprint or "none",
        "seed": int(config.seed),
        "solver": str(config.solver),
        "cg_iters": int(config.cg_iters),
        "init_stddev": float(config.init_stddev),
        "table_dtype": str(config.table_dtype),
        "max_epochs": int(config.epochs),
        "eval_every": int(config.eval_every),
        "settings": settings_hash(other_settings(config)),
    }


def key_of(row: Mapping[str, Any]) -> dict[str, Any]:
    """The KEY columns of a row (those it lacks as None: written before rows had them)."""
    return {k: row.get(k) for k in KEY}


def key_differences(
    old: Mapping[str, Any], new: Mapping[str, Any], settings: Mapping[str, Mapping[str, Any]]
) -> str:
    """Why a row of key `old` is not reused under key `new`, in words."""
    if old.get("dataset") is None:
        return "recorded without its dataset and settings (an older sweep)"
    parts = []
    for name in KEY:
        a, b = old.get(name), new[name]
        if name == "dataset" and str(a) != str(b):
            parts.append(f"another dataset ({str(a)[:12]}, now {str(b)[:12]})")
        elif name == "settings" and str(a) != str(b):
            before, now = settings.get(str(a)), settings.get(str(b))
            changed = (
                [f"{k} {before.get(k)!r} -> {v!r}" for k, v in now.items() if before.get(k) != v]
                if before and now
                else []
            )
            parts.append(", ".join(changed) if changed else "other settings")
        elif name not in ("dataset", "settings") and _text(a) != _text(b):
            parts.append(f"{name} {_text(a)} -> {_text(b)}")
    return "; ".join(parts)


def _text(value: Any) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) else str(value)


def metric_names(config: Any) -> list[str]:
    """The validation metrics a sweep with `config` records, any of which `--metric` may pick:
    Recall@K of `eval_k`, NDCG of `ndcg_k`, overall and per activity bucket (`cold/...`)."""
    names = [f"{m}@{k}" for k in config.recall_ks() for m in ("recall", "recall_gt")]
    names += [f"ndcg@{config.ndcg_k}"] if config.ndcg_k else []
    return names + [f"{b}/{n}" for b in ACTIVITY_BUCKETS for n in names]


def check_metric(metric: str, config: Any) -> None:
    """A ConfigError (a usage error) unless the sweep's evaluation records `metric`."""
    names = metric_names(config)
    if metric not in names:
        raise ConfigError(
            f"--metric {metric!r}: the sweep's evaluation (--eval_k {config.eval_k}, --ndcg_k "
            f"{config.ndcg_k}) records {', '.join(names[: len(names) // 4])} (and per activity "
            "bucket, e.g. cold/...)"
        )


# columns of text; every other column is a number
TEXT_COLUMNS = ("dataset", "solver", "table_dtype", "settings")


def _value(name: str, text: str | None) -> Any:
    """A CSV cell: text for TEXT_COLUMNS, else an int where it is written as one, else a float
    (empty: nan)."""
    if name in TEXT_COLUMNS:
        return text or ""
    if text in ("", None):
        return float("nan")
    try:
        return int(text)
    except ValueError:
        return float(text)


def read_results(path: str) -> list[dict[str, Any]]:
    """The rows of a sweep CSV (integers as ints, other numbers as floats, TEXT_COLUMNS as text);
    [] when the file does not exist yet."""
    if not os.path.exists(path):
        return []
    with open(path, newline="", encoding="utf-8") as f:
        rows = []
        for n, row in enumerate(csv.DictReader(f), 2):
            try:
                rows.append({k: _value(k, v) for k, v in row.items()})
            except ValueError:
                raise ValueError(f"{path}:{n}: not a number in {row}") from None
        return rows


def _write(path: str, rows: Sequence[Mapping[str, Any]]) -> None:
    """`rows` (some) as the whole CSV file, replaced at once."""
    with fileio.replacing(path, "w") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _append(path: str, rows: Sequence[Mapping[str, Any]]) -> None:
    """`rows` added to the CSV; rows written before it had some of their columns (a sweep of an
    older version) are rewritten with those cells empty."""
    existing = read_results(path)
    fields = list(rows[0])
    if existing and list(existing[0]) != fields:
        if not set(existing[0]) < set(fields):
            raise ValueError(
                f"{path}: columns {list(existing[0])} differ from this sweep's {fields}; use a "
                "new out_dir"
            )
        _write(path, [{k: r.get(k, "") for k in fields} for r in existing])
    new = not existing
    with open(path, "w" if new else "a", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        if new:
            writer.writeheader()
        writer.writerows(rows)


def point_config(base: Any, row: Mapping[str, float], **changes: Any) -> Any:
    """`base` with a point's dim, alpha, lambda (reg), nu (reg_exponent) and any `changes`."""
    return dataclasses.replace(
        base,
        dim=int(row["dim"]),
        alpha=float(row["alpha"]),
        reg=float(row["lambda"]),
        reg_exponent=float(row["nu"]),
        **changes,
    )


def epoch_rows(
    point: Mapping[str, Any],
    history: Sequence[Mapping[str, Any]],
    compiles: int,
    key: Mapping[str, Any] | None = None,
    init_seconds: float = float("nan"),
) -> list[dict]:
    """One table row per evaluated epoch of a run: the point, `epochs`, its validation metrics
    (overall and per activity bucket), its cost (`init_seconds` of the run, the training and the
    evaluation seconds up to that epoch: `train_seconds` and `eval_seconds`), the run's
    compilations and its `key` (`run_key`)."""
    rows, seconds, evaluating = [], 0.0, 0.0
    for record in history:
        seconds += float(record.get("seconds", 0.0))
        evaluating += float(record.get("eval_seconds", 0.0))
        # an epoch without evaluation
        if not any("@" in k for k in record):
            continue
        row = dict(point)
        row["epochs"] = int(record["epoch"])
        row.update(
            {k: float(v) for k, v in record.items() if "@" in k and not k.startswith("popularity/")}
        )
        row.update(
            init_seconds=round(init_seconds, 3),
            train_seconds=round(seconds, 3),
            eval_seconds=round(evaluating, 3),
            compiles=int(compiles),
        )
        row.update(key or {})
        rows.append(row)
    return rows


def _read_settings(out_dir: str) -> dict[str, dict[str, Any]]:
    """`sweep_settings.json`: settings hash -> the settings it hashes ({} when absent)."""
    path = os.path.join(out_dir, SETTINGS_JSON)
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return dict(json.load(f))


def _reusable(
    path: str,
    key: Mapping[str, Any],
    settings: Mapping[str, Mapping[str, Any]],
    log: Callable[[str], None],
) -> tuple[set[str], dict[str, str]]:
    """The points of `path` done with exactly `key` (their rows kept), and why each other point
    recorded there is not reused; rows of another key are dropped from the file."""
    rows = read_results(path)
    kept = [r for r in rows if key_of(r) == dict(key)]
    why = {
        point_key(r): key_differences(key_of(r), key, settings)
        for r in rows
        if key_of(r) != dict(key)
    }
    if len(kept) < len(rows):
        if kept:
            _write(path, kept)
        else:
            os.remove(path)
        log(
            f"{path}: dropped {len(rows) - len(kept)} row(s) of {len(why)} point(s) trained on "
            "another dataset or with other settings"
        )
    return {point_key(r) for r in kept}, why


class _Clock(Callback):
    """A point's wall seconds: `init` those before its first epoch (its tables, the evaluation's
    set-up, and its batches when not prepared), `total` those so far."""

    def __init__(self):
        self.began = time.perf_counter()
        self.init = 0.0

    def on_train_begin(self, run: Any) -> None:
        self.init = time.perf_counter() - self.began

    @property
    def total(self) -> float:
        return time.perf_counter() - self.began


def _point_line(rows: Sequence[Mapping[str, Any]], metric: str, clock: _Clock) -> str:
    """A trained point's log line: its cost (init, epochs, evaluation) and compilations, then its
    validation `metric` by evaluated epoch."""
    last = rows[-1]
    best = max(rows, key=lambda r: np.nan_to_num(r.get(metric, np.nan), nan=-1.0))
    return (
        f"{clock.total:.1f} s (init {last['init_seconds']:.1f} s, {last['epochs']:g} epochs "
        f"{last['train_seconds']:.1f} s, evaluation {last['eval_seconds']:.1f} s), "
        f"{last['compiles']:g} compilations; validation {metric} by epoch "
        + " ".join(f"{r.get(metric, np.nan):.4f}" for r in rows)
        + f" (best {best.get(metric, np.nan):.4f} at epoch {best['epochs']:g})"
    )


def _tuning_config(base: Any, point: Mapping[str, Any], model_dir: str, epochs: int) -> Any:
    """The config of a point's tuning run: on the validation splits, into `model_dir`, evaluated
    every `eval_every` epochs (0: after the last only), no checkpoint but the last."""
    return point_config(
        base,
        point,
        validation=True,
        model_dir=model_dir,
        eval_every=base.eval_every or epochs,
        checkpoint_every=0,
    )


def run_sweep(
    base_config: Any,
    out_dir: str,
    dims: Sequence[int],
    alphas: Sequence[float],
    lambdas: Sequence[float],
    nus: Sequence[float] = (0.0,),
    *,
    train_fn: TrainFn | None = None,
    keep_models: bool = False,
    log: Callable[[str], None] = logger.info,
    fingerprint: str | None = None,
    dataset: Any = None,
) -> list[dict[str, Any]]:
    """Train every (dim, alpha, lambda, nu) not yet in `out_dir/sweep.csv` with the same
    `run_key` (dataset `fingerprint` and settings) on the validation split, evaluating every
    `eval_every` epochs (0: after the last only) and after the last; return the rows of this key.
    The points of one d share one `prepare` (the validation split read, both sides planned and
    packed once; of `dataset`, the opened `base_config.data`, when given); each is trained by
    `train_fn(config, callbacks=, prepared=, tables=False, checkpoints=keep_models) -> Model`
    (default `train`)."""
    train_fn = train_fn or train
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, RESULTS_CSV)
    key = run_key(base_config, fingerprint)
    settings = _read_settings(out_dir)
    if settings.get(key["settings"]) is None:
        settings[key["settings"]] = json.loads(json.dumps(other_settings(base_config), default=str))
        fileio.write_atomic(
            os.path.join(out_dir, SETTINGS_JSON), json.dumps(settings, indent=2, sort_keys=True)
        )
    done, why = _reusable(path, key, settings, log)
    points = [
        {"dim": int(d), "alpha": float(a), "lambda": float(lam), "nu": float(nu)}
        for d in dims
        for nu in nus
        for lam in lambdas
        for a in alphas
    ]
    reused = sum(point_key(p) in done for p in points)
    retrained = [p for p in points if point_key(p) in why and point_key(p) not in done]
    if reused or retrained:
        log(
            f"{out_dir}: {reused} of {len(points)} points reused (same dataset and settings), "
            f"{len(retrained)} retrained: "
            + ("; ".join(sorted({why[point_key(p)] for p in retrained})) or "none")
        )
    metric = f"recall_gt@{base_config.recall_ks()[0]}"
    epochs = int(base_config.epochs)
    models = os.path.join(out_dir, "models")
    for dim in dict.fromkeys(p["dim"] for p in points):
        group = [(i, p) for i, p in enumerate(points, 1) if p["dim"] == dim]
        todo = [p for _, p in group if point_key(p) not in done]
        prepared = None
        if todo:
            t0 = time.perf_counter()
            prepared = prepare(
                _tuning_config(base_config, todo[0], models, epochs), dataset=dataset
            )
            log(
                f"d={dim}: validation split read and both sides planned in "
                f"{time.perf_counter() - t0:.1f} s, kept for {len(todo)} point(s)"
            )
        for i, point in group:
            name = " ".join(f"{k}={point[k]:g}" for k in POINT)
            if point_key(point) in done:
                log(
                    f"[{i}/{len(points)}] {name}: done before with the same dataset and settings, "
                    "reused"
                )
                continue
            model_dir = os.path.join(models, point_key(point).replace("|", "_"))
            # a model directory of a run that did not finish: its checkpoints are of other settings
            shutil.rmtree(model_dir, ignore_errors=True)
            config = _tuning_config(base_config, point, model_dir, epochs)
            clock = _Clock()
            before = compile_cache.counts().requests
            model = train_fn(
                config,
                callbacks=[clock],
                prepared=prepared,
                tables=False,
                checkpoints=keep_models,
            )
            rows = epoch_rows(
                point, model.metrics, compile_cache.counts().requests - before, key, clock.init
            )
            _append(path, rows)
            done.add(point_key(point))
            if not keep_models:
                shutil.rmtree(model_dir, ignore_errors=True)
            log(f"[{i}/{len(points)}] {name}: " + _point_line(rows, metric, clock))
        # the group's batches leave the devices before the next d's are packed
        del prepared
    return [r for r in read_results(path) if key_of(r) == key]


def best_row(
    rows: Sequence[Mapping[str, float]], metric: str = DEFAULT_METRIC
) -> Mapping[str, float]:
    """The row with the highest `metric` (the first one on ties)."""
    if not rows:
        raise ValueError("no sweep results")
    if metric not in rows[0]:
        raise ValueError(
            f"metric {metric!r} is not a column of the sweep table ({', '.join(rows[0])})"
        )
    return max(rows, key=lambda r: np.nan_to_num(r.get(metric, float("nan")), nan=-1.0))


def final_run(
    base_config: Any,
    best: Mapping[str, Any],
    out_dir: str,
    ks: Sequence[int] = (20,),
    ndcg_k: int = 20,
    train_fn: TrainFn | None = None,
    fingerprint: str | None = None,
    log: Callable[[str], None] = logger.info,
) -> dict[str, Any]:
    """Train the best point on the full training data (`out_dir/final`) and evaluate it on test.
    A `final/` of another point, dataset `fingerprint` or settings than `final.json` records is
    removed and trained again; one of the same is resumed (nothing to train once complete)."""
    train_fn = train_fn or train
    config = point_config(
        base_config,
        best,
        epochs=int(best["epochs"]),
        validation=False,
        model_dir=os.path.join(out_dir, "final"),
        eval_every=0,
    )
    record = {
        "point": {k: best[k] for k in POINT + ("epochs",)},
        "key": run_key(config, fingerprint),
    }
    record_path = os.path.join(out_dir, FINAL_JSON)
    if os.path.exists(config.model_dir):
        before = None
        if os.path.exists(record_path):
            with open(record_path, encoding="utf-8") as f:
                before = json.load(f)
        if before != json.loads(json.dumps(record)):
            shutil.rmtree(config.model_dir)
            log(
                f"{config.model_dir}: of another point, dataset or settings "
                f"({'no ' + FINAL_JSON if before is None else FINAL_JSON + ' differs'}); "
                "trained again"
            )
    # what final/ holds (or is being trained as: a rerun resumes it only with the same record)
    fileio.write_atomic(record_path, json.dumps(record, indent=2, sort_keys=True) + "\n")
    model = train_fn(config)
    result = evaluate_dataset(model, config.data, config, Ranking(ks=ks, ndcg_k=ndcg_k))
    seconds = [r["seconds"] for r in model.metrics if "seconds" in r]
    # after the first epoch, which compiles the programs
    seconds = seconds[1:] or seconds
    return {
        "point": record["point"],
        "test": result,
        "seconds_per_epoch": float(np.mean(seconds)) if seconds else float("nan"),
        "model_dir": config.model_dir,
    }


def write_outputs(
    rows: Sequence[Mapping[str, float]],
    out_dir: str,
    base_config: Any,
    metric: str,
    final: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """`sweep.json` (rows, best, final), `best_config.json` and the heatmap, each replaced whole;
    their paths."""
    best = best_row(rows, metric)
    paths = {
        "json": os.path.join(out_dir, RESULTS_JSON),
        "config": os.path.join(out_dir, BEST_CONFIG),
    }
    summary = {
        "metric": metric,
        "split": "validation",
        "best": dict(best),
        "rows": list(rows),
        "final": dict(final) if final else None,
    }
    # each file replaced whole: an interrupted sweep leaves the previous one
    fileio.write_atomic(paths["json"], json.dumps(summary, indent=2))
    tuned = point_config(
        base_config, best, epochs=int(best["epochs"]), validation=False, model_dir="", data=""
    )
    keep = (
        "dim",
        "alpha",
        "reg",
        "reg_exponent",
        "epochs",
        "solver",
        "cg_iters",
        "block_size",
        "init_stddev",
        "seed",
        "eval_k",
        "ndcg_k",
    )
    values = {k: getattr(tuned, k) for k in keep}
    # `train --config` evaluates on test once, after the last epoch
    values["eval_every"] = values["epochs"]
    fileio.write_atomic(paths["config"], json.dumps(values, indent=2) + "\n")
    paths["heatmap"] = plot_heatmap(rows, os.path.join(out_dir, HEATMAP_PNG), metric)
    return paths


def _slice(rows: Sequence[Mapping[str, float]], metric: str) -> tuple[Mapping[str, float], list]:
    """The best row and the rows sharing its dim, nu and epochs (the lambda x alpha plane through
    it)."""
    best = best_row(rows, metric)
    same = [r for r in rows if all(r[k] == best[k] for k in ("dim", "nu", "epochs"))]
    return best, same


def _grid(
    rows: Sequence[Mapping[str, float]], metric: str
) -> tuple[list[float], list[float], np.ndarray]:
    """Lambdas and alphas, ascending, and the metric at each (lambda, alpha)."""
    lambdas = sorted({r["lambda"] for r in rows})
    alphas = sorted({r["alpha"] for r in rows})
    grid = np.full((len(lambdas), len(alphas)), np.nan)
    for r in rows:
        grid[lambdas.index(r["lambda"]), alphas.index(r["alpha"])] = r.get(metric, np.nan)
    return lambdas, alphas, grid


def cell_digits(values: np.ndarray, least: int = 3, most: int = 6) -> int:
    """The fewest decimals (from `least` up to `most`) that print the distinct finite `values`
    distinctly."""
    finite = np.unique(values[np.isfinite(values)])
    for digits in range(least, most):
        if len({f"{v:.{digits}f}" for v in finite}) == len(finite):
            return digits
    return most


def format_table(
    rows: Sequence[Mapping[str, float]], metric: str = DEFAULT_METRIC, top: int = 10
) -> str:
    """The `top` points by `metric`, then the lambda x alpha grid at the best d, nu and epochs (best
    marked `*`)."""
    best, same = _slice(rows, metric)
    ranked = sorted(rows, key=lambda r: -np.nan_to_num(r.get(metric, np.nan), nan=-1.0))[:top]
    cols = [c for c in ("recall@20", "recall_gt@20", "ndcg@20") if c in rows[0]] or [metric]
    points = len({point_key(r) for r in rows})
    epochs = len({r["epochs"] for r in rows})
    lines = [
        f"validation, top {len(ranked)} of {len(rows)} rows ({points} grid points x {epochs} "
        "evaluated "
        f"epoch counts) by {metric}:",
        f"{'dim':>6} {'alpha':>9} {'lambda':>9} {'nu':>5} {'epochs':>6} "
        + " ".join(f"{c:>12}" for c in cols),
    ]
    for r in ranked:
        lines.append(
            f"{r['dim']:>6g} {r['alpha']:>9.3g} {r['lambda']:>9.3g} {r['nu']:>5g} "
            f"{r['epochs']:>6g} " + " ".join(f"{r.get(c, np.nan):>12.4f}" for c in cols)
        )
    lambdas, alphas, grid = _grid(same, metric)
    digits = cell_digits(grid, least=4)
    lines.append(
        f"{metric} at dim={best['dim']:g} nu={best['nu']:g} epochs={best['epochs']:g}, lambda "
        "(rows) x alpha:"
    )
    lines.append(f"{'':>10}" + "".join(f"{a:>10.3g}" for a in alphas))
    for i, lam in enumerate(lambdas):
        cells = []
        for j, a in enumerate(alphas):
            mark = "*" if (lam, a) == (best["lambda"], best["alpha"]) else " "
            cells.append(
                "       -  " if np.isnan(grid[i, j]) else f"{grid[i, j]:>9.{digits}f}{mark}"
            )
        lines.append(f"{lam:>10.3g}" + "".join(cells))
    lines.append(
        "best (*): "
        + " ".join(f"{k}={best[k]:g}" for k in POINT + ("epochs",))
        + f" {metric}={best[metric]:.4f}"
    )
    return "\n".join(lines)


def format_final(final: Mapping[str, Any], metric: str = DEFAULT_METRIC) -> str:
    """One line: the tuned point trained on the full training data, on test."""
    test = final["test"]
    shown = " ".join(f"{k}={v:.4f}" for k, v in test.items() if "@" in k and "/" not in k)
    point = " ".join(f"{k}={v:g}" for k, v in final["point"].items())
    per_epoch = f"{final['seconds_per_epoch']:.2f} s/epoch after the first"
    return f"test (full training data, {point}, {per_epoch}): {shown}"


def plot_heatmap(
    rows: Sequence[Mapping[str, float]], path: str, metric: str = DEFAULT_METRIC
) -> str:
    """A lambda x alpha heatmap of `metric` at the best d, nu and epochs, values written in, best
    boxed."""
    # matplotlib (0.5 s to import) only where a heatmap is drawn; no pyplot: no GUI backend
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle  # (as above)

    best, same = _slice(rows, metric)
    lambdas, alphas, grid = _grid(same, metric)
    fig = Figure(figsize=(1.2 * len(alphas) + 2.5, 0.8 * len(lambdas) + 1.8))
    ax = fig.subplots()
    # lambda grows upwards
    im = ax.imshow(np.ma.masked_invalid(grid), cmap="viridis", aspect="auto", origin="lower")
    ax.set_xticks(range(len(alphas)), [f"{a:.2g}" for a in alphas])
    ax.set_yticks(range(len(lambdas)), [f"{lam:.2g}" for lam in lambdas])
    ax.set_xlabel("alpha (unobserved weight)")
    ax.set_ylabel("lambda (L2 regularization)")
    ax.set_title(
        f"validation {metric}, d={best['dim']:g} nu={best['nu']:g} epochs={best['epochs']:g}"
    )
    finite = grid[np.isfinite(grid)]
    mid = float(finite.mean()) if finite.size else 0.0
    digits = cell_digits(grid)
    for i in range(len(lambdas)):
        for j in range(len(alphas)):
            if np.isfinite(grid[i, j]):
                ax.text(
                    j,
                    i,
                    f"{grid[i, j]:.{digits}f}",
                    ha="center",
                    va="center",
                    color="black" if grid[i, j] > mid else "white",
                    fontsize=8,
                )
    bi, bj = lambdas.index(best["lambda"]), alphas.index(best["alpha"])
    ax.add_patch(Rectangle((bj - 0.5, bi - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2.5))
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    with fileio.replacing(path, "wb") as f:
        fig.savefig(f, dpi=100, format="png")
    return path
