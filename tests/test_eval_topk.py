"""Sharded top-k (exact and approximate) and `evaluate` against float64 NumPy brute force."""

import numpy as np
import pytest

from alx_trainer.evaluation import metrics
from alx_trainer.evaluation.evaluate import SCORE_BUDGET_BYTES, ShardedScorer, evaluate


def np_fold_in(col_table, rows, alpha, reg):
    """Eq. 4 in float64: (H_S^T H_S + alpha H^T H + reg I) w = H_S^T 1 for each row."""
    h = np.asarray(col_table, np.float64)
    base = alpha * h.T @ h + reg * np.eye(h.shape[1])
    return np.stack([np.linalg.solve(base + h[c].T @ h[c], h[c].sum(axis=0)) for c in rows])


def brute_topk(queries, table, exclude, k):
    scores = np.asarray(queries, np.float64) @ np.asarray(table, np.float64).T
    for i, e in enumerate(exclude):
        scores[i, e] = -np.inf
    return np.argsort(-scores, axis=1, kind="stable")[:, :k], np.sort(scores, axis=1)[:, ::-1][:, :k]


@pytest.fixture(scope="module")
def tables():
    rng = np.random.default_rng(0)
    # 1003 columns: not a multiple of the 8 devices, so the last shard is padded.
    return rng.normal(size=(1003, 16)).astype(np.float32), rng.normal(size=(45, 16)).astype(np.float32)


def test_sharded_exact_topk_matches_numpy(tables):
    cols, queries = tables
    rng = np.random.default_rng(1)
    exclude = [rng.choice(len(cols), size=rng.integers(0, 40), replace=False) for _ in queries]
    scorer = ShardedScorer(cols)
    assert scorer.mesh.devices.size == 8
    scores, ids = scorer.topk(queries, exclude, 150, batch_size=16)  # 150 > 126 columns per shard
    want_ids, want_scores = brute_topk(queries, cols, exclude, 150)
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_allclose(scores, want_scores, rtol=1e-4, atol=1e-4)
    for i, e in enumerate(exclude):
        assert not np.isin(ids[i], e).any()


def test_more_k_than_admissible_columns_gives_padding():
    cols = np.arange(10, dtype=np.float32)[:, None]
    scores, ids = ShardedScorer(cols).topk(np.ones((1, 1), np.float32), [np.arange(5)], 8)
    np.testing.assert_array_equal(ids[0], [9, 8, 7, 6, 5, -1, -1, -1])
    assert np.isneginf(scores[0, 5:]).all()
    # k beyond the whole (padded) table
    _, ids = ShardedScorer(cols).topk(np.ones((1, 1), np.float32), [np.array([0])], 20)
    np.testing.assert_array_equal(ids[0], list(range(9, 0, -1)) + [-1] * 11)


@pytest.mark.parametrize("recall_target", [0.8, 0.95])
def test_approximate_topk_reaches_its_recall_target(tables, recall_target):
    cols, queries = tables
    exclude = [np.array([i]) for i in range(len(queries))]
    scorer = ShardedScorer(cols)
    _, exact = scorer.topk(queries, exclude, 50)
    _, approx = scorer.topk(queries, exclude, 50, approx=True, recall_target=recall_target)
    overlap = np.mean([len(np.intersect1d(a, e)) / 50 for a, e in zip(approx, exact)])
    assert overlap >= recall_target
    assert not any(np.isin(a, e).any() for a, e in zip(approx, exclude))


def test_batch_size_bounds_score_memory():
    scorer = ShardedScorer(np.zeros((1_000_003, 2), np.float32))
    assert scorer.default_batch_size() * scorer.table.shape[0] * 4 <= SCORE_BUDGET_BYTES
    assert ShardedScorer(np.zeros((100, 2), np.float32)).default_batch_size() == 1024


def test_evaluate_matches_independent_numpy_evaluation():
    rng = np.random.default_rng(2)
    num_cols, dim, alpha, reg = 301, 8, 0.05, 0.5
    col_table = rng.normal(size=(num_cols, dim)).astype(np.float32)
    rows = []
    for r in range(60):
        items = rng.choice(num_cols, size=int(rng.integers(2, 40)), replace=False)
        rows.append((r, np.sort(items[: len(items) // 2 + 1]), np.sort(items[len(items) // 2 + 1 :])))
    popularity = rng.integers(0, 100, size=num_cols).astype(np.float32)

    def fold_in(table, col_lists, config):
        return np_fold_in(table, col_lists, *config)

    got = evaluate((None, col_table), rows, (alpha, reg), ks=(5, 20), ndcg_k=30, batch_size=7,
                   popularity=popularity, fold_in_fn=fold_in)
    # independent: float64 fold-in, brute-force ranking, metrics by direct counting
    w = np_fold_in(col_table, [c for _, c, _ in rows], alpha, reg)
    ids, _ = brute_topk(w, col_table, [c for _, c, _ in rows], 30)
    pop_ids, _ = brute_topk(np.ones((len(rows), 1)), popularity[:, None], [c for _, c, _ in rows], 30)
    for name, top in (("", ids), ("popularity/", pop_ids)):
        for k in (5, 20):
            want = np.mean([len(set(top[i, :k]) & set(g)) / min(k, len(g)) for i, (_, _, g) in enumerate(rows)])
            assert got[f"{name}recall@{k}"] == pytest.approx(want, abs=1e-9)
        assert got[f"{name}ndcg@30"] == pytest.approx(
            metrics.mean_metric(metrics.ndcg_at_k(top, [g for _, _, g in rows], 30)), abs=1e-9)
    assert got["num_rows"] == 60


def test_evaluate_rejects_out_of_range_columns():
    with pytest.raises(ValueError, match="outside the table"):
        evaluate((None, np.zeros((5, 2), np.float32)), [(0, np.array([1]), np.array([7]))],
                 fold_in_fn=lambda t, r, c: np.zeros((len(r), 2)))
