"""Ranking metrics on top-K id lists, in plain NumPy (paper 4.6 and 5).

Every function takes `topk`, an int array `[n, K]` of predicted column ids per row (best first,
padding `-1`), and `gt`, the ground-truth ids of each row (`RaggedRows`, or a sequence of int
arrays). Rows whose
ground truth is empty have no defined metric and are left out of the means (see `mean_metric`).
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from alx_trainer import execution
from webgraph_contract.ragged import RaggedRows

# rows whose hits are found at once: bounds the [rows, K] key arrays
CHUNK_ROWS = 1 << 16
GroundTruth = RaggedRows | Sequence[np.ndarray]


class _Truth(NamedTuple):
    """Every row's distinct ground-truth ids as sorted keys `row * width + id + 1` (ids >= -1),
    and each row's count of distinct ids."""

    # int64, sorted, unique
    keys: np.ndarray
    # int64 [n]
    sizes: np.ndarray
    width: int


def _flat(gt: GroundTruth) -> tuple[np.ndarray, np.ndarray]:
    """(each row's length, every id in row order, int64) of the ground truth."""
    if isinstance(gt, RaggedRows):
        return gt.lengths, gt.ids[gt.indptr[0] : gt.indptr[-1]].astype(np.int64, copy=False)
    lengths = np.fromiter(map(len, gt), np.int64, len(gt))
    return lengths, np.concatenate([np.zeros(0, np.int64), *gt]).astype(np.int64, copy=False)


def _truth(gt: GroundTruth, largest_id: int) -> _Truth:
    """The ground truth as one sorted key array (no per-row NumPy call: millions of rows); keys
    leave room for ids up to `largest_id` (the predictions')."""
    n = len(gt)
    lengths, ids = _flat(gt)
    width = int(max(largest_id, ids.max(initial=0))) + 2
    keys = np.sort(np.repeat(np.arange(n, dtype=np.int64), lengths) * width + ids + 1)
    keys = keys[np.concatenate([[True], keys[1:] != keys[:-1]])] if len(keys) else keys
    return _Truth(keys, np.bincount(keys // width, minlength=n), width)


def _hits(topk: np.ndarray, truth: _Truth, k: int) -> np.ndarray:
    """Boolean `[n, k]`: whether the i-th prediction of a row is in that row's ground truth, found
    in chunks of `CHUNK_ROWS` rows over the host's cores (NumPy's searches release the GIL)."""
    hits = np.zeros((len(topk), k), bool)

    def chunk(start: int) -> None:
        pred = topk[start : start + CHUNK_ROWS, :k]
        lo, hi = np.searchsorted(truth.keys, np.array([start, start + len(pred)]) * truth.width)
        # the chunk's rows' keys: a smaller array to search
        mine = truth.keys[lo:hi]
        if not len(mine):
            return
        rows = np.arange(start, start + len(pred), dtype=np.int64)[:, None]
        keys = pred.astype(np.int64) + (rows * truth.width + 1)
        at = np.minimum(np.searchsorted(mine, keys), len(mine) - 1)
        hits[start : start + len(pred)] = (mine[at] == keys) & (pred >= 0)

    execution.thread_map(chunk, range(0, len(topk), CHUNK_ROWS))
    return hits


def _checked(topk: np.ndarray, gt: GroundTruth, k: int) -> np.ndarray:
    topk = np.asarray(topk)
    if topk.ndim != 2 or len(topk) != len(gt):
        raise ValueError(
            f"topk must be [n, K] with n = len(gt) = {len(gt)}, got shape {topk.shape}"
        )
    if k > topk.shape[1]:
        raise ValueError(f"asked for metrics at {k} but only {topk.shape[1]} predictions per row")
    return topk


def per_row_metrics(
    topk: np.ndarray,
    gt: GroundTruth,
    ks: Sequence[int] = (20, 50),
    ndcg_k: int | None = 100,
) -> dict[str, np.ndarray]:
    """Per-row `recall@K`, `recall_gt@K` for each K in `ks` and `ndcg@ndcg_k` (NaN for rows with an
    empty ground truth), from one membership test at the largest cut-off."""
    top = max(list(ks) + ([ndcg_k] if ndcg_k else []), default=0)
    topk = _checked(topk, gt, top)
    truth = _truth(gt, int(topk[:, :top].max(initial=0)))
    hits = _hits(topk, truth, top)
    sizes = truth.sizes.astype(np.float64)
    out = {}
    with np.errstate(invalid="ignore", divide="ignore"):
        for k in ks:
            found = hits[:, :k].sum(axis=1, dtype=np.float64)
            out[f"recall@{k}"] = np.where(sizes > 0, found / np.minimum(float(k), sizes), np.nan)
            out[f"recall_gt@{k}"] = np.where(sizes > 0, found / sizes, np.nan)
        if ndcg_k:
            discounts = 1.0 / np.log2(np.arange(2, ndcg_k + 2, dtype=np.float64))
            ideal = np.concatenate([[0.0], np.cumsum(discounts)])[np.minimum(truth.sizes, ndcg_k)]
            dcg = hits[:, :ndcg_k] @ discounts
            out[f"ndcg@{ndcg_k}"] = np.where(sizes > 0, dcg / ideal, np.nan)
    return out


def recall_at_k(topk: np.ndarray, gt: GroundTruth, k: int, of_all_gt: bool = False) -> np.ndarray:
    """Per-row Recall@k = |top-k ∩ gt| / min(k, |gt|) (the ALX paper's), or with `of_all_gt`
    |top-k ∩ gt| / |gt| (LightGCN's and its successors'); NaN for rows with an empty ground
    truth."""
    return per_row_metrics(topk, gt, (k,), None)[f"recall_gt@{k}" if of_all_gt else f"recall@{k}"]


def ndcg_at_k(topk: np.ndarray, gt: GroundTruth, k: int) -> np.ndarray:
    """Per-row NDCG@k with binary relevance: DCG / ideal DCG (min(k, |gt|) hits at the top)."""
    return per_row_metrics(topk, gt, (), k)[f"ndcg@{k}"]


def mean_metric(values: np.ndarray) -> float:
    """Mean over the rows that have a defined value (a non-empty ground truth)."""
    values = np.asarray(values, dtype=np.float64)
    valid = ~np.isnan(values)
    return float(values[valid].mean()) if valid.any() else float("nan")


def ranking_metrics(
    topk: np.ndarray,
    gt: GroundTruth,
    ks: Sequence[int] = (20, 50),
    ndcg_k: int | None = 100,
) -> dict[str, float]:
    """`{"recall@20": ..., "recall_gt@20": ..., "ndcg@100": ...}` averaged over rows with ground
    truth:
    `recall@K` = hits / min(K, |gt|) (ALX paper), `recall_gt@K` = hits / |gt| (LightGCN)."""
    return {name: mean_metric(v) for name, v in per_row_metrics(topk, gt, ks, ndcg_k).items()}


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
    gt: GroundTruth,
    num_items: Sequence[int] | np.ndarray,
    ks: Sequence[int] = (20,),
    ndcg_k: int | None = 20,
    cuts: Sequence[int] = ACTIVITY_CUTS,
) -> dict[str, float]:
    """`ranking_metrics` per activity bucket, keyed `cold/recall@20`, ..., plus `cold/rows` (rows
    with gt); a bucket without a row with gt is left out (its metrics are undefined, not NaN)."""
    return bucket_means(per_row_metrics(topk, gt, ks, ndcg_k), gt, num_items, cuts)


def bucket_means(
    per_row: dict[str, np.ndarray],
    gt: GroundTruth,
    num_items: Sequence[int] | np.ndarray,
    cuts: Sequence[int] = ACTIVITY_CUTS,
) -> dict[str, float]:
    """`bucket_metrics` from per-row values already computed (`per_row_metrics`)."""
    bucket = activity_bucket(num_items, cuts)
    has_gt = _flat(gt)[0] > 0
    out: dict[str, float] = {}
    for b, name in enumerate(ACTIVITY_BUCKETS):
        mask = bucket == b
        if not np.any(mask & has_gt):
            continue
        out[f"{name}/rows"] = float(np.sum(mask & has_gt))
        out.update({f"{name}/{metric}": mean_metric(v[mask]) for metric, v in per_row.items()})
    return out
