"""Which long rows are solved together: groups of whole rows whose gathered block is bounded.

A long row (more than `batch_pieces` pieces) arrives as whole device batches of its own. The
matrix-free CG of a row reads every one of its entries five times (r0, three matvecs, the loss);
gathering a fixed-table row is a random read, so a group of rows is gathered once into one
contiguous float32 block that all five passes read (`sharding.long_cg`). Groups are sized in
batches, powers of two (one compiled program per size): `cache` batches at least, so the small
rows share a block that stays in cache through the whole solve, one longer row per group
otherwise (with smaller rows filling its padding), and at most `budget` batches resident: a row
longer than that is streamed (each pass gathers it a batch at a time), so the budget, not the
long rows' total, bounds the memory a device holds.
"""

from __future__ import annotations

import dataclasses
import heapq

import numpy as np


@dataclasses.dataclass
class Group:
    """Rows (indices into the long rows) solved in one call, in `size` batches (padding at the end)."""

    rows: list[int]
    size: int
    resident: bool


def pow2_at_least(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def pow2_at_most(n: int) -> int:
    return 1 << (max(int(n), 1).bit_length() - 1)


def plan_groups(batches_per_row: np.ndarray, cache: int, budget: int, workers: int) -> list[list[Group]]:
    """Groups of long rows for each of `workers` devices.

    `batches_per_row` [rows]; `cache` and `budget`: batches whose float32 block fits the cache
    share of one device and the memory bound per device. Rows are placed longest first, each
    into the fullest group it fits (best fit), else into a new group of max(cache, the row's
    batches) rounded up to a power of two; rows above `budget` get a streamed group of their own.
    The groups go to the least loaded worker, largest first.
    """
    budget = pow2_at_most(budget)
    smallest = min(pow2_at_most(cache), budget, pow2_at_least(int(np.sum(batches_per_row))))  # tiny inputs: tiny groups
    groups: list[Group] = []
    room: list[int] = []  # free batches per group
    open_with: list[list[int]] = [[] for _ in range(budget + 1)]  # free batches -> resident groups with that room
    for r in np.argsort(-batches_per_row, kind="stable").tolist():
        n = int(batches_per_row[r])
        if n > budget:
            groups.append(Group([r], pow2_at_least(n), resident=False))
            room.append(0)
            continue
        g = next((open_with[f].pop() for f in range(n, budget + 1) if open_with[f]), None)
        if g is None:
            g = len(groups)
            groups.append(Group([], max(smallest, pow2_at_least(n)), resident=True))
            room.append(groups[g].size)
        groups[g].rows.append(r)
        room[g] -= n
        open_with[room[g]].append(g)
    load = [(0, w) for w in range(workers)]
    per_worker: list[list[Group]] = [[] for _ in range(workers)]
    for g in sorted(groups, key=lambda g: -g.size):
        total, w = heapq.heappop(load)
        per_worker[w].append(g)
        heapq.heappush(load, (total + g.size, w))
    return per_worker
