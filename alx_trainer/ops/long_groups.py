"""Which long rows are solved together: groups of whole rows whose gathered block is bounded.

A long row (more than `batch_pieces` pieces) arrives as whole device batches of its own. Its
matrix-free CG reads every entry five times (r0, three matvecs, the loss), and gathering a
fixed-table row is a random read, so a group of rows is gathered once into one contiguous
float32 block that all five passes read (`long_rows.long_cg`). Sizes are counted in batches and
are powers of two (one compiled program per size):

- the chunk, the batches whose block fits a core's share of the cache (`cache`). A group of one
  chunk packs several short long rows and is one batched product per pass that stays in cache
  for the whole solve: one read from memory per entry instead of five.
- a row longer than a chunk gets a group of its own, rounded up (shorter rows fill the rest),
  read from its block a batch at a time, each pass.
- no group holds more than `budget` batches: a longer row is streamed (each pass gathers it a
  batch at a time again), so the budget, not the long rows' total, bounds what a device holds.
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
    resident: bool  # gathered once (else streamed)


def pow2_at_least(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def pow2_at_most(n: int) -> int:
    return 1 << (max(int(n), 1).bit_length() - 1)


def plan_groups(batches_per_row: np.ndarray, cache: int, budget: int, workers: int) -> tuple[int, list[list[Group]]]:
    """The chunk and each of `workers` devices' groups for long rows of `batches_per_row` batches.

    `cache`, `budget`: the batches whose float32 block fits a core's cache share and the bound
    per device. Rows are placed longest first, each into the fullest open group with room for it
    (best fit), else into a new group of its length rounded up to a power of two, at least a
    chunk; the groups then go to the least loaded device, largest first.
    """
    budget = pow2_at_most(budget)
    chunk = min(pow2_at_most(cache), budget, pow2_at_least(int(np.sum(batches_per_row))))  # tiny inputs: a tiny chunk
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
            groups.append(Group([], max(chunk, pow2_at_least(n)), resident=True))
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
    return chunk, per_worker
