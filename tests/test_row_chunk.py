"""RowChunk's operations and the threaded CSR transpose against plain-Python references."""

from __future__ import annotations

import numpy as np
import pytest

from alx_trainer.data import csr_transpose
from alx_trainer.data.row_chunk import RowChunk


def _rows(seed: int, n: int, max_len: int, num_cols: int = 50) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [
        rng.integers(0, num_cols, size=int(rng.integers(0, max_len + 1))).tolist() for _ in range(n)
    ]


def _listed(chunk: RowChunk) -> list[tuple[int, list[int]]]:
    """(row id, columns) of every row, read through `indptr` alone (any start)."""
    return [
        (int(r), chunk.cols[chunk.indptr[k] : chunk.indptr[k + 1]].tolist())
        for k, r in enumerate(chunk.row_ids)
    ]


def test_take_select_and_concat_keep_every_row():
    rows = _rows(0, 40, 6)
    chunk = RowChunk.from_rows(np.arange(40) + 100, rows)
    want = [(100 + k, r) for k, r in enumerate(rows)]
    assert _listed(chunk) == want and chunk.lengths.tolist() == [len(r) for r in rows]
    assert _listed(chunk.take(5, 17)) == want[5:17] and chunk.take(5, 17).indptr[0] == 0
    keep = np.arange(40) % 3 == 1
    assert _listed(chunk.select(keep)) == [w for w, k in zip(want, keep) if k]
    parts = [
        chunk.take(0, 9),
        chunk.take(9, 9),
        chunk.take(9, 30),
        chunk.select(np.arange(40) >= 30),
    ]
    assert _listed(RowChunk.concat(parts)) == want


def test_concat_of_chunks_whose_indptr_does_not_start_at_zero():
    rows = _rows(1, 10, 4)
    whole = RowChunk.from_rows(np.arange(10), rows)
    views = [
        RowChunk(whole.row_ids[lo:hi], whole.indptr[lo : hi + 1], whole.cols)
        for lo, hi in [(0, 3), (3, 10)]
    ]
    got = RowChunk.concat(views)
    assert got.indptr[0] == 0 and len(got.cols) == got.indptr[-1] == sum(map(len, rows))
    assert _listed(got) == _listed(whole)


def test_concat_of_nothing_and_of_empty_rows():
    assert len(RowChunk.concat([])) == 0 and RowChunk.concat([]).indptr.tolist() == [0]
    empty_rows = RowChunk.from_rows([7, 8], [[], []])
    got = RowChunk.concat([RowChunk.empty(), empty_rows, RowChunk.from_rows([9], [[3]])])
    assert _listed(got) == [(7, []), (8, []), (9, [3])]


@pytest.mark.parametrize("num_cols,threads", [(50, 1), (50, 3), (70_000, 4), (300, 7)])
def test_transpose_equals_a_python_transpose(monkeypatch, num_cols, threads):
    monkeypatch.setattr(csr_transpose, "MIN_PART", 16)  # several parts on a small matrix
    rows = _rows(2, 500, 30, num_cols)
    chunk = RowChunk.from_rows(np.arange(500), rows)
    t_indptr, rows_of = csr_transpose.transpose(chunk.indptr, chunk.cols, num_cols, threads)
    want: list[list[int]] = [[] for _ in range(num_cols)]
    for r, cols in enumerate(rows):
        for c in cols:
            want[c].append(r)
    assert t_indptr.tolist() == np.concatenate([[0], np.cumsum([len(w) for w in want])]).tolist()
    assert rows_of.tolist() == [r for w in want for r in w]
