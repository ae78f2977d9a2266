"""Strong-generalization evaluation (paper 4.6 and 5): fold in, score every column, top-K, Recall@K.

Each test row is folded in from its `col_tag` with the trainer's own solve (paper Eq. 4) or, on a
given split (whose test users are training rows), taken from the model's trained row table, scored
against every column with the column table sharded by rows over all devices of a mesh
(`shard_map`), its fold-in items are excluded, and the top K is taken per shard (`lax.top_k`, or
`lax.approx_max_k` with a configurable recall target) and merged after an `all_gather` of the
K best of every shard. At most one batch of rows x all columns of scores exists at a time, spread
over the devices. A popularity recommender (columns ranked by their number of training rows) is
scored on the same split by the same code, as the baseline the paper worries about (section 6.1).
"""

from __future__ import annotations

import functools
import math
import os
from typing import Any, Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from alx_trainer.data import records
from alx_trainer.data.dataset import Dataset, open_directory, validation_view
from alx_trainer.evaluation import metrics
from alx_trainer.model import fold_in, load_model
from webgraph_contract import dataset_reader, stats_json

Row = tuple[int, np.ndarray, np.ndarray]  # (row_tag, fold-in col_tag, gt_tag)
FoldInFn = Callable[[np.ndarray, Sequence[np.ndarray], Any], np.ndarray]

SCORE_BUDGET_BYTES = 1 << 30  # default bound on one batch of float32 scores (all devices together)
FOLD_IN_CHUNK = 1 << 16  # test rows folded in per call of the trainer's solve


def default_mesh() -> Mesh:
    """A 1-D mesh over every device, axis `cols`."""
    return Mesh(np.array(jax.devices()), ("cols",))


def one_device_mesh() -> Mesh:
    """The first device alone: evaluation of CPU runs whose devices are split per core (the
    training loop uses it; see `alx_trainer.cli.train.split_cpu` for why)."""
    return Mesh(np.array(jax.devices()[:1]), ("cols",))


@functools.lru_cache(maxsize=64)
def _topk_kernel(mesh: Mesh, num_cols: int, k: int, approx: bool, recall_target: float):
    """The jitted sharded scorer: (queries [B, d], table [N_pad, d] row-sharded, exclude [B, E])."""
    axes = tuple(mesh.axis_names)

    def local(queries, table, exclude):
        n_local = table.shape[0]
        offset = jax.lax.axis_index(axes) * n_local
        scores = jnp.dot(queries, table.T, preferred_element_type=jnp.float32)
        ids = offset + jnp.arange(n_local)
        scores = jnp.where(ids[None, :] < num_cols, scores, -jnp.inf)
        local_ex = exclude - offset
        local_ex = jnp.where((exclude >= 0) & (local_ex >= 0) & (local_ex < n_local), local_ex, n_local)
        scores = scores.at[jnp.arange(scores.shape[0])[:, None], local_ex].set(-jnp.inf, mode="drop")
        k_local = min(k, n_local)
        if approx:
            vals, idx = jax.lax.approx_max_k(scores, k_local, recall_target=recall_target)
        else:
            vals, idx = jax.lax.top_k(scores, k_local)
        all_vals = jax.lax.all_gather(vals, axes, axis=1, tiled=True)
        all_ids = jax.lax.all_gather(idx + offset, axes, axis=1, tiled=True)
        best, pos = jax.lax.top_k(all_vals, k)
        return best, jnp.take_along_axis(all_ids, pos, axis=1)

    fn = jax.shard_map(
        local, mesh=mesh, in_specs=(P(), P(axes, None), P()), out_specs=(P(), P()), check_vma=False
    )
    return jax.jit(fn)


class ShardedScorer:
    """A column table sharded by rows over a mesh, answering top-K queries in fixed-shape batches."""

    def __init__(self, col_table: np.ndarray, mesh: Mesh | None = None):
        self.mesh = mesh or default_mesh()
        self.num_cols, self.dim = col_table.shape
        shards = self.mesh.devices.size
        padded = math.ceil(max(self.num_cols, 1) / shards) * shards
        table = np.zeros((padded, self.dim), np.float32)
        table[: self.num_cols] = np.asarray(col_table, np.float32)
        self.table = jax.device_put(table, NamedSharding(self.mesh, P(tuple(self.mesh.axis_names), None)))

    def default_batch_size(self, budget_bytes: int = SCORE_BUDGET_BYTES) -> int:
        """Rows per batch so that one batch of float32 scores stays within `budget_bytes`."""
        return int(max(1, min(1024, budget_bytes // (4 * self.table.shape[0]))))

    def topk(
        self,
        queries: np.ndarray,
        exclude: Sequence[np.ndarray],
        k: int,
        *,
        approx: bool = False,
        recall_target: float = 0.95,
        batch_size: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Scores and column ids `[n, k]` of the best columns per query, excluding `exclude[i]`.

        Slots beyond the number of admissible columns get score -inf and id -1.
        """
        queries = np.asarray(queries, np.float32)
        n = len(queries)
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise ValueError(f"queries must be [n, {self.dim}], got {queries.shape}")
        if len(exclude) != n:
            raise ValueError(f"need one exclusion list per query: {len(exclude)} for {n} queries")
        if k <= 0:
            raise ValueError(f"k must be positive, got {k}")
        k_run = min(k, self.table.shape[0])  # more than the table holds: the rest is padding
        # an explicit batch size keeps one static shape across calls; by default fit small queries
        batch = batch_size or min(self.default_batch_size(), max(n, 1))
        width = 1 << max(0, int(max((len(e) for e in exclude), default=0)) - 1).bit_length()
        kernel = _topk_kernel(self.mesh, self.num_cols, k_run, bool(approx), float(recall_target))
        scores = np.full((n, k), -np.inf, np.float32)
        ids = np.full((n, k), -1, np.int64)
        for start in range(0, n, batch):
            stop = min(n, start + batch)
            q = np.zeros((batch, self.dim), np.float32)
            q[: stop - start] = queries[start:stop]
            ex = np.full((batch, width), -1, np.int32)
            for i, e in enumerate(exclude[start:stop]):
                ex[i, : len(e)] = e
            s, j = kernel(q, self.table, ex)
            scores[start:stop, :k_run] = np.asarray(s)[: stop - start]
            ids[start:stop, :k_run] = np.asarray(j)[: stop - start]
        ids[~np.isfinite(scores)] = -1
        return scores, ids


def _tables(model_or_tables: Any) -> tuple[np.ndarray | None, np.ndarray, Any]:
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
def _load_eval_data(test: tuple[str, ...], train: tuple[str, ...], shape: tuple[int, int], shared: bool,
                    stamp: tuple) -> tuple[list[Row], np.ndarray, bool]:
    """Rows of the `test` files, column popularity (rows per column of the `train` files) and `shared`."""
    counts = np.zeros(shape[1], np.int64)
    for chunk in records.read_chunks(train, 1 << 16, *shape):
        counts += np.bincount(chunk.cols, minlength=shape[1])
    return dataset_reader.read_records(test), counts.astype(np.float32), shared


def load_eval_data(data: str | Dataset, split: str = "test") -> tuple[list[Row], np.ndarray, bool]:
    """Cached read of the rows to evaluate, the column popularity (rows per column of the matching
    training split) and whether ids are shared, for every kind of `--data`: a dataset directory
    (its `split`, test or validation) or an opened `Dataset` (its `files["test"]`, which
    `validation_view` points at the validation rows, and `files["train"]`), TFDS ones included."""
    dataset = data if isinstance(data, Dataset) else _directory(os.fspath(data), split)
    if not dataset.files.get("test"):
        raise ValueError(f"{dataset.name}: no test rows to evaluate (the dataset was built without a test split?)")
    stats = os.path.join(dataset.data_dir, stats_json.STATS_FILE)
    stamp = (dataset.fingerprint, os.path.getmtime(stats) if os.path.exists(stats) else 0.0)
    return _load_eval_data(tuple(dataset.files["test"]), tuple(dataset.files["train"]),
                           (dataset.num_rows, dataset.num_cols), not dataset.bipartite, stamp)


def _directory(data_dir: str, split: str) -> Dataset:
    """A dataset directory opened for evaluating its `split` (test, or validation)."""
    if split not in ("test", "validation"):
        raise ValueError(f"split: expected 'test' or 'validation', got {split!r}")
    dataset = open_directory(data_dir)
    return validation_view(dataset) if split == "validation" else dataset


def evaluate(
    model_or_tables: Any,
    data_dir_or_rows: str | Dataset | Sequence[Row],
    config: Any = None,
    *,
    ks: Sequence[int] = (20, 50),
    ndcg_k: int | None = 100,
    approx: bool = False,
    recall_target: float = 0.95,
    batch_size: int | None = None,
    mesh: Mesh | None = None,
    popularity: np.ndarray | None = None,
    exclude_self: bool | None = None,
    fold_in_fn: FoldInFn | None = None,
    max_rows: int | None = None,
    split: str = "test",
    baseline: bool = True,
    trained_rows: bool | None = None,
) -> dict[str, float]:
    """Recall@k for k in `ks` and NDCG@`ndcg_k` of a model on the held-out rows of a split, overall and
    per activity bucket (`cold/recall@20`, ...: rows by their number of fold-in items, `metrics.ACTIVITY_CUTS`).

    `model_or_tables`: a trainer `Model`, a model directory, or a `(row_table, col_table)` pair.
    `data_dir_or_rows`: a dataset directory (its `test` split; popularity from its `train` split)
    (`split`: `test`, or `validation` with popularity from `validation_train`), an opened `Dataset`
    (a TFDS one too; see `load_eval_data`) or a sequence of
    `(row, fold_in_cols, gt_cols)`. `config` is passed to the fold-in solve
    (default: the model's own). With `popularity` (or a directory) the same metrics are reported
    for the popularity baseline under `popularity/...` (unless `baseline` is False). `exclude_self` also removes the row's own
    id from its ranking (default: on for a graph with shared ids, read from `stats.json`).

    `trained_rows`: score each row from the model's own row table instead of folding it in. The
    default (None) does so for a directory whose `stats.json` protocol is `given_split` when the
    model has its row table: there every test (or validation) user is a training row, `col_tag` its
    training items, and the trained row is what LightGCN-style tables and implicit score. A fold-in
    solves the same least-squares problem, but `cg_iters` CG steps from zero stop short of the
    trained row (warm-started over every epoch): on Gowalla at d=1024 it scored 0.0031 lower
    (the retired `implicit_trajectory.py`, docs/benchmarks.md). A row with no fold-in item was never trained: it scores
    from zeros, as its fold-in would.
    """
    row_table, col_table, model_config = _tables(model_or_tables)
    config = config if config is not None else model_config
    given_split, dataset = False, None
    if isinstance(data_dir_or_rows, (str, os.PathLike, Dataset)):
        dataset = data_dir_or_rows
        if not isinstance(dataset, Dataset):
            dataset = _directory(os.fspath(dataset), split)
        rows, pop, shared = load_eval_data(dataset)
        popularity = (pop if popularity is None else popularity) if baseline else None
        exclude_self = shared if exclude_self is None else exclude_self
        given_split = dataset.protocol == "given_split"
    else:
        rows = list(data_dir_or_rows)
    trained_rows = given_split and row_table is not None if trained_rows is None else trained_rows
    if trained_rows and row_table is None:
        raise ValueError("trained_rows: the model has no row table (pass a Model, a model directory or both tables)")
    rows = rows[:max_rows] if max_rows else rows
    if not rows:
        where = f"{dataset.name}: " if dataset is not None else ""
        raise ValueError(f"{where}no test rows to evaluate (the dataset was built without a test split?)")
    num_cols = col_table.shape[0]
    for r, cols, gt in rows:
        bad = [c for c in np.concatenate([cols, gt]) if not 0 <= c < num_cols]
        if bad:
            raise ValueError(f"test row {r} names column {bad[0]} outside the table's 0..{num_cols - 1}")
        if trained_rows and not 0 <= r < len(row_table):
            raise ValueError(f"test row {r} is outside the model's row table 0..{len(row_table) - 1}")
    exclude = [np.concatenate([c, [r]]) if exclude_self else c for r, c, _ in rows]
    exclude = [e.astype(np.int64) for e in exclude]
    gts = [np.asarray(g) for _, _, g in rows]
    k = max(list(ks) + ([ndcg_k] if ndcg_k else []))
    scorer = ShardedScorer(col_table, mesh)
    batch = batch_size or scorer.default_batch_size()
    fold_in_fn = fold_in_fn or fold_in
    ids = np.empty((len(rows), k), np.int64)
    # fold in many rows per call (the solve streams them itself); score them `batch` rows at a time
    chunk = max(batch, (FOLD_IN_CHUNK // batch) * batch)
    for start in range(0, len(rows), chunk):
        part = rows[start : start + chunk]
        if trained_rows:
            queries = _trained(row_table, part)
        else:
            queries = np.asarray(fold_in_fn(col_table, [c for _, c, _ in part], config), np.float32)
        _, ids[start : start + len(part)] = scorer.topk(
            queries, exclude[start : start + len(part)], k,
            approx=approx, recall_target=recall_target, batch_size=batch,
        )
    out = metrics.ranking_metrics(ids, gts, ks, ndcg_k)
    out.update(metrics.bucket_metrics(ids, gts, [len(c) for _, c, _ in rows], ks, ndcg_k))
    if popularity is not None:
        pop_scorer = ShardedScorer(np.asarray(popularity, np.float32)[:, None], mesh)
        _, pop_ids = pop_scorer.topk(np.ones((len(rows), 1), np.float32), exclude, k, batch_size=batch)
        out.update({f"popularity/{name}": v for name, v in metrics.ranking_metrics(pop_ids, gts, ks, ndcg_k).items()})
    out["num_rows"] = float(len(rows))
    out["num_rows_with_gt"] = float(sum(1 for g in gts if len(g)))
    out["trained_rows"] = float(trained_rows)  # 1: scored from the trained rows, 0: folded in
    return out


def _trained(row_table: np.ndarray, rows: Sequence[Row]) -> np.ndarray:
    """The trained rows of `rows` (zeros for a row without fold-in items: it was never trained)."""
    ids = np.array([r for r, _, _ in rows], np.int64)
    trained = np.array([len(c) > 0 for _, c, _ in rows])
    return np.where(trained[:, None], np.asarray(row_table[ids], np.float32), 0.0).astype(np.float32)


def format_metrics(result: Mapping[str, float]) -> str:
    """One line per metric, model and popularity baseline side by side, then the model per activity bucket."""
    names = [n for n in result if "@" in n and "/" not in n]
    lines = [f"{'metric':<12} {'model':>8} {'popularity':>10}"]
    for name in names:
        pop = result.get(f"popularity/{name}")
        lines.append(f"{name:<12} {result[name]:>8.4f} {'' if pop is None else f'{pop:>10.4f}'}")
    scored = "from their trained rows" if result.get("trained_rows") else "by folding them in from their fold-in items"
    lines.append(f"rows: {int(result.get('num_rows', 0))} ({int(result.get('num_rows_with_gt', 0))} with ground truth), "
                 f"scored {scored}")
    buckets = [b for b in metrics.ACTIVITY_BUCKETS if f"{b}/rows" in result]
    if buckets:
        lo, hi = metrics.ACTIVITY_CUTS
        lines.append(f"by activity (fold-in items: cold < {lo} <= medium < {hi} <= heavy), model:")
        lines.append(f"{'metric':<12}" + "".join(f" {b:>8}" for b in buckets))
        for name in names:
            lines.append(f"{name:<12}" + "".join(f" {result[f'{b}/{name}']:>8.4f}" for b in buckets))
        lines.append(f"{'rows':<12}" + "".join(f" {int(result[f'{b}/rows']):>8}" for b in buckets))
    lines.append("recall@K = hits / min(K, |gt|) (ALX paper); recall_gt@K = hits / |gt| (LightGCN)")
    return "\n".join(lines)
