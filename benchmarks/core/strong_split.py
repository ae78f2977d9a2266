"""A strong-generalization test split made on the device, by the pipeline's rule.

The rule is the contract's (`webgraph_contract.holdout`, which `webgraph_pipeline.splits`
applies), here in float32: a row with at least two links goes to test with probability
`test_fraction`; inside a test row the links are ordered at random and the first
h = clamp(floor(f n + u), 1, n - 1) are held out as ground truth (n links, f the holdout
fraction, u a uniform per row: stochastic rounding, so the held share is f in expectation), the
rest kept as the row's fold-in links. The pipeline draws its uniforms from hashes of page names;
here they are `draws(key, ...)`: a uniform per row for the test choice, one for the rounding, and
32 random bits per test link for its order (ties kept in column order). Test rows are empty in the
training matrix, which keeps every row and column id.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from webgraph_contract import holdout

# the pipeline's defaults (`--test_fraction`, ...)
TEST_FRACTION, HOLDOUT_FRACTION = 0.1, 0.25
SPLIT_ARRAYS = (
    "train_indptr",
    "train_cols",
    "test_rows",
    "fold_indptr",
    "fold_cols",
    "gt_indptr",
    "gt_cols",
)


def draws(key, num_rows: int, test_links: int):
    """(test choice uniform [rows], rounding uniform [rows], order bits uint32 [test links])."""
    k_row, k_round, k_link = jax.random.split(key, 3)
    return (
        jax.random.uniform(k_row, (num_rows,)),
        jax.random.uniform(k_round, (num_rows,)),
        jax.random.bits(k_link, (test_links,), jnp.uint32),
    )


def device_split(
    indptr,
    cols,
    key,
    test_fraction: float = TEST_FRACTION,
    holdout_fraction: float = HOLDOUT_FRACTION,
) -> dict[str, jax.Array]:
    """The split of a device CSR matrix (indptr int32 [rows + 1], cols int32 [nnz]) as device
    arrays named `SPLIT_ARRAYS`: the training CSR (every row, test rows empty), the test rows'
    ids, and their fold-in and ground-truth links as CSR over the test rows in id order. Two
    programs: the sizes, then the split at those (static) sizes."""
    sizes = np.asarray(_sizes(indptr, key, test_fraction, holdout_fraction))
    test_rows, test_links, held = (int(x) for x in sizes)
    return _split(indptr, cols, key, test_fraction, holdout_fraction, test_rows, test_links, held)


@functools.partial(jax.jit, static_argnums=(2, 3))
def _sizes(indptr, key, test_fraction: float, holdout_fraction: float):
    """[test rows, their links, their held-out links]."""
    lengths = indptr[1:] - indptr[:-1]
    choice, rounding, _ = draws(key, lengths.shape[0], 0)
    test = holdout.is_test_row(lengths, choice, test_fraction)
    h = jnp.where(
        test, holdout.held_counts(lengths, rounding, holdout_fraction, jnp, jnp.float32), 0
    )
    return jnp.stack(
        [
            test.sum(dtype=jnp.int32),
            jnp.where(test, lengths, 0).sum(dtype=jnp.int32),
            h.sum(dtype=jnp.int32),
        ]
    )


def _segment_ids(indptr, size: int):
    """The segment (row) of each of `size` positions of a CSR pointer: int32 [size]."""
    starts = jnp.zeros(size, jnp.int32).at[indptr[1:-1]].add(1, mode="drop")
    return jnp.cumsum(starts, dtype=jnp.int32)


def _pointer(lengths):
    return jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.cumsum(lengths, dtype=jnp.int32)])


@functools.partial(jax.jit, static_argnums=(3, 4, 5, 6, 7))
def _split(
    indptr,
    cols,
    key,
    test_fraction: float,
    holdout_fraction: float,
    test_rows: int,
    test_links: int,
    held: int,
) -> dict[str, jax.Array]:
    nnz = cols.shape[0]
    lengths = indptr[1:] - indptr[:-1]
    choice, rounding, bits = draws(key, lengths.shape[0], test_links)
    test = holdout.is_test_row(lengths, choice, test_fraction)
    test_link = test[_segment_ids(indptr, nnz)]
    train_cols = cols[jnp.nonzero(~test_link, size=nnz - test_links)[0]]
    rows = jnp.nonzero(test, size=test_rows)[0].astype(jnp.int32)
    n = lengths[rows]
    h = holdout.held_counts(n, rounding[rows], holdout_fraction, jnp, jnp.float32)
    t_cols = cols[jnp.nonzero(test_link, size=test_links)[0]]
    t_indptr = _pointer(n)
    owner = _segment_ids(t_indptr, test_links)
    position = jnp.arange(test_links, dtype=jnp.int32)
    _, _, order = jax.lax.sort((owner, bits, position), num_keys=2, is_stable=True)
    rank = jnp.zeros(test_links, jnp.int32).at[order].set(position - t_indptr[owner])
    is_held = rank < h[owner]
    return {
        "train_indptr": _pointer(jnp.where(test, 0, lengths)),
        "train_cols": train_cols,
        "test_rows": rows,
        "fold_indptr": _pointer(n - h),
        "fold_cols": t_cols[jnp.nonzero(~is_held, size=test_links - held)[0]],
        "gt_indptr": _pointer(h),
        "gt_cols": t_cols[jnp.nonzero(is_held, size=held)[0]],
    }
