"""Columns dealt over devices in descending norm order, in blocks: the layout of both exact top-K
engines (`block_loop`, `threshold_scan`), which stop once no row can reach its K-th best score any
more (a score is at most |q| |h|, and the blocks' bounds never rise along a device's share).

One global order by descending norm (`descending`: quantized, so ties and near-ties by lower id) is
dealt round-robin, so every device gets the same mix of long and short columns. A device's share is
cut into blocks of `cols` positions; inside a block the columns are in ascending id order, so the
groups of a block rank ties as a stable sort by id would. A block's bound is the largest norm in it
and in every later block (so bounds never rise along a share), rounded up to float32.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from alx_trainer.execution import thread_map


class Share(NamedTuple):
    """One device's columns: `ids[p]` is the column id at position p (-1: padding to whole
    blocks); `block_norms[j]` bounds the norms of blocks j, j + 1, ... from above."""

    # int64 [blocks * cols]
    ids: np.ndarray
    # float32 [blocks]
    block_norms: np.ndarray


# rows a host thread takes at a time (norms, gathers)
ROWS_PER_TASK = 1 << 18
# norms are ordered by their logarithm quantized to this many levels
KEY_LEVELS = 65535


def norms(table: np.ndarray) -> np.ndarray:
    """Each row's Euclidean norm, float64, in host threads."""
    out = np.empty(len(table), np.float64)

    def part(lo: int) -> None:
        rows = table[lo : lo + ROWS_PER_TASK]
        out[lo : lo + len(rows)] = np.sqrt(np.einsum("ij,ij->i", rows, rows, dtype=np.float64))

    thread_map(part, range(0, len(table), ROWS_PER_TASK))
    return out


def descending(table_norms: np.ndarray) -> np.ndarray:
    """Column ids by descending norm, as a radix sort of the norms' logarithms quantized to
    `KEY_LEVELS` levels (ties, and norms within a level's width, by lower id; zero norms last):
    the order only decides how soon a search can stop; the bounds come from the norms (`deal`)."""
    key = np.full(len(table_norms), KEY_LEVELS, np.uint16)
    positive = table_norms > 0
    if positive.any():
        logs = np.log(table_norms[positive])
        top, span = logs.max(), max(float(logs.max() - logs.min()), 1e-30)
        key[positive] = np.minimum((top - logs) * ((KEY_LEVELS - 1) / span), KEY_LEVELS - 1)
    return np.argsort(key, kind="stable")


def deal(table_norms: np.ndarray, parts: int, cols: int) -> list[Share]:
    """`parts` shares of the columns whose norms are `table_norms`, in blocks of `cols`."""
    order = descending(table_norms)
    # int32 ids sort faster
    small = len(table_norms) < np.iinfo(np.int32).max
    out = []
    for i in range(parts):
        mine = order[i::parts]
        blocks = max(1, -(-len(mine) // cols))
        # padding sorts after every id
        last = np.iinfo(np.int32 if small else np.int64).max
        ids = np.full(blocks * cols, last, np.int32 if small else np.int64)
        ids[: len(mine)] = mine
        ids = np.sort(ids.reshape(blocks, cols), axis=1).ravel().astype(np.int64)
        ids[ids == last] = -1
        block_max = np.zeros(blocks, np.float64)
        if len(mine):
            starts = np.arange(0, len(mine), cols)
            block_max[: len(starts)] = np.maximum.reduceat(table_norms[mine], starts)
        # every later block's norms too: a search may stop at the first bound it cannot reach
        out.append(Share(ids, round_up(np.maximum.accumulate(block_max[::-1])[::-1])))
    return out


def gather_rows(table: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """float32 `table[ids]`, zero rows where an id is -1, gathered in host threads."""
    out = np.empty((len(ids), table.shape[1]), np.float32)
    # every id is padding
    if len(table) == 0:
        out[:] = 0
        return out

    def part(lo: int) -> None:
        chunk = ids[lo : lo + ROWS_PER_TASK]
        rows = out[lo : lo + len(chunk)]
        np.take(table, np.maximum(chunk, 0), axis=0, out=rows)
        rows[chunk < 0] = 0

    thread_map(part, range(0, len(ids), ROWS_PER_TASK))
    return out


def positions(shares: list[Share], num_cols: int) -> tuple[np.ndarray, np.ndarray]:
    """(share index int32, position in it int64) of every column, [num_cols + 1]: the last entry,
    share -1, is where the padding id -1 indexes."""
    part = np.full(num_cols + 1, -1, np.int32)
    where = np.full(num_cols + 1, -1, np.int64)
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
