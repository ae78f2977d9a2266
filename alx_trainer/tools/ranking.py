"""Fold-in and top K of the tools (`predict`, `export --topk`), the way `eval` does them.

The one place where the tools use the evaluation's top K (`evaluation.topk`): new pages are
folded in from their known columns with the trainer's solve (paper Eq. 4), `rows_per_call` rows
per call as `top_k_rows` folds in, and every query is ranked against all columns on the devices
(`BlockedScorer`: row batches, column blocks, exact), its excluded columns left out, so a page
given as a test row's fold-in links gets `eval`'s ranking. The column table is put on the devices
once, for every chunk of rows a tool streams.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from alx_trainer.evaluation.topk import FOLD_IN_CHUNK, BlockedScorer
from alx_trainer.model import fold_in


class Ranker:
    """A column table on the devices, answering top-K queries of folded-in or given row vectors;
    a given `batch_size` is capped at the rows to score, `rows` (when known) and `rows_per_call`,
    so that no device holds scores of rows that do not exist."""

    def __init__(
        self,
        col_table: np.ndarray,
        config: Any,
        *,
        mesh: Any = None,
        batch_size: int | None = None,
        rows: int | None = None,
    ):
        self.col_table = np.asarray(col_table, np.float32)
        self.config = config
        self.rows_per_call = FOLD_IN_CHUNK  # rows per fold-in call, as `top_k_rows` folds in
        if batch_size:
            most = self.rows_per_call if rows is None else min(rows, self.rows_per_call)
            batch_size = min(batch_size, max(1, most))
        self.scorer = BlockedScorer(self.col_table, mesh, rows_per_batch=batch_size)

    @property
    def num_cols(self) -> int:
        return self.col_table.shape[0]

    def describe(self, k: int) -> str:
        """The devices, block shape and memory bound of a query, for the log."""
        return self.scorer.describe(k)

    def fold_in(self, known: Sequence[np.ndarray]) -> np.ndarray:
        """Row vectors `[n, d]` solved from each row's known columns against the column table."""
        return np.asarray(fold_in(self.col_table, list(known), self.config), np.float32)

    def top_k(
        self, queries: np.ndarray, exclude: Sequence[np.ndarray], k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Scores and column ids `[n, k]`, best first, of each query against every column but its
        `exclude`; slots past the admissible columns hold id -1 and score -inf."""
        found = self.scorer.top_k(queries, [np.asarray(e, np.int64) for e in exclude], k)
        return found.scores, found.ids

    def fold_in_top_k(
        self, known: Sequence[np.ndarray], exclude: Sequence[np.ndarray], k: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """`top_k` of the rows folded in from `known`, `rows_per_call` rows per fold-in call."""
        scores = np.full((len(known), k), -np.inf, np.float32)
        ids = np.full((len(known), k), -1, np.int64)
        for lo in range(0, len(known), self.rows_per_call):
            hi = min(lo + self.rows_per_call, len(known))
            scores[lo:hi], ids[lo:hi] = self.top_k(self.fold_in(known[lo:hi]), exclude[lo:hi], k)
        return scores, ids
