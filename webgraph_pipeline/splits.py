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

import numpy as np

# (row id, row name, sorted column ids)
NamedRow = tuple[int, str, tuple[int, ...]]
# (row_tag, col_tag, gt_tag), the contract's record layout
Row = tuple[int, tuple[int, ...], tuple[int, ...]]


def unit_hash(seed: int, *parts: str) -> float:
    """A stable hash of the seed and the parts, uniform in [0, 1)."""
    text = "\x1f".join((str(seed),) + parts)
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def unit_hashes(seed: int, tag: str, names: Sequence[str], cols: Sequence[int] = ()) -> np.ndarray:
    """`unit_hash(seed, tag, name[, str(col)])` of each name (and column id), as a float64 array."""
    prefix = f"{seed}\x1f{tag}\x1f"
    if len(cols):
        texts = [f"{prefix}{n}\x1f{c}" for n, c in zip(names, cols)]
    else:
        texts = [prefix + n for n in names]
    digests = b"".join([hashlib.blake2b(t.encode("utf-8"), digest_size=8).digest() for t in texts])
    return np.frombuffer(digests, ">u8").astype(np.float64) / 2.0**64


def split_block(names: np.ndarray, ptr: np.ndarray, cols: np.ndarray, seed: int, test_fraction: float,
                holdout_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """The rules of `assign_row` for many rows at once: rows `names` with the sorted columns
    cols[ptr[i]:ptr[i + 1]] -> (test-row mask, held-out mask over `cols`, False outside test rows)."""
    lengths = np.diff(ptr)
    is_test = np.zeros(len(names), bool)
    held = np.zeros(len(cols), bool)
    may = np.flatnonzero(lengths >= 2)
    if not len(may) or test_fraction <= 0:
        return is_test, held
    is_test[may] = unit_hashes(seed, "row", names[may].tolist()) < test_fraction
    rows = np.flatnonzero(is_test)
    if not len(rows):
        return is_test, held
    n = lengths[rows]
    u = unit_hashes(seed, "round", names[rows].tolist())
    h = np.minimum(np.maximum(np.floor(holdout_fraction * n.astype(np.float64) + u), 1), n - 1).astype(np.int64)
    owner = np.repeat(np.arange(len(rows)), n)
    at = np.arange(len(owner)) - np.repeat(np.cumsum(n) - n, n) + np.repeat(ptr[rows], n)  # positions in cols
    link = unit_hashes(seed, "link", np.repeat(names[rows], n).tolist(), cols[at].tolist())
    order = np.lexsort((cols[at], link, owner))  # per row: by (link hash, column id)
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order)) - np.repeat(np.cumsum(n) - n, n)
    held[at] = rank < h[owner]
    return is_test, held


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
