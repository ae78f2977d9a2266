"""Strong-generalization evaluation (paper 4.6 and 5): fold in, score every column, top-K, Recall@K.

By what it is given:
- `evaluate_rows(tables, known, gt, ...)`: explicit rows (`RaggedRows` of the fold-in columns
  and of the ground truth);
- `evaluate_dataset(tables, data, ...)`: a dataset directory or an opened `Dataset` (its test or
  validation rows, column popularity from its training split, ids shared or not from stats.json);
- `evaluate_model_dir(model_dir, data, ...)`: the latest checkpoint of a `train` run on that data.

Each test row is folded in from its `col_tag` with the trainer's own solve (paper Eq. 4) or, on a
given split (whose test users are training rows), taken from the model's trained row table, and
ranked against every column with its fold-in items excluded, in row batches and column blocks
(`ranking.Ranker`: exact, or `lax.approx_max_k` with its recall against exact measured on a
sample). A popularity recommender (columns ranked by their number of training rows) is scored on
the same split by the same code, as the baseline the paper worries about (section 6.1). The model
and the rows come from `alx_trainer.loading`; `evaluate_model_dir` times its phases
(`phase_times`: load, read, compile, rank).
"""

from __future__ import annotations

import logging
import os
from typing import Any, Mapping

import numpy as np

from alx_trainer import compile_cache, loading, phase_times
from alx_trainer.data.dataset import Dataset
from alx_trainer.evaluation import metrics, topk
from alx_trainer.evaluation.ranking import FoldInFn, Ranking, check_columns
from alx_trainer.loading import EvalData, Tables, eval_data, model_tables
from webgraph_contract.ragged import RaggedRows

log = logging.getLogger(__name__)

# rows ranked exactly as well, to measure the approximate top K's recall
APPROX_SAMPLE = 1000


def evaluate_rows(
    model_or_tables: Tables,
    known: RaggedRows,
    gt: RaggedRows,
    config: Any = None,
    ranking: Ranking | None = None,
    *,
    popularity: np.ndarray | None = None,
    exclude_self: bool = False,
    trained_rows: bool = False,
    fold_in_fn: FoldInFn | None = None,
) -> dict[str, float]:
    """Recall@k for k in `ranking.ks` and NDCG@`ranking.ndcg_k` of a model on the rows `known`
    (row ids and fold-in columns) with ground truth `gt` (row k of both: one test row), overall
    and per activity bucket (`cold/recall@20`, ...: rows by their number of fold-in items,
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
    if not len(known):
        raise loading.no_test_rows("evaluation")
    if len(gt) != len(known):
        raise ValueError(f"gt: need one row per row of known ({len(known)}), got {len(gt)}")
    # the fold-in columns are checked where the ranker takes them
    check_columns(gt, len(col_table), "test row")
    queries: dict[str, Any] = {"exclude_self": exclude_self}
    if trained_rows:
        queries["row_table"] = row_table
    depth = ranking.depth()
    ranker = ranking.ranker(col_table, config, rows=len(known), fold_in_fn=fold_in_fn)
    ids = ranker.rank(known, depth, **queries).ids
    # once for both summaries
    per_row = metrics.per_row_metrics(ids, gt, ranking.ks, ranking.ndcg_k)
    out = {name: metrics.mean_metric(v) for name, v in per_row.items()}
    out.update(metrics.bucket_means(per_row, gt, known.lengths))
    if ranking.approx:
        out[f"approx_recall@{depth}"] = _approx_recall(
            ranking, col_table, config, known, ids, queries, fold_in_fn
        )
    if popularity is not None:
        exclude = known.with_ids(known.row_ids) if exclude_self else known
        pop_ids = topk.top_k_shared(popularity, depth, exclude).ids
        pop = metrics.ranking_metrics(pop_ids, gt, ranking.ks, ranking.ndcg_k)
        out.update({f"popularity/{name}": v for name, v in pop.items()})
    out["num_rows"] = float(len(known))
    out["num_rows_with_gt"] = float(np.count_nonzero(gt.lengths))
    # 1: scored from the trained rows, 0: folded in
    out["trained_rows"] = float(trained_rows)
    return out


def _approx_recall(
    ranking: Ranking,
    col_table: np.ndarray,
    config: Any,
    known: RaggedRows,
    approx_ids: np.ndarray,
    queries: dict[str, Any],
    fold_in_fn: FoldInFn | None,
) -> float:
    """Recall of the approximate top K against the exact one on up to `APPROX_SAMPLE` evenly
    spaced rows."""
    sample = np.unique(
        np.linspace(0, len(known) - 1, min(len(known), APPROX_SAMPLE)).astype(np.int64)
    )
    ranker = ranking.ranker(
        col_table, config, rows=len(sample), approx=False, fold_in_fn=fold_in_fn
    )
    exact = ranker.rank(known.select(sample), ranking.depth(), **queries).ids
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
    fold_in_fn: FoldInFn | None = None,
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
    dataset = data if isinstance(data, Dataset) else loading.for_split(data, split)
    rows = eval_data(dataset)
    # read only here: a validation evaluation without the baseline leaves the training split
    popularity = rows.popularity if baseline else None
    return _evaluate_read(
        model_or_tables,
        dataset,
        rows,
        popularity,
        config,
        ranking,
        trained_rows,
        max_rows,
        fold_in_fn,
    )


def _evaluate_read(
    model_or_tables: Tables,
    dataset: Dataset,
    rows: EvalData,
    popularity: np.ndarray | None,
    config: Any,
    ranking: Ranking | None,
    trained_rows: bool | None,
    max_rows: int | None,
    fold_in_fn: FoldInFn | None,
) -> dict[str, float]:
    """`evaluate_dataset` once its rows (and the baseline's `popularity`) are read."""
    known, gt = rows.known, rows.gt
    log.info("%s: %d %s rows to evaluate", dataset.name, len(known), dataset.eval_split)
    row_table, _, _ = model_tables(model_or_tables)
    if trained_rows is None:
        trained_rows = dataset.protocol == "given_split" and row_table is not None
    if max_rows:
        known, gt = known.take(0, min(max_rows, len(known))), gt.take(0, min(max_rows, len(gt)))
    if not len(known):
        raise loading.no_test_rows(dataset.name)
    return evaluate_rows(
        model_or_tables,
        known,
        gt,
        config,
        ranking,
        popularity=popularity,
        exclude_self=rows.shared,
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
    a TFDS name), refused unless the model was trained on it (`loading.load`). `fold_in`: fold
    every row in, also on a given split."""
    with phase_times.timed("load", "model and data"):
        # the row table only where the rows score from it (`trained_rows`), not for a fold-in
        model, dataset = loading.load(model_dir, data, tfds_data_dir, False if fold_in else None)
    dataset = loading.for_split(dataset, split)
    with phase_times.timed("read", "rows to evaluate"):
        rows = eval_data(dataset)
        popularity = rows.popularity
    with compile_cache.phase("rank"):
        trained_rows = False if fold_in else None
        return _evaluate_read(
            model, dataset, rows, popularity, None, ranking, trained_rows, max_rows, None
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
