"""The threaded CSR transpose (`data.csr_transpose`) against a plain-Python transpose."""

from __future__ import annotations

import numpy as np
import pytest

from alx_trainer.data import csr_transpose
from webgraph_contract.ragged import RaggedRows


def _rows(seed: int, n: int, max_len: int, num_cols: int = 50) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [
        rng.integers(0, num_cols, size=int(rng.integers(0, max_len + 1))).tolist() for _ in range(n)
    ]


@pytest.mark.parametrize("num_cols,threads", [(50, 1), (50, 3), (70_000, 4), (300, 7)])
def test_transpose_equals_a_python_transpose(monkeypatch, num_cols, threads):
    # several parts on a small matrix
    monkeypatch.setattr(csr_transpose, "MIN_PART", 16)
    rows = _rows(2, 500, 30, num_cols)
    chunk = RaggedRows.from_lists(rows)
    t_indptr, rows_of = csr_transpose.transpose(chunk.indptr, chunk.ids, num_cols, threads)
    want: list[list[int]] = [[] for _ in range(num_cols)]
    for r, cols in enumerate(rows):
        for c in cols:
            want[c].append(r)
    assert t_indptr.tolist() == np.concatenate([[0], np.cumsum([len(w) for w in want])]).tolist()
    assert rows_of.tolist() == [r for w in want for r in w]
    # the row ids fit int32: no int64 array of all links
    assert rows_of.dtype == np.int32


def test_in_memory_holds_int32_ids_in_both_directions():
    """`dataset.in_memory` keeps int32 columns as given (no copy) and makes an int32 transpose;
    int64 columns that fit are narrowed; both directions hold the same links."""
    from alx_trainer.data.dataset import in_memory

    rows = _rows(3, 200, 12, 90)
    chunk = RaggedRows.from_lists(rows)
    cols = chunk.ids.astype(np.int32)
    dataset = in_memory("m", chunk.indptr, cols, 90)
    train, train_t = dataset.arrays["train"], dataset.arrays["train_t"]
    assert train.ids is cols and train_t.ids.dtype == np.int32
    narrowed = in_memory("m", chunk.indptr, chunk.ids, 90).arrays["train"].ids
    assert narrowed.dtype == np.int32 and narrowed.tolist() == chunk.ids.tolist()
    links = {(r, c) for r, cs in enumerate(rows) for c in cs}
    assert {(int(r), int(c)) for c, rs in train_t for r in rs} == links
    assert (
        csr_transpose.id_dtype(2**31) == np.int32 and csr_transpose.id_dtype(2**31 + 1) == np.int64
    )
