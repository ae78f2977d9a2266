"""Top K of many rows: the engine for the devices (`make_engine`), the popularity ranking
(`top_k_shared`) and the approximate top K's recall (`approx_recall`).

The exact engines (`engine.Engine`): `block_loop.BlockLoop` on accelerators (and for the
approximate top K), `threshold_scan.ThresholdScan` on CPU devices; both rank ties by the lower
column id, as a stable sort of the exact scores would. Rows given by their known columns are
ranked through `ranking.Ranker` (fold-in, or the trained rows, then an engine).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from alx_trainer.evaluation import block_loop, threshold_scan
from alx_trainer.evaluation.engine import BlockShape, Engine, TopK, default_devices
from webgraph_contract.ragged import RaggedRows


def make_engine(
    col_table: np.ndarray,
    devices: Sequence[Any] | None = None,
    shape: BlockShape | None = None,
    *,
    approx: bool = False,
    recall_target: float = 0.95,
    scan: bool | None = None,
) -> Engine:
    """The top-K engine of `col_table` on `devices` (default: `engine.default_devices()`): the
    threshold scan on CPU devices (`scan` True or False forces one), the block loop elsewhere
    and for the approximate top K (`approx`, with `recall_target`)."""
    devices = list(devices) if devices else default_devices()
    if scan is None:
        scan = devices[0].platform == "cpu"
    if scan and not approx:
        return threshold_scan.ThresholdScan(col_table, devices, shape)
    return block_loop.BlockLoop(
        col_table, devices, shape, approx=approx, recall_target=recall_target
    )


def top_k_shared(scores: np.ndarray, k: int, exclude: RaggedRows) -> TopK:
    """The top `k` of rows that all score column j `scores[j]` (a popularity ranking), each
    without its `exclude.row(i)`: one stable ranking (ties: the lower id first), then each row's
    first `k` admissible columns; -1 / -inf where fewer are admissible."""
    scores = np.asarray(scores)
    n, lengths = len(exclude), exclude.lengths
    width = min(len(scores), k + int(lengths.max(initial=0)))
    head = np.argsort(-scores.astype(np.float64), kind="stable")[:width]
    rank = np.full(len(scores), -1, np.int64)
    rank[head] = np.arange(width)
    ids = np.full((n, k), -1, np.int64)
    # rows at a time: a bounded [rows, width] mask and its int64 sort order (16 MiB)
    step = max(1, (1 << 21) // max(width, 1))
    for start in range(0, n, step):
        part = exclude.take(start, min(n, start + step))
        hit = rank[part.ids]
        blocked = np.zeros((len(part), width), bool)
        blocked[np.repeat(np.arange(len(part)), part.lengths)[hit >= 0], hit[hit >= 0]] = True
        first = np.argsort(blocked, axis=1, kind="stable")[:, :k]
        found = np.where(np.take_along_axis(blocked, first, axis=1), -1, head[first])
        ids[start : start + len(part), : found.shape[1]] = found
    return TopK(ids, np.where(ids >= 0, scores[np.maximum(ids, 0)], -np.inf).astype(np.float32))


def approx_recall(approx_ids: np.ndarray, exact_ids: np.ndarray) -> float:
    """Mean over rows of |approximate top K ∩ exact top K| / |exact top K| (padding -1 ignored;
    rows without an admissible column left out); 1.0 when no row has one."""
    shares = []
    for a, e in zip(np.asarray(approx_ids), np.asarray(exact_ids)):
        e = e[e >= 0]
        if len(e):
            shares.append(len(np.intersect1d(a[a >= 0], e)) / len(e))
    return float(np.mean(shares)) if shares else 1.0
