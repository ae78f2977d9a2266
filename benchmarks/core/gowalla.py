"""Gowalla, LightGCN's split (`user item item ...` lines in train.txt and test.txt), read without
the pipeline, and any model scored from its trained user rows as the published table scores them."""

from __future__ import annotations

import os
import time
from typing import Sequence

import numpy as np

# (user, items excluded from the ranking, test items)
Row = tuple[int, np.ndarray, np.ndarray]


def read_gowalla(folder: str, users: int = 0) -> dict[str, np.ndarray | int]:
    """train.txt / test.txt as two CSR matrices over the same ids (`train_indptr`, `train_cols`,
    `test_indptr`, `test_cols`, `num_rows`, `num_cols`); `users` > 0 keeps the users below that
    id."""
    split = {}
    for name in ("train", "test"):
        path = os.path.join(folder, f"{name}.txt")
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path}: not found (the folder of train.txt and test.txt)")
        rows: dict[int, np.ndarray] = {}
        with open(path) as f:
            for number, line in enumerate(f, 1):
                ids = line.split()
                if not ids:
                    continue
                try:
                    values = np.array(ids, np.int64)
                except ValueError:
                    expected = "expected integers 'user item item ...'"
                    raise ValueError(f"{path}:{number}: {expected}") from None
                if (values < 0).any():
                    raise ValueError(f"{path}:{number}: negative id")
                if not users or values[0] < users:
                    rows[int(values[0])] = np.unique(values[1:])
        split[name] = rows
    num_rows = 1 + max(max(r) for r in split.values() if r)
    num_cols = 1 + max(int(c.max()) for r in split.values() for c in r.values() if len(c))
    out: dict[str, np.ndarray | int] = {"num_rows": num_rows, "num_cols": num_cols}
    for name, rows in split.items():
        lengths = np.zeros(num_rows, np.int64)
        for r, c in rows.items():
            lengths[r] = len(c)
        out[f"{name}_indptr"] = np.concatenate([[0], np.cumsum(lengths)])
        out[f"{name}_cols"] = np.concatenate(
            [rows[r] for r in sorted(rows)] or [np.zeros(0, np.int64)]
        )
    return out


def test_rows(m: dict) -> list[Row]:
    """(user, training items, test items) of every user with test items, from `read_gowalla`'s
    arrays: the rows Recall@20 ranks."""
    rows = []
    for u in range(len(m["test_indptr"]) - 1):
        gt = m["test_cols"][m["test_indptr"][u] : m["test_indptr"][u + 1]]
        if len(gt):
            rows.append((u, m["train_cols"][m["train_indptr"][u] : m["train_indptr"][u + 1]], gt))
    return rows


def score_trained_rows(
    row_table: np.ndarray, col_table: np.ndarray, rows: Sequence[Row], k: int = 20
) -> dict:
    """Recall@k (hits/|test|: `recall_gt@k`, LightGCN's; hits/min(k, |test|): `recall@k`) and NDCG@k
    of the users' trained rows, all items ranked but the excluded ones (our evaluator, for any
    model), and the seconds it took (`eval_s`)."""
    from alx_trainer.evaluation.evaluate import Ranking, evaluate_rows
    from webgraph_contract.ragged import RaggedRows

    t = time.perf_counter()
    tables = (np.asarray(row_table, np.float32), np.asarray(col_table, np.float32))
    ids = [u for u, _, _ in rows]
    known = RaggedRows.from_lists([c for _, c, _ in rows], ids)
    gt = RaggedRows.from_lists([g for _, _, g in rows], ids)
    ranking = Ranking(ks=(k,), ndcg_k=k)
    result = evaluate_rows(tables, known, gt, None, ranking, trained_rows=True)
    keys = (f"recall_gt@{k}", f"recall@{k}", f"ndcg@{k}")
    return dict({key: result[key] for key in keys}, eval_s=time.perf_counter() - t)
