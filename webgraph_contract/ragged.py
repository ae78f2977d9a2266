"""`RaggedRows`: the one type for rows of ragged id lists (CSR), used from the reader to the
evaluation.

Row `k` is `row_ids[k]` with ids `ids[indptr[k]:indptr[k + 1]]` (and `values[...]` of the same
span when the rows carry weights). A dataset's `train`/`train_t` records, a chunk of rows being
batched, fold-in rows and the exclusion lists of top K are all this type.

`indptr` usually starts at 0; a value whose `indptr` starts later (a view into a larger `ids`) is
valid everywhere too. `ids` keep the dtype they were made with (int32 where the ids fit halves the
memory of a large dataset); `indptr` and `row_ids` are int64.
"""

from __future__ import annotations

import dataclasses
from typing import Iterator, Sequence

import numpy as np


@dataclasses.dataclass
class RaggedRows:
    """Rows of ragged id lists: row `k` is `row_ids[k]` with `ids[indptr[k]:indptr[k + 1]]`."""

    row_ids: np.ndarray
    indptr: np.ndarray
    ids: np.ndarray
    values: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.row_ids)

    @property
    def lengths(self) -> np.ndarray:
        """The number of ids of each row (int64 [n])."""
        return np.diff(self.indptr)

    @property
    def nnz(self) -> int:
        """The number of ids in all rows."""
        return int(self.indptr[-1] - self.indptr[0])

    @classmethod
    def empty(cls, dtype=np.int64) -> RaggedRows:
        return cls(np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(0, dtype))

    @classmethod
    def from_lists(
        cls,
        rows: Sequence[Sequence[int]],
        row_ids: Sequence[int] | np.ndarray | None = None,
        dtype=np.int64,
    ) -> RaggedRows:
        """In-memory lists of ids as rows (`row_ids` 0..n-1 unless given)."""
        lengths = np.fromiter((len(r) for r in rows), np.int64, len(rows))
        indptr = np.zeros(len(rows) + 1, np.int64)
        np.cumsum(lengths, out=indptr[1:])
        parts = [np.asarray(r, dtype).ravel() for r in rows]
        ids = np.concatenate(parts) if parts else np.zeros(0, dtype)
        rid = np.arange(len(rows), dtype=np.int64) if row_ids is None else row_ids
        return cls(np.asarray(rid, np.int64), indptr, ids)

    def row(self, k: int) -> np.ndarray:
        """The ids of row `k` (a view)."""
        return self.ids[self.indptr[k] : self.indptr[k + 1]]

    def lists(self) -> list[np.ndarray]:
        """Each row's ids as an array (views)."""
        return [self.row(k) for k in range(len(self))]

    def __iter__(self) -> Iterator[tuple[int, np.ndarray]]:
        """`(row id, ids)` for each row."""
        return zip(self.row_ids.tolist(), self.lists())

    def take(self, lo: int, hi: int) -> RaggedRows:
        """Rows [lo, hi), their `indptr` from 0 (views of this value's arrays)."""
        start, stop = self.indptr[lo], self.indptr[hi]
        values = None if self.values is None else self.values[start:stop]
        return RaggedRows(
            self.row_ids[lo:hi], self.indptr[lo : hi + 1] - start, self.ids[start:stop], values
        )

    def _gather(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(indptr from 0, positions in `ids`) of the rows `index`, in that order."""
        lengths = self.indptr[index + 1] - self.indptr[index]
        indptr = np.zeros(len(index) + 1, np.int64)
        np.cumsum(lengths, out=indptr[1:])
        starts = np.repeat(self.indptr[index] - indptr[:-1], lengths)
        return indptr, starts + np.arange(indptr[-1])

    def select(self, index: np.ndarray) -> RaggedRows:
        """The rows at `index` (integer positions in that order, or a boolean mask)."""
        index = np.asarray(index)
        index = np.flatnonzero(index) if index.dtype == bool else index.astype(np.int64)
        indptr, at = self._gather(index)
        values = None if self.values is None else self.values[at]
        return RaggedRows(self.row_ids[index], indptr, self.ids[at], values)

    @staticmethod
    def concat(parts: Sequence[RaggedRows]) -> RaggedRows:
        """The rows of `parts` one after another (the one part itself when only one has rows)."""
        full = [p for p in parts if len(p)]
        if len(full) <= 1:
            return full[0] if full else RaggedRows.empty(parts[0].ids.dtype if parts else np.int64)
        spans = [(int(p.indptr[0]), int(p.indptr[-1])) for p in full]
        offsets = np.cumsum([0] + [hi - lo for lo, hi in spans[:-1]])
        indptr = np.concatenate(
            [np.zeros(1, np.int64)]
            + [p.indptr[1:] - lo + o for p, (lo, _), o in zip(full, spans, offsets)]
        ).astype(np.int64)
        ids = np.concatenate([p.ids[lo:hi] for p, (lo, hi) in zip(full, spans)])
        values = None
        if all(p.values is not None for p in full):
            values = np.concatenate([p.values[lo:hi] for p, (lo, hi) in zip(full, spans)])
        return RaggedRows(np.concatenate([p.row_ids for p in full]), indptr, ids, values)

    def with_ids(self, extra: np.ndarray) -> RaggedRows:
        """Each row with one more id appended (`extra[k]` to row k)."""
        n = len(self)
        base = self.take(0, n) if n else self
        indptr = base.indptr + np.arange(n + 1)
        ids = np.empty(len(base.ids) + n, np.result_type(base.ids.dtype, np.asarray(extra).dtype))
        last = indptr[1:] - 1
        keep = np.ones(len(ids), bool)
        keep[last] = False
        ids[keep] = base.ids
        ids[last] = extra
        return RaggedRows(base.row_ids, indptr, ids)
