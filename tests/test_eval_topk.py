"""`evaluate_rows` against an independent float64 NumPy evaluation (top K: test_topk_blocks)."""

import numpy as np
import pytest

from alx_trainer.evaluation import metrics
from alx_trainer.evaluation.evaluate import Ranking, evaluate_rows, format_metrics
from webgraph_contract.ragged import RaggedRows


def ragged(rows):
    """(row, fold-in, gt) triples as the evaluation's two RaggedRows."""
    row_ids = [r for r, _, _ in rows]
    return (
        RaggedRows.from_lists([c for _, c, _ in rows], row_ids),
        RaggedRows.from_lists([g for _, _, g in rows], row_ids),
    )


def np_fold_in(col_table, rows, alpha, reg):
    """Eq. 4 in float64: (H_S^T H_S + alpha H^T H + reg I) w = H_S^T 1 for each row."""
    h = np.asarray(col_table, np.float64)
    base = alpha * h.T @ h + reg * np.eye(h.shape[1])
    return np.stack([np.linalg.solve(base + h[c].T @ h[c], h[c].sum(axis=0)) for c in rows])


def brute_topk(queries, table, exclude, k):
    scores = np.asarray(queries, np.float64) @ np.asarray(table, np.float64).T
    for i, e in enumerate(exclude):
        scores[i, e] = -np.inf
    return np.argsort(-scores, axis=1, kind="stable")[:, :k], np.sort(scores, axis=1)[:, ::-1][
        :, :k
    ]


def test_evaluate_matches_independent_numpy_evaluation():
    rng = np.random.default_rng(2)
    num_cols, dim, alpha, reg = 301, 8, 0.05, 0.5
    col_table = rng.normal(size=(num_cols, dim)).astype(np.float32)
    rows = []
    for r in range(60):
        items = rng.choice(num_cols, size=int(rng.integers(2, 40)), replace=False)
        rows.append(
            (r, np.sort(items[: len(items) // 2 + 1]), np.sort(items[len(items) // 2 + 1 :]))
        )
    popularity = rng.integers(0, 100, size=num_cols).astype(np.float32)

    def fold_in(table, col_lists, config):
        return np_fold_in(table, col_lists, *config)

    got = evaluate_rows(
        (None, col_table),
        *ragged(rows),
        (alpha, reg),
        Ranking(ks=(5, 20), ndcg_k=30, rows_per_batch=7),
        popularity=popularity,
        fold_in_fn=fold_in,
    )
    # independent: float64 fold-in, brute-force ranking, metrics by direct counting
    w = np_fold_in(col_table, [c for _, c, _ in rows], alpha, reg)
    ids, _ = brute_topk(w, col_table, [c for _, c, _ in rows], 30)
    pop_ids, _ = brute_topk(
        np.ones((len(rows), 1)), popularity[:, None], [c for _, c, _ in rows], 30
    )
    for name, top in (("", ids), ("popularity/", pop_ids)):
        for k in (5, 20):
            want = np.mean(
                [len(set(top[i, :k]) & set(g)) / min(k, len(g)) for i, (_, _, g) in enumerate(rows)]
            )
            assert got[f"{name}recall@{k}"] == pytest.approx(want, abs=1e-9)
        assert got[f"{name}ndcg@30"] == pytest.approx(
            metrics.mean_metric(metrics.ndcg_at_k(top, [g for _, _, g in rows], 30)), abs=1e-9
        )
    assert got["num_rows"] == 60


def test_evaluate_rejects_out_of_range_columns():
    with pytest.raises(ValueError, match="test row 0 names column 7 outside the table's 0..4"):
        evaluate_rows(
            (None, np.zeros((5, 2), np.float32)),
            *ragged([(0, np.array([1]), np.array([7]))]),
            fold_in_fn=lambda t, r, c: np.zeros((len(r), 2)),
        )


def test_approximate_evaluation_reports_its_recall_against_exact():
    rng = np.random.default_rng(4)
    col_table = rng.normal(size=(2000, 8)).astype(np.float32)
    rows = [
        (r, rng.choice(2000, size=3, replace=False), rng.choice(2000, size=2, replace=False))
        for r in range(50)
    ]
    fold_in = lambda table, lists, config: np.stack([table[c].sum(axis=0) for c in lists])
    exact = evaluate_rows(
        (None, col_table), *ragged(rows), None, Ranking(ks=(20,), ndcg_k=None), fold_in_fn=fold_in
    )
    got = evaluate_rows(
        (None, col_table),
        *ragged(rows),
        None,
        Ranking(ks=(20,), ndcg_k=None, approx=True, recall_target=0.9, cols_per_block=256),
        fold_in_fn=fold_in,
    )
    assert "approx_recall@20" not in exact and 0.9 <= got["approx_recall@20"] <= 1.0
    assert "approximate top 20: recall" in format_metrics(got)
