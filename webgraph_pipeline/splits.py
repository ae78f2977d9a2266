"""Strong-generalization split: whole source rows go to test; part of each test row is held out,
by the contract's rule (`webgraph_contract.holdout`) with uniforms hashed from page names.

A row goes to test when a stable hash of (seed, row name) falls below `test_fraction` and it has at
least two outlinks (a single outlink cannot be both kept and held, so such rows stay in train).
Inside a test row the links are ordered by a hash of (seed, row name, column id); the first `h` are
held out (`gt_tag`), the rest kept (`col_tag`), where `h = floor(f * n + u)` (stochastic rounding
by a row hash `u`, so the held share is `f` in expectation) clamped to [1, n - 1].
The hashes are blake2b-8 of `seed<US>row<US>name`, `seed<US>round<US>name`
and `seed<US>link<US>name<US>column id` (US = \x1f), over 2^64; `split_block` applies the rule to
a whole block of rows at once.
"""

from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np

from webgraph_contract import holdout


def unit_hashes(seed: int, tag: str, names: Sequence[str], cols: Sequence[int] = ()) -> np.ndarray:
    """`unit_hash(seed, tag, name[, str(col)])` of each name (and column id), as a float64 array."""
    prefix = f"{seed}\x1f{tag}\x1f"
    if len(cols):
        texts = [f"{prefix}{n}\x1f{c}" for n, c in zip(names, cols)]
    else:
        texts = [prefix + n for n in names]
    digests = b"".join([hashlib.blake2b(t.encode("utf-8"), digest_size=8).digest() for t in texts])
    return np.frombuffer(digests, ">u8").astype(np.float64) / 2.0**64


def split_block(
    names: np.ndarray,
    ptr: np.ndarray,
    cols: np.ndarray,
    seed: int,
    test_fraction: float,
    holdout_fraction: float,
) -> tuple[np.ndarray, np.ndarray]:
    """The rules of `assign_row` for many rows at once: rows `names` with the sorted columns
    cols[ptr[i]:ptr[i + 1]] -> (test-row mask, held-out mask over `cols`, False outside test
    rows)."""
    lengths = np.diff(ptr)
    is_test = np.zeros(len(names), bool)
    held = np.zeros(len(cols), bool)
    may = np.flatnonzero(lengths >= 2)
    if not len(may) or test_fraction <= 0:
        return is_test, held
    is_test[may] = holdout.is_test_row(
        lengths[may], unit_hashes(seed, "row", names[may].tolist()), test_fraction
    )
    rows = np.flatnonzero(is_test)
    if not len(rows):
        return is_test, held
    n = lengths[rows]
    h = holdout.held_counts(n, unit_hashes(seed, "round", names[rows].tolist()), holdout_fraction)
    owner = np.repeat(np.arange(len(rows)), n)
    # positions in cols
    at = np.arange(len(owner)) - np.repeat(np.cumsum(n) - n, n) + np.repeat(ptr[rows], n)
    link = unit_hashes(seed, "link", np.repeat(names[rows], n).tolist(), cols[at].tolist())
    held[at] = holdout.held_links(owner, link, h)
    return is_test, held
