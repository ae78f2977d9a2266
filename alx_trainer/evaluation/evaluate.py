"""Strong-generalization evaluation (paper 4.6 and 5): fold in, score every column, top-K, Recall@K.

By what it is given:
- `evaluate_rows(tables, rows, ...)`: explicit `(row, fold_in_cols, gt_cols)` rows;
- `evaluate_dataset(tables, data, ...)`: a dataset directory or an opened `Dataset` (its test or
  validation rows, column popularity from its training split, ids shared or not from stats.json);
- `evaluate_model_dir(model_dir, data, ...)`: the latest checkpoint of a `train` run on that data.

Each test row is folded in from its `col_tag` with the trainer's own solve (paper Eq. 4) or, on a
given split (whose test users are training rows), taken from the model's trained row table, and
ranked against every column with its fold-in items excluded, in row batches and column blocks
(`topk.top_k_rows`: exact, or `lax.approx_max_k` with its recall against exact measured on a
sample). A popularity recommender (columns ranked by their number of training rows) is scored on the
same split by the same code, as the baseline the paper worries about (section 6.1).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from typing import Any, Mapping, Sequence

import jax
import numpy as np
from jax.sharding import Mesh

from alx_trainer.data import integrity, records
from alx_trainer.data.dataset import Dataset, open_dataset, open_directory, validation_view
from alx_trainer.evaluation import metrics, topk
from alx_trainer.model import Model, load_model
from webgraph_contract import dataset_reader, fileio, stats_json

log = logging.getLogger(__name__)

Row = tuple[int, np.ndarray, np.ndarray]  # (row_tag, fold-in col_tag, gt_tag)
Tables = Any  # a trainer `Model` or a `(row_table or None, col_table)` pair
APPROX_SAMPLE = 1000  # rows ranked exactly as well, to measure the approximate top K's recall


@dataclasses.dataclass(frozen=True)
class Ranking:
    """What to report and how rows are ranked: cut-offs, exact or approximate top K, block shape
    (`topk.top_k_rows`), devices and the progress bar."""

    ks: Sequence[int] = (20, 50)
    ndcg_k: int | None = 100
    approx: bool = False
    recall_target: float = 0.95
    rows_per_batch: int | None = None
    cols_per_block: int | None = None
    mesh: Mesh | Sequence[Any] | None = None
    progress: bool | None = None

    def depth(self) -> int:
        """The K of the top K to find: the largest cut-off."""
        return max(list(self.ks) + ([self.ndcg_k] if self.ndcg_k else []))

    def top_k(
        self,
        col_table: np.ndarray,
        known: Sequence[np.ndarray],
        *,
        approx: bool | None = None,
        **queries: Any,
    ) -> topk.TopK:
        return topk.top_k_rows(
            col_table,
            self.depth(),
            known,
            approx=self.approx if approx is None else approx,
            recall_target=self.recall_target,
            rows_per_batch=self.rows_per_batch,
            cols_per_block=self.cols_per_block,
            mesh=self.mesh,
            progress=self.progress,
            **queries,
        )


def one_device_mesh() -> Mesh:
    """This process's first device alone: evaluation of CPU runs whose devices are split per core
    (the training loop uses it; see `alx_trainer.cli.train.split_cpu` for why). In a multi-process
    run every process evaluates on its own device, with no collective across processes, and gets
    the same result (`jax.devices()[0]` would be process 0's, which the others cannot use)."""
    return Mesh(np.array(jax.local_devices()[:1]), ("cols",))


def model_tables(
    model_or_tables: Tables | str | os.PathLike,
) -> tuple[np.ndarray | None, np.ndarray, Any]:
    """(row_table, col_table, config) from a Model, a model directory or a (row, col) pair."""
    if isinstance(model_or_tables, (str, os.PathLike)):
        model_or_tables = load_model(os.fspath(model_or_tables))
    if isinstance(model_or_tables, tuple):
        row, col = model_or_tables
        return row, np.asarray(col, np.float32), None
    return (
        getattr(model_or_tables, "row_table", None),
        np.asarray(model_or_tables.col_table, np.float32),
        getattr(model_or_tables, "config", None),
    )


@functools.lru_cache(maxsize=8)
def _load_eval_data(
    test: tuple[str, ...],
    train: tuple[str, ...],
    shape: tuple[int, int],
    shared: bool,
    stamp: tuple,
) -> tuple[list[Row], np.ndarray, bool]:
    """Rows of the `test` files, column popularity (rows per column of the `train` files) and
    `shared`."""
    counts = np.zeros(shape[1], np.int64)
    for chunk in records.read_chunks(train, 1 << 16, *shape):
        counts += np.bincount(chunk.ids, minlength=shape[1])
    return dataset_reader.read_records(test), counts.astype(np.float32), shared


def load_eval_data(data: str | Dataset, split: str = "test") -> tuple[list[Row], np.ndarray, bool]:
    """Cached read of the rows to evaluate, the column popularity (rows per column of the matching
    training split) and whether ids are shared, for every kind of `--data`: a dataset directory
    (its `split`, test or validation) or an opened `Dataset` (its `files["test"]`, which
    `validation_view` points at the validation rows, and `files["train"]`), TFDS ones included."""
    dataset = data if isinstance(data, Dataset) else _directory(os.fspath(data), split)
    if not dataset.files.get("test"):
        raise ValueError(
            f"{dataset.name}: no test rows to evaluate "
            "(the dataset was built without a test split?)"
        )
    stats = os.path.join(dataset.data_dir, stats_json.STATS_FILE)
    stamp = (dataset.fingerprint, os.path.getmtime(stats) if os.path.exists(stats) else 0.0)
    return _load_eval_data(
        tuple(dataset.files["test"]),
        tuple(dataset.files["train"]),
        (dataset.num_rows, dataset.num_cols),
        not dataset.bipartite,
        stamp,
    )


def _directory(data_dir: str, split: str) -> Dataset:
    """A dataset directory opened for evaluating its `split` (test, or validation)."""
    if split not in ("test", "validation"):
        raise ValueError(f"split: expected 'test' or 'validation', got {split!r}")
    dataset = open_directory(data_dir)
    return validation_view(dataset) if split == "validation" else dataset


def evaluate_rows(
    model_or_tables: Tables,
    rows: Sequence[Row],
    config: Any = None,
    ranking: Ranking | None = None,
    *,
    popularity: np.ndarray | None = None,
    exclude_self: bool = False,
    trained_rows: bool = False,
    fold_in_fn: topk.FoldInFn | None = None,
) -> dict[str, float]:
    """Recall@k for k in `ranking.ks` and NDCG@`ranking.ndcg_k` of a model on `rows`, overall and
    per activity bucket (`cold/recall@20`, ...: rows by their number of fold-in items,
    `metrics.ACTIVITY_CUTS`).

    `model_or_tables`: a trainer `Model` or a `(row_table, col_table)` pair; `config` is passed to
    the fold-in solve (default: the model's own; `fold_in_fn(col_table, lists, config)` replaces the
    solve). With `popularity` the same metrics are reported for the popularity baseline under
    `popularity/...`. `exclude_self` also removes the row's own id from its ranking (a graph).
    `trained_rows`: score each row from the model's own row table instead of folding it in (a row
    with no fold-in item was never trained: it scores from zeros, as its fold-in would). With
    `ranking.approx`, `approx_recall@K` is the approximate top K's recall against the exact one on
    up to `APPROX_SAMPLE` rows.
    """
    ranking = ranking or Ranking()
    row_table, col_table, model_config = model_tables(model_or_tables)
    config = config if config is not None else model_config
    if trained_rows and row_table is None:
        raise ValueError("trained_rows: the model has no row table (pass a Model or both tables)")
    if not rows:
        raise ValueError("no test rows to evaluate (the dataset was built without a test split?)")
    known = [np.asarray(c, np.int64) for _, c, _ in rows]
    row_ids = np.array([r for r, _, _ in rows], np.int64)
    gts = [np.asarray(g, np.int64) for _, _, g in rows]
    _check_ids(row_ids, known, gts, col_table.shape[0], len(row_table) if trained_rows else None)
    queries: dict[str, Any] = {"row_ids": row_ids, "exclude_self": exclude_self}
    if trained_rows:
        queries["row_table"] = row_table
    else:
        queries.update(config=config, fold_in_fn=fold_in_fn)
    ks, ndcg_k = ranking.ks, ranking.ndcg_k
    ids = ranking.top_k(col_table, known, **queries).ids
    per_row = metrics.per_row_metrics(ids, gts, ks, ndcg_k)  # once for both summaries
    out = {name: metrics.mean_metric(v) for name, v in per_row.items()}
    out.update(metrics.bucket_means(per_row, gts, [len(c) for c in known]))
    if ranking.approx:
        out[f"approx_recall@{ranking.depth()}"] = _approx_recall(
            ranking, col_table, known, ids, queries
        )
    if popularity is not None:
        exclude = [np.append(c, r) for c, r in zip(known, row_ids)] if exclude_self else known
        pop_ids = topk.top_k_shared(popularity, ranking.depth(), exclude).ids
        out.update(
            {
                f"popularity/{name}": v
                for name, v in metrics.ranking_metrics(pop_ids, gts, ks, ndcg_k).items()
            }
        )
    out["num_rows"] = float(len(rows))
    out["num_rows_with_gt"] = float(sum(1 for g in gts if len(g)))
    out["trained_rows"] = float(trained_rows)  # 1: scored from the trained rows, 0: folded in
    return out


def _check_ids(
    row_ids: np.ndarray,
    known: Sequence[np.ndarray],
    gts: Sequence[np.ndarray],
    num_cols: int,
    num_rows: int | None,
) -> None:
    """One line naming the first test row with a column outside the table (or, with `num_rows`, a
    row outside the row table)."""
    for lists in (known, gts):
        ids = np.concatenate(list(lists) + [np.zeros(0, np.int64)])
        bad = np.flatnonzero((ids < 0) | (ids >= num_cols))
        if len(bad):
            at = int(np.searchsorted(np.cumsum([len(c) for c in lists]), bad[0], side="right"))
            raise ValueError(
                f"test row {row_ids[at]} names column {ids[bad[0]]} "
                f"outside the table's 0..{num_cols - 1}"
            )
    if num_rows is not None:
        bad = np.flatnonzero((row_ids < 0) | (row_ids >= num_rows))
        if len(bad):
            raise ValueError(
                f"test row {row_ids[bad[0]]} is outside the model's row table 0..{num_rows - 1}"
            )


def _approx_recall(
    ranking: Ranking,
    col_table: np.ndarray,
    known: Sequence[np.ndarray],
    approx_ids: np.ndarray,
    queries: dict[str, Any],
) -> float:
    """Recall of the approximate top K against the exact one on up to `APPROX_SAMPLE` evenly
    spaced rows."""
    sample = np.unique(
        np.linspace(0, len(known) - 1, min(len(known), APPROX_SAMPLE)).astype(np.int64)
    )
    picked = {name: (v[sample] if name == "row_ids" else v) for name, v in queries.items()}
    exact = ranking.top_k(col_table, [known[i] for i in sample], approx=False, **picked).ids
    recall = topk.approx_recall(approx_ids[sample], exact)
    log.info(
        "approximate top %d: recall %.4f against exact on %d rows",
        ranking.depth(),
        recall,
        len(sample),
    )
    return recall


def evaluate_dataset(
    model_or_tables: Tables,
    data: str | os.PathLike | Dataset,
    config: Any = None,
    ranking: Ranking | None = None,
    *,
    split: str = "test",
    baseline: bool = True,
    trained_rows: bool | None = None,
    max_rows: int | None = None,
    fold_in_fn: topk.FoldInFn | None = None,
) -> dict[str, float]:
    """`evaluate_rows` on a dataset's held-out rows: a dataset directory (its `split`: `test`, or
    `validation` with popularity from `validation_train`) or an opened `Dataset` (a TFDS one too;
    `validation_view` points it at the validation rows). The popularity baseline comes from its
    training split (unless `baseline` is False); the row's own id is excluded on a graph (shared
    ids, from stats.json); `max_rows`: the first rows only.

    `trained_rows`: the default (None) scores each row from the model's trained row table when the
    dataset's protocol is `given_split` and the model has its row table: there every test (or
    validation) user is a training row, `col_tag` its training items, and the trained row is what
    LightGCN-style tables and implicit score. A fold-in solves the same least-squares problem, but
    `cg_iters` CG steps from zero stop short of the trained row (warm-started over every epoch): on
    Gowalla at d=1024 it scored 0.0031 lower (docs/benchmarks.md).
    """
    dataset = data if isinstance(data, Dataset) else _directory(os.fspath(data), split)
    rows, popularity, shared = load_eval_data(dataset)
    log.info("%s: %d %s rows to evaluate", dataset.name, len(rows), dataset.eval_split)
    row_table, _, _ = model_tables(model_or_tables)
    if trained_rows is None:
        trained_rows = dataset.protocol == "given_split" and row_table is not None
    rows = rows[:max_rows] if max_rows else rows
    if not rows:
        raise ValueError(
            f"{dataset.name}: no test rows to evaluate "
            "(the dataset was built without a test split?)"
        )
    return evaluate_rows(
        model_or_tables,
        rows,
        config,
        ranking,
        popularity=popularity if baseline else None,
        exclude_self=shared,
        trained_rows=trained_rows,
        fold_in_fn=fold_in_fn,
    )


def evaluate_model_dir(
    model_dir: str,
    data: str,
    ranking: Ranking | None = None,
    *,
    tfds_data_dir: str = "",
    split: str = "test",
    fold_in: bool = False,
    max_rows: int | None = None,
) -> dict[str, float]:
    """`evaluate_dataset` of the latest checkpoint of `model_dir` on `data` (a dataset directory or
    a TFDS name), refused unless the model was trained on it (same `dataset_fingerprint`; a warning
    when either side predates fingerprints). `fold_in`: fold every row in, also on a given split."""
    if not fileio.isdir(model_dir):
        raise FileNotFoundError(
            f"{model_dir}: model directory not found; give the --model_dir of a `train` run"
        )
    model: Model = load_model(model_dir)
    dataset = open_dataset(data, tfds_data_dir)
    integrity.check_same_data(
        model_dir, model.dataset_fingerprint, model.config.data, data, dataset.fingerprint
    )
    if split == "validation":
        dataset = validation_view(dataset)
    elif split != "test":
        raise ValueError(f"split: expected 'test' or 'validation', got {split!r}")
    return evaluate_dataset(
        model, dataset, ranking=ranking, trained_rows=False if fold_in else None, max_rows=max_rows
    )


def format_metrics(result: Mapping[str, float]) -> str:
    """One line per metric, model and popularity baseline side by side, then the model per
    activity bucket."""
    names = [n for n in result if "@" in n and "/" not in n and not n.startswith("approx_recall@")]
    lines = [f"{'metric':<12} {'model':>8} {'popularity':>10}"]
    for name in names:
        pop = result.get(f"popularity/{name}")
        lines.append(f"{name:<12} {result[name]:>8.4f} {'' if pop is None else f'{pop:>10.4f}'}")
    scored = (
        "from their trained rows"
        if result.get("trained_rows")
        else "by folding them in from their fold-in items"
    )
    lines.append(
        f"rows: {int(result.get('num_rows', 0))} "
        f"({int(result.get('num_rows_with_gt', 0))} with ground truth), "
        f"scored {scored}"
    )
    buckets = [b for b in metrics.ACTIVITY_BUCKETS if f"{b}/rows" in result]
    if buckets:
        lo, hi = metrics.ACTIVITY_CUTS
        lines.append(f"by activity (fold-in items: cold < {lo} <= medium < {hi} <= heavy), model:")
        lines.append(f"{'metric':<12}" + "".join(f" {b:>8}" for b in buckets))
        for name in names:
            lines.append(
                f"{name:<12}" + "".join(f" {result[f'{b}/{name}']:>8.4f}" for b in buckets)
            )
        lines.append(f"{'rows':<12}" + "".join(f" {int(result[f'{b}/rows']):>8}" for b in buckets))
    for name in (n for n in result if n.startswith("approx_recall@")):
        lines.append(
            f"approximate top {name.split('@')[1]}: recall {result[name]:.4f} against exact "
            f"(on up to {APPROX_SAMPLE} rows)"
        )
    lines.append("recall@K = hits / min(K, |gt|) (ALX paper); recall_gt@K = hits / |gt| (LightGCN)")
    return "\n".join(lines)
