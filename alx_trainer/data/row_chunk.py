"""`RowChunk`: rows of the matrix in CSR form, and the operations the reader and packer need."""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np


@dataclasses.dataclass
class RowChunk:
    """A chunk of rows in CSR form: row `k` has columns `cols[indptr[k]:indptr[k+1]]`.

    `indptr` usually starts at 0; a chunk whose `indptr` starts later (a view into a larger
    `cols`) is valid everywhere too.
    """

    row_ids: np.ndarray  # int64 [n]
    indptr: np.ndarray  # int64 [n + 1]
    cols: np.ndarray  # int64 [nnz]

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.indptr)

    def __len__(self) -> int:
        return len(self.row_ids)

    @classmethod
    def from_rows(cls, row_ids: Sequence[int], rows: Sequence[Sequence[int]]) -> RowChunk:
        """In-memory rows (e.g. fold-in of a few test rows) as one chunk."""
        lengths = np.array([len(r) for r in rows], dtype=np.int64)
        indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        parts = [np.asarray(r, dtype=np.int64) for r in rows]
        cols = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        return cls(np.asarray(row_ids, dtype=np.int64), indptr, cols)

    @classmethod
    def empty(cls) -> RowChunk:
        return cls(np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(0, np.int64))

    def take(self, lo: int, hi: int) -> RowChunk:
        """Rows [lo, hi), their `indptr` from 0 (a view of this chunk's arrays)."""
        start, stop = self.indptr[lo], self.indptr[hi]
        return RowChunk(
            self.row_ids[lo:hi], self.indptr[lo : hi + 1] - start, self.cols[start:stop]
        )

    def select(self, keep: np.ndarray) -> RowChunk:
        """The rows where the boolean mask `keep` is true, in order."""
        lengths = self.lengths[keep]
        starts = self.indptr[:-1][keep]
        entry_row = np.repeat(np.arange(len(lengths)), lengths)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        cols = self.cols[starts[entry_row] + np.arange(offsets[-1]) - offsets[:-1][entry_row]]
        return RowChunk(self.row_ids[keep], offsets, cols)

    @staticmethod
    def concat(chunks: Sequence[RowChunk]) -> RowChunk:
        """The rows of `chunks` one after another (the one chunk itself when only one has rows)."""
        full = [c for c in chunks if len(c)]
        if len(full) <= 1:
            return full[0] if full else RowChunk.empty()
        used = [(c.indptr[0], c.indptr[-1]) for c in full]
        offsets = np.cumsum([0] + [hi - lo for lo, hi in used[:-1]])
        indptr = np.concatenate(
            [[0]] + [c.indptr[1:] - lo + o for c, (lo, _), o in zip(full, used, offsets)]
        ).astype(np.int64)
        cols = np.concatenate([c.cols[lo:hi] for c, (lo, hi) in zip(full, used)])
        return RowChunk(np.concatenate([c.row_ids for c in full]), indptr, cols)
