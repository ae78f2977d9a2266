"""Strong-generalization split: whole source rows go to test; part of each test row is held out.

A row goes to test when a stable hash of (seed, row name) falls below `test_fraction` and it has at
least two outlinks (a single outlink cannot be both kept and held, so such rows stay in train).
Inside a test row the links are ordered by a hash of (seed, row name, column id); the first `h` are
held out (`gt_tag`), the rest kept (`col_tag`), where `h = floor(f * n + u)` (stochastic rounding
by a row hash `u`, so the held share is `f` in expectation) clamped to [1, n - 1].
"""

from __future__ import annotations

import hashlib
import math
from typing import Sequence

# (row id, row name, sorted column ids)
NamedRow = tuple[int, str, tuple[int, ...]]
# (row_tag, col_tag, gt_tag), the contract's record layout
Row = tuple[int, tuple[int, ...], tuple[int, ...]]


def unit_hash(seed: int, *parts: str) -> float:
    """A stable hash of the seed and the parts, uniform in [0, 1)."""
    text = "\x1f".join((str(seed),) + parts)
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def is_test_row(name: str, num_links: int, seed: int, test_fraction: float) -> bool:
    """Whether a source row goes to the test split."""
    return num_links >= 2 and unit_hash(seed, "row", name) < test_fraction


def num_held_out(name: str, num_links: int, seed: int, holdout_fraction: float) -> int:
    """How many of a test row's `num_links` links are held out: f*n by stochastic rounding, in [1, n-1]."""
    u = unit_hash(seed, "round", name)
    return min(max(math.floor(holdout_fraction * num_links + u), 1), num_links - 1)


def split_test_row(
    name: str, cols: Sequence[int], seed: int, holdout_fraction: float
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(kept, held) column ids of one test row, each sorted; both non-empty (needs >= 2 cols)."""
    if len(cols) < 2:
        raise ValueError(f"test row {name!r} has {len(cols)} link(s); it needs at least 2")
    order = sorted(cols, key=lambda c: (unit_hash(seed, "link", name, str(c)), c))
    h = num_held_out(name, len(cols), seed, holdout_fraction)
    return tuple(sorted(order[h:])), tuple(sorted(order[:h]))


def assign_row(row: NamedRow, seed: int, test_fraction: float, holdout_fraction: float) -> tuple[str, Row]:
    """('train' | 'test', (row_tag, col_tag, gt_tag)) for one source row."""
    row_id, name, cols = row
    if is_test_row(name, len(cols), seed, test_fraction):
        kept, held = split_test_row(name, cols, seed, holdout_fraction)
        return "test", (row_id, kept, held)
    return "train", (row_id, tuple(cols), ())


def transpose(rows: Sequence[Row]) -> list[Row]:
    """The transpose of a list of rows (plain-Python twin of the Beam step, for tests and tools)."""
    cols: dict[int, list[int]] = {}
    for row_id, col_tag, _ in rows:
        for c in col_tag:
            cols.setdefault(c, []).append(row_id)
    return [(c, tuple(sorted(r)), ()) for c, r in sorted(cols.items())]
