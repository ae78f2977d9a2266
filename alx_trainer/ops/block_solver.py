"""The iALS++ subspace solver: block coordinate descent over the embedding coordinates.

Rendle, Krichene, Zhang, Koren (2021), "iALS++: Speeding up Matrix Factorization with Subspace
Optimization". A row's objective (paper Eq. 3 for one row, all other rows fixed) is the quadratic
f(x) = 1/2 x^T A x - b^T x with A = sum_i h_i h_i^T + alpha G + lambda_r I and b = sum_i h_i. One
sweep visits the coordinates in blocks pi of `block_size` and minimizes f over x[pi] exactly, the
rest of x fixed:

    x[pi] -= A[pi, pi]^-1 (A x - b)[pi],   (A x - b)[pi] = sum_i e_i h_i[pi] + alpha G[pi, :] x +
    lambda_r x[pi]

with e_i = h_i . x - 1 the prediction error on observed column i. `sweep` never builds the d x d
matrices: it keeps e per observed entry and updates it after each block (e_i += h_i[pi] . delta),
so a sweep costs O(|S| d b) for the b x b statistics, O(n d b^2) for the Cholesky solves and
O(n d^2) for the Gramian term (one [n, d] x [d, d] product per sweep, as in one CG iteration).
With `block_size >= d` a sweep is the exact solve. `sweep_explicit` runs the same update on given
d x d matrices (the rows whose statistics are summed over several batches).

The reference implementation alternates the row and column sides block by block; here a
half-epoch sweeps all blocks of one side with the other table (and its Gramian) fixed, like the
other solvers.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _blocks(d: int, block_size: int) -> tuple[int, int, int]:
    """(block size, full blocks, size of the last partial block or 0)."""
    size = min(block_size, d)
    return size, d // size, d % size


def _for_blocks(d: int, block_size: int, update, state):
    """`state = update(start, size, state)` for every block, in coordinate order (sizes are
    static)."""
    size, full, rest = _blocks(d, block_size)
    if full == 1:
        state = update(0, size, state)
    else:
        state = jax.lax.fori_loop(0, full, lambda k, s: update(k * size, size, s), state)
    if rest:
        state = update(full * size, rest, state)
    return state


def _cols(a: jax.Array, start, size: int, axis: int) -> jax.Array:
    return jax.lax.dynamic_slice_in_dim(a, start, size, axis=axis)


def _solve_block(a: jax.Array, grad: jax.Array, valid: jax.Array) -> jax.Array:
    """-a^-1 grad per row ([R, k, k], [R, k]); zero for invalid rows (solved as identity
    systems)."""
    eye = jnp.eye(a.shape[-1], dtype=a.dtype)
    a = jnp.where(valid[:, None, None], a, eye)
    chol = jnp.linalg.cholesky(a)
    rhs = jnp.where(valid[:, None], grad, 0)[..., None]
    y = jax.scipy.linalg.solve_triangular(chol, rhs, lower=True)
    return -jax.scipy.linalg.solve_triangular(chol, y, lower=True, trans=1)[..., 0]


def sweep(
    h: jax.Array,
    seg: jax.Array,
    x0: jax.Array,
    gram: jax.Array,
    lam: jax.Array,
    alpha: float,
    valid: jax.Array,
    block_size: int,
) -> tuple[jax.Array, jax.Array]:
    """One block sweep for the rows of a dense batch; returns (x [R, d], errors e [B, L]).

    `h` [B, L, d]: the fixed table's rows for each piece (zeros at padding ids); `seg` [B]: each
    piece's row slot (R for padding pieces); `x0` [R, d] the current rows; `gram` [d, d] the fixed
    table's Gramian; `lam` [R] the per-row L2 weights; `valid` [R] real row slots. The returned
    errors h_i . x - 1 are those of the final x (meaningless at padding ids).
    """
    rows, d = x0.shape

    def update(start, size, state):
        x, e = state
        hb = _cols(h, start, size, 2)  # [B, L, k]
        gram_cols = _cols(gram, start, size, 1)  # [d, k]
        xb = _cols(x, start, size, 1)  # [R, k]
        a_obs = jax.ops.segment_sum(jnp.einsum("bli,blj->bij", hb, hb), seg, num_segments=rows)
        g_obs = jax.ops.segment_sum(jnp.einsum("bl,bli->bi", e, hb), seg, num_segments=rows)
        a = (
            a_obs
            + alpha * _cols(gram_cols, start, size, 0)
            + lam[:, None, None] * jnp.eye(size, dtype=x.dtype)
        )
        grad = g_obs + alpha * (x @ gram_cols) + lam[:, None] * xb
        delta = _solve_block(a, grad, valid)
        x = jax.lax.dynamic_update_slice_in_dim(x, xb + delta, start, axis=1)
        e = e + jnp.einsum(
            "bli,bi->bl", hb, jnp.take(delta, seg, axis=0, mode="fill", fill_value=0)
        )
        return x, e

    e0 = jnp.einsum("bld,bd->bl", h, jnp.take(x0, seg, axis=0, mode="fill", fill_value=0)) - 1
    return _for_blocks(d, block_size, update, (x0, e0))


def sweep_explicit(a: jax.Array, b: jax.Array, x0: jax.Array, block_size: int) -> jax.Array:
    """One block sweep on explicit systems A x = b ([R, d, d], [R, d]) from `x0`; A must be SPD."""
    rows, d = x0.shape
    valid = jnp.ones(rows, bool)

    def update(start, size, x):
        a_rows = _cols(a, start, size, 1)  # [R, k, d]
        grad = jnp.einsum("rkd,rd->rk", a_rows, x) - _cols(b, start, size, 1)
        delta = _solve_block(_cols(a_rows, start, size, 2), grad, valid)
        return jax.lax.dynamic_update_slice_in_dim(
            x, _cols(x, start, size, 1) + delta, start, axis=1
        )

    return _for_blocks(d, block_size, update, x0)
