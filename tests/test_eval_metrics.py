"""Ranking metrics against cases worked out by hand."""

import math

import numpy as np
import pytest

from alx_trainer.evaluation import metrics
from webgraph_contract.ragged import RaggedRows


def test_recall_denominator_is_min_of_k_and_gt_size():
    topk = np.array([[1, 2, 3, 4], [7, 8, 9, 10], [5, 6, 0, 11]])
    gt = [np.array([2, 9]), np.array([7, 8, 20, 21, 22]), np.array([0])]
    # row 0: one hit (2) in the top 2 of 2 gt items -> 1/2; top 4 -> still 1/2.
    # row 1: 7 and 8 in the top 2, |gt| = 5 > k = 2 -> 2/2 = 1; top 4 -> 2/min(4, 5) = 0.5.
    # row 2: 0 is at rank 3 -> 0 at k=2, 1/1 at k=4.
    np.testing.assert_allclose(metrics.recall_at_k(topk, gt, 2), [0.5, 1.0, 0.0])
    np.testing.assert_allclose(metrics.recall_at_k(topk, gt, 4), [0.5, 0.5, 1.0])


def test_ndcg_by_hand():
    topk = np.array([[5, 1, 7], [3, 4, 6]])
    gt = [np.array([1, 7]), np.array([3])]
    dcg = 1 / math.log2(3) + 1 / math.log2(4)
    ideal = 1 + 1 / math.log2(3)
    np.testing.assert_allclose(metrics.ndcg_at_k(topk, gt, 3), [dcg / ideal, 1.0])
    # with k = 1, row 0 has no hit at rank 1 and an ideal of one hit
    np.testing.assert_allclose(metrics.ndcg_at_k(topk, gt, 1), [0.0, 1.0])


def test_empty_ground_truth_and_padding_are_not_counted():
    topk = np.array([[-1, -1], [4, -1], [1, 2]])
    gt = [np.array([-1]), np.array([], dtype=np.int64), np.array([2])]
    rec = metrics.recall_at_k(topk, gt, 2)
    assert rec[0] == 0.0 and math.isnan(rec[1]) and rec[2] == 1.0
    assert metrics.mean_metric(rec) == pytest.approx(0.5)
    out = metrics.ranking_metrics(topk, gt, ks=(1, 2), ndcg_k=2)
    assert out["recall@1"] == pytest.approx(0.0) and out["recall@2"] == pytest.approx(0.5)
    assert set(out) == {"recall@1", "recall@2", "recall_gt@1", "recall_gt@2", "ndcg@2"}


def test_the_two_recall_definitions():
    # 5 test items, top-2 holds 1 of them: hits/min(K,|gt|) = 1/2 (ALX), hits/|gt| = 1/5 (LightGCN)
    topk = np.array([[7, 3], [1, 2]])
    gt = [np.array([3, 4, 5, 6, 8]), np.array([2])]
    np.testing.assert_allclose(metrics.recall_at_k(topk, gt, 2), [0.5, 1.0])
    np.testing.assert_allclose(metrics.recall_at_k(topk, gt, 2, of_all_gt=True), [0.2, 1.0])
    out = metrics.ranking_metrics(topk, gt, ks=(2,), ndcg_k=None)
    assert out == {"recall@2": pytest.approx(0.75), "recall_gt@2": pytest.approx(0.6)}


def test_bad_shapes_are_reported():
    with pytest.raises(ValueError, match="only 2 predictions"):
        metrics.recall_at_k(np.zeros((1, 2), int), [np.array([1])], 5)
    with pytest.raises(ValueError, match="n = len"):
        metrics.recall_at_k(np.zeros((2, 2), int), [np.array([1])], 1)


def test_activity_buckets_by_hand():
    # fold-in sizes 3 (cold), 15 (cold), 16 (medium), 63 (medium), 64 (heavy): cuts at 16 and 64
    assert metrics.activity_bucket([3, 15, 16, 63, 64]).tolist() == [0, 0, 1, 1, 2]
    topk = np.array([[1, 2], [3, 4], [5, 6], [7, 8], [9, 10]])
    gt = [
        np.array([1]),
        np.array([9, 10]),
        np.array([6, 5, 11]),
        np.array([], np.int64),
        np.array([10, 12]),
    ]
    got = metrics.bucket_metrics(topk, gt, [3, 15, 16, 63, 64], ks=(2,), ndcg_k=2)
    # cold: row 0 recall 1/1, row 1 0/2 -> mean 0.5; medium: row 2 2/min(2,3) = 1, 2/3 of all gt;
    # row 3 has no gt
    assert got["cold/recall@2"] == pytest.approx(0.5) and got["cold/rows"] == 2
    assert got["medium/recall@2"] == pytest.approx(1.0) and got[
        "medium/recall_gt@2"
    ] == pytest.approx(2 / 3)
    assert got["medium/rows"] == 1
    # heavy: 10 at rank 2 of gt {10, 12}: recall 1/2, NDCG (1/log2 3) / (1 + 1/log2 3)
    assert got["heavy/recall@2"] == pytest.approx(0.5)
    assert got["heavy/ndcg@2"] == pytest.approx((1 / math.log2(3)) / (1 + 1 / math.log2(3)))


def _by_sets(topk, gt, k, ndcg_k):
    """Recall@k, recall_gt@k and NDCG@ndcg_k of each row with Python sets: the definitions."""
    out = []
    for pred, truth in zip(topk.tolist(), gt):
        truth = set(np.asarray(truth).tolist())
        if not truth:
            out.append((math.nan, math.nan, math.nan))
            continue
        hits = [p >= 0 and p in truth for p in pred]
        found = sum(hits[:k])
        dcg = sum(1 / math.log2(i + 2) for i, h in enumerate(hits[:ndcg_k]) if h)
        ideal = sum(1 / math.log2(i + 2) for i in range(min(ndcg_k, len(truth))))
        out.append((found / min(k, len(truth)), found / len(truth), dcg / ideal))
    return np.array(out)


@pytest.mark.parametrize("chunk", [1, 7, 1 << 16])
def test_per_row_metrics_equal_the_definitions_across_chunks(monkeypatch, chunk):
    """Random rows (duplicate and -1 ids in the ground truth, -1 padding in the predictions, empty
    rows) against set arithmetic, with the hits found in chunks of rows of every size."""
    monkeypatch.setattr(metrics, "CHUNK_ROWS", chunk)
    rng = np.random.default_rng(chunk)
    topk = rng.integers(-1, 60, (50, 12))
    gt = [rng.integers(-1, 60, int(rng.integers(0, 9))) for _ in range(50)]
    gt[3] = np.array([], np.int64)
    got = metrics.per_row_metrics(topk, gt, (5,), 12)
    want = _by_sets(topk, gt, 5, 12)
    for name, column in (("recall@5", 0), ("recall_gt@5", 1), ("ndcg@12", 2)):
        np.testing.assert_allclose(got[name], want[:, column], rtol=1e-12, equal_nan=True)


def test_ground_truth_as_ragged_rows_counts_the_same_hits():
    # by hand: row 0 hits 1 (top 2) and 3 (top 4) of 3; row 2 has 2 distinct ids, 2 hit at rank 4
    topk = np.array([[1, 2, 3, -1], [9, 8, 7, 6], [5, 4, 3, 2]])
    gt = RaggedRows.from_lists([[1, 3, 10], [], [2, 2, 40]])
    got = metrics.per_row_metrics(topk, gt, (2, 4), 4)
    np.testing.assert_array_equal(got["recall@2"], [1 / 2, np.nan, 0.0])
    np.testing.assert_array_equal(got["recall@4"], [2 / 3, np.nan, 1 / 2])
    buckets = metrics.bucket_means(got, gt, [1, 20, 100])
    assert buckets["cold/rows"] == 1 and buckets["heavy/rows"] == 1 and "medium/rows" not in buckets
