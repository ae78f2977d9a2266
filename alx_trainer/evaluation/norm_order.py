"""Columns dealt over devices in descending norm order, in blocks: the layout of both exact top-K
searches (`topk`, `threshold_scan`), which stop once no row can reach its K-th best score any more
(a score is at most |q| |h|, and block norms only fall along a device's share).

One global order by descending norm (ties: lower id first) is dealt round-robin, so every device
gets the same mix of long and short columns. A device's share is cut into blocks of `cols`
positions; inside a block the columns are in ascending id order, so the groups of a block rank
ties as a stable sort by id would. A block's bound is the largest norm in it, rounded up to
float32.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Share(NamedTuple):
    """One device's columns: `ids[p]` is the column id at position p (-1: padding to whole
    blocks); `block_norms[j]` bounds the norms of block j from above."""

    ids: np.ndarray  # int64 [blocks * cols]
    block_norms: np.ndarray  # float32 [blocks]


def norms(table: np.ndarray) -> np.ndarray:
    """Each row's Euclidean norm, float64."""
    return np.sqrt(np.einsum("ij,ij->i", table, table, dtype=np.float64))


def deal(table_norms: np.ndarray, parts: int, cols: int) -> list[Share]:
    """`parts` shares of the columns whose norms are `table_norms`, in blocks of `cols`."""
    order = np.argsort(-table_norms, kind="stable")
    out = []
    for i in range(parts):
        mine = order[i::parts]
        blocks = max(1, -(-len(mine) // cols))
        ids = np.full(blocks * cols, -1, np.int64)
        ids[: len(mine)] = mine
        last = np.iinfo(np.int64).max  # padding sorts after every id, then is -1 again
        ids = np.sort(np.where(ids < 0, last, ids).reshape(blocks, cols), axis=1)
        ids[ids == last] = -1
        block_max = np.zeros(blocks, np.float64)
        firsts = mine[::cols]  # each block's largest norm comes first in the norm order
        block_max[: len(firsts)] = table_norms[firsts]
        out.append(Share(ids.ravel(), round_up(block_max)))
    return out


def positions(shares: list[Share], num_cols: int) -> tuple[np.ndarray, np.ndarray]:
    """(share index int32 [num_cols], position in it int64 [num_cols]) of every column."""
    part = np.zeros(num_cols, np.int32)
    where = np.zeros(num_cols, np.int64)
    for i, share in enumerate(shares):
        real = np.flatnonzero(share.ids >= 0)
        part[share.ids[real]] = i
        where[share.ids[real]] = real
    return part, where


def round_up(x: np.ndarray) -> np.ndarray:
    """float32 values no smaller than the float64 `x`."""
    x = np.asarray(x, np.float64)
    y = x.astype(np.float32)
    return np.where(y < x, np.nextafter(y, np.float32(np.inf)), y).astype(np.float32)


def round_down(x: np.ndarray) -> np.ndarray:
    """float32 values no larger than the float64 `x`."""
    x = np.asarray(x, np.float64)
    y = x.astype(np.float32)
    return np.where(y > x, np.nextafter(y, np.float32(-np.inf)), y).astype(np.float32)
