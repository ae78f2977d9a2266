"""The transpose of a CSR matrix (the column half-epoch's rows), in threads.

The entries are cut into parts of whole rows, one per thread. Each part counts its columns; the
counts give every (part, column) its place in the transpose; then each part sorts its own entries
by column (stable, so rows stay in order within a column) and writes their row ids to their
places. The result equals a stable argsort of all the columns at once.
"""

from __future__ import annotations

import numpy as np

from alx_trainer import execution

MIN_PART = 1 << 20  # entries per part at least (below that a thread costs more than it saves)
PLACE_SLICE = 1 << 20  # sorted entries placed at a time (bounds each thread's temporaries)


def transpose(
    indptr: np.ndarray, cols: np.ndarray, num_cols: int, threads: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(indptr, row ids) of the transpose: column c holds rows `rows[t_indptr[c]:t_indptr[c+1]]`,
    in increasing order; the row ids are int32 where they fit (`id_dtype`), else int64. `threads`
    None: one per core this process may use."""
    nnz, num_rows = len(cols), len(indptr) - 1
    parts = max(1, min(threads or execution.host_threads(), nnz // MIN_PART))
    cuts = np.searchsorted(indptr, np.linspace(0, nnz, parts + 1)[1:-1])
    row_bounds = np.concatenate([[0], cuts, [num_rows]]).astype(np.int64)
    pieces = list(zip(row_bounds[:-1], row_bounds[1:]))

    def count(piece: tuple[int, int]) -> np.ndarray:
        return np.bincount(cols[indptr[piece[0]] : indptr[piece[1]]], minlength=num_cols)

    counts = execution.thread_map(count, pieces, threads)
    t_indptr = np.zeros(num_cols + 1, np.int64)
    np.cumsum(np.sum(counts, axis=0), out=t_indptr[1:])
    # where part p's first entry of each column goes, less where it is in p's sorted entries
    shifts = []
    base = t_indptr[:-1].copy()
    for c in counts:
        first = np.cumsum(c) - c
        shifts.append(base - first)
        base += c
    del counts
    row_type = id_dtype(num_rows)
    rows_of = np.empty(nnz, row_type)

    def place(p: int) -> None:
        lo_row, hi_row = pieces[p]
        lo, hi = indptr[lo_row], indptr[hi_row]
        part = cols[lo:hi]
        order = _stable_order(part, num_cols)
        rows = np.repeat(
            np.arange(lo_row, hi_row, dtype=row_type), np.diff(indptr[lo_row : hi_row + 1])
        )
        for first in range(0, hi - lo, PLACE_SLICE):  # bounded temporaries per slice
            step = order[first : first + PLACE_SLICE]
            at = shifts[p][part[step]]
            at += np.arange(first, first + len(step))
            rows_of[at] = rows[step]

    execution.thread_map(place, range(len(pieces)), threads)
    return t_indptr, rows_of


def id_dtype(bound: int) -> np.dtype:
    """The dtype of ids below `bound`: int32 where they fit (half the memory of int64), else
    int64."""
    return np.dtype(np.int32 if bound <= 2**31 else np.int64)


def _stable_order(keys: np.ndarray, bound: int) -> np.ndarray:
    """A stable argsort of non-negative `keys` below `bound` (int32 positions where they fit):
    radix passes of 16 bits where the keys fit 32 bits (linear time), else NumPy's stable sort."""
    small = np.int32 if len(keys) < 2**31 else np.int64
    if bound <= 1 << 16:
        return np.argsort(keys.astype(np.uint16), kind="stable").astype(small)
    if bound <= 1 << 32:
        order = np.argsort(keys.astype(np.uint16), kind="stable").astype(small)  # the low 16 bits
        high = (keys >> 16).astype(np.uint16)
        return order[np.argsort(high[order], kind="stable")]
    return np.argsort(keys, kind="stable")
