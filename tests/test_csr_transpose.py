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
