"""Rows ranked against every column, for `eval`, `predict` and `export --topk`.

`Ranking` says what an evaluation reports and how it ranks (cut-offs, exact or approximate, block
shape, devices, progress bar); `Ranking.ranker` makes the `Ranker` that does it. A `Ranker` holds a
column table placed once on the devices by its engine (`topk.make_engine`) and the training config
of the fold-in: rows given by their known columns are folded in (paper Eq. 4, the trainer's solve
`model.fold_in`, `FOLD_IN_CHUNK` rows per call) or taken from the trained row table, and ranked
with their known columns (and, on a graph, their own id) excluded. Column ids are checked where
they enter, here.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import time
from typing import Any, Callable, Sequence

import numpy as np
from jax.sharding import Mesh
from tqdm import tqdm

from alx_trainer.evaluation import topk
from alx_trainer.evaluation.engine import TopK, default_block_shape, devices_of
from alx_trainer.model import fold_in
from webgraph_contract.ragged import RaggedRows

log = logging.getLogger(__name__)

# rows folded in per call of the trainer's solve: each call plans its own batch shapes, which
# compile anew when they differ, so few large calls (1M rows of d = 128: 0.5 GB of queries)
FOLD_IN_CHUNK = 1 << 20
FoldInFn = Callable[[np.ndarray, Sequence[np.ndarray], Any], np.ndarray]
Rows = RaggedRows | Sequence[np.ndarray]


def as_rows(rows: Rows) -> RaggedRows:
    """`rows` as RaggedRows (a sequence of id arrays is converted, row ids 0..n-1)."""
    return rows if isinstance(rows, RaggedRows) else RaggedRows.from_lists(rows)


def check_columns(rows: RaggedRows, num_cols: int, what: str = "row") -> None:
    """One line naming the first row with a column id outside `0..num_cols - 1`."""
    ids = rows.ids[rows.indptr[0] : rows.indptr[-1]]
    bad = np.flatnonzero((ids < 0) | (ids >= num_cols))
    if len(bad):
        at = int(np.searchsorted(rows.indptr - rows.indptr[0], bad[0], side="right")) - 1
        raise ValueError(
            f"{what} {rows.row_ids[at]} names column {ids[bad[0]]} "
            f"outside the table's 0..{num_cols - 1}"
        )


class Ranker:
    """A column table on the devices (`engine`), answering top-K queries of folded-in, trained or
    given row vectors. `config`: the training config of the fold-in (or `fold_in_fn(col_table,
    lists, config)` replaces the solve); `mesh`: a Mesh or devices (default
    `engine.default_devices()`); `batch_size` x `cols_per_block`: the block shape (defaults by
    backend, `engine.default_block_shape`), the batch capped at `rows` (the rows to score, when
    known) and `FOLD_IN_CHUNK`, so that no device holds scores of rows that do not exist;
    `approx`: `lax.approx_max_k` per block with `recall_target`; `progress`: a bar on stderr in
    `rank` (default: when stderr is a terminal)."""

    def __init__(
        self,
        col_table: np.ndarray,
        config: Any = None,
        *,
        mesh: Mesh | Sequence[Any] | None = None,
        batch_size: int | None = None,
        cols_per_block: int | None = None,
        rows: int | None = None,
        approx: bool = False,
        recall_target: float = 0.95,
        progress: bool | None = None,
        fold_in_fn: FoldInFn | None = None,
    ):
        self.col_table = np.asarray(col_table, np.float32)
        self.config, self.fold_in_fn, self.progress = config, fold_in_fn, progress
        self.rows_per_call = FOLD_IN_CHUNK
        devices = devices_of(mesh)
        shape = default_block_shape(devices[0].platform)
        most = self.rows_per_call if rows is None else min(rows, self.rows_per_call)
        shape = shape._replace(rows=min(batch_size or shape.rows, max(1, most)))
        shape = shape._replace(cols=cols_per_block or shape.cols)
        self.engine = topk.make_engine(
            self.col_table, devices, shape, approx=approx, recall_target=recall_target
        )

    @property
    def num_cols(self) -> int:
        return self.col_table.shape[0]

    def describe(self, k: int) -> str:
        """The devices, block shape and memory bound of a query, for the log."""
        return self.engine.describe(k)

    def fold_in(self, known: Rows) -> np.ndarray:
        """Row vectors `[n, d]` solved from each row's known columns against the column table."""
        known = as_rows(known)
        if self.fold_in_fn is not None:
            return np.asarray(
                self.fold_in_fn(self.col_table, known.lists(), self.config), np.float32
            )
        if self.config is None:
            raise ValueError("config: the fold-in needs the training config (or give row_table)")
        return np.asarray(fold_in(self.col_table, known, self.config), np.float32)

    def top_k(self, queries: np.ndarray, exclude: Rows, k: int, progress=None) -> TopK:
        """Column ids and scores `[n, k]`, best first, of each query against every column but its
        `exclude`; slots past the admissible columns hold id -1 and score -inf."""
        exclude = as_rows(exclude)
        check_columns(exclude, self.num_cols)
        return self.engine.top_k(queries, exclude, k, progress)

    def fold_in_top_k(self, known: Rows, exclude: Rows, k: int, progress=None) -> TopK:
        """`top_k` of the rows folded in from `known`, `rows_per_call` rows per fold-in call."""
        known, exclude = as_rows(known), as_rows(exclude)
        check_columns(known, self.num_cols)
        check_columns(exclude, self.num_cols)
        return self._fold_in_top_k(known, exclude, k, progress)

    def _fold_in_top_k(self, known: RaggedRows, exclude: RaggedRows, k: int, progress) -> TopK:
        """`fold_in_top_k` of rows whose ids are checked."""
        ids = np.full((len(known), k), -1, np.int64)
        scores = np.full((len(known), k), -np.inf, np.float32)
        for lo in range(0, len(known), self.rows_per_call):
            hi = min(lo + self.rows_per_call, len(known))
            queries = self.fold_in(known.take(lo, hi))
            found = self.engine.top_k(queries, exclude.take(lo, hi), k, progress)
            ids[lo:hi], scores[lo:hi] = found
        return TopK(ids, scores)

    def rank(
        self,
        known: RaggedRows,
        k: int,
        *,
        row_table: np.ndarray | None = None,
        exclude_self: bool = False,
    ) -> TopK:
        """Top-`k` column ids and scores `[n, k]` of the rows `known` (row ids `known.row_ids`,
        their known column ids never returned): with `row_table`, row i is
        `row_table[known.row_ids[i]]` (zeros for a row without known columns: it was never
        trained), otherwise it is folded in from its known columns. `exclude_self`: also exclude
        each row's own id (a graph: row and column ids shared)."""
        n = len(known)
        check_columns(known, self.num_cols)
        exclude = known.with_ids(known.row_ids) if exclude_self else known
        if (
            row_table is not None
            and n
            and not (0 <= known.row_ids.min() and known.row_ids.max() < len(row_table))
        ):
            raise ValueError(f"row ids outside the row table's 0..{len(row_table) - 1}")
        log.info("top-k of %d rows: %s", n, self.describe(k))
        began = time.perf_counter()
        with _progress_bar(n, self.progress, "top-k") as bar:
            if row_table is None:
                found = self._fold_in_top_k(known, exclude, k, bar.update)
            else:
                has = known.lengths > 0
                queries = np.where(
                    has[:, None], np.asarray(row_table[known.row_ids], np.float32), 0.0
                )
                found = self.engine.top_k(queries, exclude, k, bar.update)
        seconds = time.perf_counter() - began
        log.info("top-k of %d rows in %.1f s (%.0f rows/s)", n, seconds, n / max(seconds, 1e-9))
        scored, blocks = self.engine.blocks
        if blocks:
            log.info(
                "scored %d of %d column blocks (%.1f%%): the norm bound ruled out the rest",
                scored,
                blocks,
                100 * scored / blocks,
            )
        return found


def _progress_bar(total: int, enabled: bool | None, desc: str) -> tqdm:
    """A tqdm bar on stderr (by default only on a terminal) with rows per second."""
    enabled = sys.stderr.isatty() if enabled is None else enabled
    return tqdm(
        total=total,
        desc=desc,
        unit="row",
        unit_scale=True,
        file=sys.stderr,
        disable=not enabled,
        leave=False,
        smoothing=0.1,
    )


@dataclasses.dataclass(frozen=True)
class Ranking:
    """What an evaluation reports and how it ranks rows: cut-offs, exact or approximate top K,
    block shape (`rows_per_batch` x `cols_per_block`, defaults by backend), devices (`mesh`) and
    the progress bar; `ranker` makes the `Ranker` that ranks them so."""

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

    def ranker(
        self,
        col_table: np.ndarray,
        config: Any = None,
        *,
        rows: int | None = None,
        approx: bool | None = None,
        fold_in_fn: FoldInFn | None = None,
    ) -> Ranker:
        """A `Ranker` of `col_table` ranking `rows` rows (when known) as this says (`approx`
        overrides `self.approx`)."""
        return Ranker(
            col_table,
            config,
            mesh=self.mesh,
            batch_size=self.rows_per_batch,
            cols_per_block=self.cols_per_block,
            rows=rows,
            approx=self.approx if approx is None else approx,
            recall_target=self.recall_target,
            progress=self.progress,
            fold_in_fn=fold_in_fn,
        )


def top_k(
    col_table: np.ndarray,
    k: int,
    known: Rows,
    *,
    row_table: np.ndarray | None = None,
    config: Any = None,
    exclude_self: bool = False,
    approx: bool = False,
    recall_target: float = 0.95,
    mesh: Mesh | Sequence[Any] | None = None,
    progress: bool | None = None,
) -> TopK:
    """Top-`k` column ids and scores `[n, k]` of n rows, their known columns never returned.

    Args:
        col_table: the trained column table `[num_cols, d]`.
        k: how many columns per row.
        known: each row's known column ids: `RaggedRows` (its `row_ids` index `row_table`) or a
            sequence of id arrays (rows 0..n-1).
        row_table: score the trained rows `row_table[row id]`; without it each row is folded in
            from its known columns (paper Eq. 4) with `config`.
        config: the training config of the fold-in (a `TrainConfig`, e.g. `model.config`).
        exclude_self: also exclude each row's own id (a graph: row and column ids shared).
        approx: `lax.approx_max_k` per block with `recall_target` instead of the exact top K.
        recall_target: the approximate top K's recall target, in (0, 1].
        mesh: a Mesh or devices to split the columns over (default: this process's devices).
        progress: a bar on stderr (default: when stderr is a terminal).

    Returns:
        `TopK(ids, scores)`: int64 ids best first, ties to the lower id; -1 (score -inf) where
        fewer than `k` columns are admissible.
    """
    rows = as_rows(known)
    ranker = Ranker(
        col_table,
        config,
        mesh=mesh,
        rows=len(rows),
        approx=approx,
        recall_target=recall_target,
        progress=progress,
    )
    return ranker.rank(rows, k, row_table=row_table, exclude_self=exclude_self)
