"""Ranking metrics on top-K id lists, in plain NumPy (paper 4.6 and 5).

Every function takes `topk`, an int array `[n, K]` of predicted column ids per row (best first,
padding `-1`), and `gt`, the ground-truth ids of each row (a sequence of int arrays). Rows whose
ground truth is empty have no defined metric and are left out of the means (see `mean_metric`).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def _hits(topk: np.ndarray, gt: Sequence[np.ndarray], k: int) -> np.ndarray:
    """Boolean `[n, k]`: whether the i-th prediction of a row is in that row's ground truth."""
    topk = np.asarray(topk)
    if topk.ndim != 2 or len(topk) != len(gt):
        raise ValueError(
            f"topk must be [n, K] with n = len(gt) = {len(gt)}, got shape {topk.shape}"
        )
    if k > topk.shape[1]:
        raise ValueError(f"asked for metrics at {k} but only {topk.shape[1]} predictions per row")
    # one membership test over all rows: (row, column) pairs as single int64 keys
    pred = topk[:, :k].astype(np.int64)
    width = (
        int(max(pred.max(initial=0), max((int(np.max(g)) for g in gt if len(g)), default=0))) + 2
    )
    rows = np.repeat(np.arange(len(gt), dtype=np.int64), [len(g) for g in gt])
    gt_keys = (
        rows * width
        + (np.concatenate([np.asarray(g, np.int64) for g in gt]) if len(rows) else rows)
        + 1
    )
    keys = np.arange(len(gt), dtype=np.int64)[:, None] * width + pred + 1
    return np.isin(keys, gt_keys) & (pred >= 0)


def recall_at_k(
    topk: np.ndarray, gt: Sequence[np.ndarray], k: int, of_all_gt: bool = False
) -> np.ndarray:
    """Per-row Recall@k = |top-k ∩ gt| / min(k, |gt|) (the ALX paper's), or with `of_all_gt`
    |top-k ∩ gt| / |gt| (LightGCN's and its successors'); NaN for rows with an empty ground
    truth."""
    hits = _hits(topk, gt, k).sum(axis=1).astype(np.float64)
    sizes = np.array([len(np.unique(np.asarray(g))) for g in gt], dtype=np.float64)
    denom = sizes if of_all_gt else np.minimum(float(k), sizes)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(sizes > 0, hits / denom, np.nan)


def ndcg_at_k(topk: np.ndarray, gt: Sequence[np.ndarray], k: int) -> np.ndarray:
    """Per-row NDCG@k with binary relevance: DCG / ideal DCG (min(k, |gt|) hits at the top)."""
    hits = _hits(topk, gt, k).astype(np.float64)
    discounts = 1.0 / np.log2(np.arange(2, k + 2, dtype=np.float64))
    dcg = hits @ discounts
    sizes = np.array([len(np.unique(np.asarray(g))) for g in gt])
    ideal = np.concatenate([[0.0], np.cumsum(discounts)])[np.minimum(sizes, k)]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(sizes > 0, dcg / ideal, np.nan)


def mean_metric(values: np.ndarray) -> float:
    """Mean over the rows that have a defined value (a non-empty ground truth)."""
    values = np.asarray(values, dtype=np.float64)
    valid = ~np.isnan(values)
    return float(values[valid].mean()) if valid.any() else float("nan")


def ranking_metrics(
    topk: np.ndarray,
    gt: Sequence[np.ndarray],
    ks: Sequence[int] = (20, 50),
    ndcg_k: int | None = 100,
) -> dict[str, float]:
    """`{"recall@20": ..., "recall_gt@20": ..., "ndcg@100": ...}` averaged over rows with ground
    truth:
    `recall@K` = hits / min(K, |gt|) (ALX paper), `recall_gt@K` = hits / |gt| (LightGCN)."""
    out = {}
    for k in ks:
        out[f"recall@{k}"] = mean_metric(recall_at_k(topk, gt, k))
        out[f"recall_gt@{k}"] = mean_metric(recall_at_k(topk, gt, k, of_all_gt=True))
    if ndcg_k:
        out[f"ndcg@{ndcg_k}"] = mean_metric(ndcg_at_k(topk, gt, ndcg_k))
    return out


# Activity buckets by a row's number of training (fold-in) items: cold < 16 <= medium < 64 <= heavy.
# On LightGCN's Gowalla split (29,858 users, 8 to 811 training items, median 16) that is about half,
# 42% and 8% of the users.
ACTIVITY_CUTS: tuple[int, int] = (16, 64)
ACTIVITY_BUCKETS: tuple[str, str, str] = ("cold", "medium", "heavy")


def activity_bucket(
    num_items: Sequence[int] | np.ndarray, cuts: Sequence[int] = ACTIVITY_CUTS
) -> np.ndarray:
    """Index into `ACTIVITY_BUCKETS` of each row: 0 below cuts[0], 1 below cuts[1], else 2."""
    return np.searchsorted(np.asarray(cuts), np.asarray(num_items), side="right")


def bucket_metrics(
    topk: np.ndarray,
    gt: Sequence[np.ndarray],
    num_items: Sequence[int] | np.ndarray,
    ks: Sequence[int] = (20,),
    ndcg_k: int | None = 20,
    cuts: Sequence[int] = ACTIVITY_CUTS,
) -> dict[str, float]:
    """`ranking_metrics` per activity bucket, keyed `cold/recall@20`, ..., plus `cold/rows` (rows
    with gt);
    a bucket without a row with gt is left out (its metrics are undefined, not NaN)."""
    bucket = activity_bucket(num_items, cuts)
    has_gt = np.array([len(g) > 0 for g in gt], bool)
    per_row = {}
    for k in ks:
        per_row[f"recall@{k}"] = recall_at_k(topk, gt, k)
        per_row[f"recall_gt@{k}"] = recall_at_k(topk, gt, k, of_all_gt=True)
    if ndcg_k:
        per_row[f"ndcg@{ndcg_k}"] = ndcg_at_k(topk, gt, ndcg_k)
    out: dict[str, float] = {}
    for b, name in enumerate(ACTIVITY_BUCKETS):
        mask = bucket == b
        if not np.any(mask & has_gt):
            continue
        out[f"{name}/rows"] = float(np.sum(mask & has_gt))
        out.update({f"{name}/{metric}": mean_metric(v[mask]) for metric, v in per_row.items()})
    return out
