"""The contract's strong-generalization rule: which rows are test rows and which of their links
are held out, given the uniforms that decide it.

A row goes to test when its uniform `u` is below `test_fraction` and it has at least two links (a
single link cannot be both kept and held). Inside a test row the links are ordered by a key per
link (ties in column order) and the first h = clamp(floor(f n + u'), 1, n - 1) are held out
(`gt_tag`), the rest kept for the row's fold-in (`col_tag`), where n is the row's links, f the
holdout fraction and u' a second uniform per row (stochastic rounding: the held share is f in
expectation).

Where the uniforms come from is each writer's own: the pipeline hashes page names
(`webgraph_pipeline.splits`), the planted graphs draw them from a seeded generator
(`planted`), the device split of the benchmarks from `jax.random`. `is_test_row` and
`held_counts` take NumPy or JAX arrays alike (`xp`, `dtype`: the device computes in float32).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def is_test_row(lengths: Any, u: Any, test_fraction: float) -> Any:
    """The rows that go to test: at least two links and the row's uniform below the fraction."""
    return (lengths >= 2) & (u < test_fraction)


def held_counts(
    lengths: Any, rounding: Any, holdout_fraction: float, xp: Any = np, dtype: Any = np.float64
) -> Any:
    """h = clamp(floor(f n + u), 1, n - 1) per row, computed in `dtype`, of `lengths`' integer
    type (a row of fewer than two links gets 1: such a row is never a test row)."""
    h = xp.floor(dtype(holdout_fraction) * lengths.astype(dtype) + rounding)
    return xp.clip(h.astype(lengths.dtype), 1, xp.maximum(lengths - 1, 1))


def held_links(owner: np.ndarray, key: np.ndarray, held: np.ndarray) -> np.ndarray:
    """Which of the test rows' links are held out: the links given row by row (`owner`, the
    row of each, ascending; within a row in column order), each row's first `held[row]` by `key`
    (ties in column order) -> bool mask over the links."""
    order = np.lexsort((key, owner))
    n = np.bincount(owner, minlength=len(held))
    starts = np.cumsum(n) - n
    by_row = owner[order]
    mask = np.empty(len(owner), bool)
    mask[order] = np.arange(len(order)) - starts[by_row] < held[by_row]
    return mask
