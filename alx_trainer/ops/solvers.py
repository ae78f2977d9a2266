"""Batched solvers for the per-row normal equations A x = b of paper Eq. 4 (paper 4.5).

All work on a batch of rows: `A` [R, d, d], `b` and `x0` [R, d], float32. `cg` also takes a
matrix-free `matvec` so the d x d matrices never have to be built (the normal rows' steps and the
long rows' `long_rows.long_cg`).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from alx_trainer.ops import block_solver

Matvec = Callable[[jax.Array], jax.Array]


class CGState(NamedTuple):
    """The conjugate-gradient recurrence's state per row: x, residual r, direction p, rs = |r|^2 [R,
    1]."""

    x: jax.Array
    r: jax.Array
    p: jax.Array
    rs: jax.Array


def _dot(u, v):
    return jnp.sum(u * v, axis=-1, keepdims=True)


def cg_start(x0, r0) -> CGState:
    """The state before the first step, from the warm start `x0` and its residual `r0` = b - A
    x0."""
    return CGState(x0, r0, r0, _dot(r0, r0))


def cg_update(state: CGState, ap: jax.Array) -> tuple[CGState, jax.Array]:
    """One conjugate-gradient step given `ap` = A p; the new state and the step size [R, 1] taken
    along p. A row whose |r|^2 or p^T A p reached 0 stays where it is."""
    x, r, p, rs = state
    pap = _dot(p, ap)
    step = jnp.where(pap > 0, rs / jnp.where(pap > 0, pap, 1), 0)
    x = x + step * p
    r = r - step * ap
    rs_new = _dot(r, r)
    beta = jnp.where(rs > 0, rs_new / jnp.where(rs > 0, rs, 1), 0)
    return CGState(x, r, r + beta * p, rs_new), step


def cg_step(matvec: Matvec, state: CGState) -> CGState:
    """One conjugate-gradient step on every row at once (`cg_update` with A p = `matvec(p)`)."""
    return cg_update(state, matvec(state.p))[0]


def cg(
    matvec: Matvec, b: jax.Array | None, x0: jax.Array, iters: int, r0: jax.Array | None = None
) -> jax.Array:
    """`iters` conjugate-gradient steps per row from the warm start `x0` (rows independent),
    compiled.

    `r0` = b - A x0 may be given instead of `b` when the caller computes it more cheaply.
    """
    r = b - matvec(x0) if r0 is None else r0
    state = jax.lax.fori_loop(0, iters, lambda _, s: cg_step(matvec, s), cg_start(x0, r))
    return state.x


def _triangular(a: jax.Array, b: jax.Array, lower: bool) -> jax.Array:
    return jax.scipy.linalg.solve_triangular(a, b[..., None], lower=lower)[..., 0]


def cholesky(a: jax.Array, b: jax.Array) -> jax.Array:
    chol = jnp.linalg.cholesky(a)
    y = _triangular(chol, b, lower=True)
    return _triangular(jnp.swapaxes(chol, -1, -2), y, lower=False)


def lu(a: jax.Array, b: jax.Array) -> jax.Array:
    lu_piv = jax.vmap(jax.scipy.linalg.lu_factor)(a)
    return jax.vmap(jax.scipy.linalg.lu_solve)(lu_piv, b)


def qr(a: jax.Array, b: jax.Array) -> jax.Array:
    q, r = jnp.linalg.qr(a)
    return _triangular(r, jnp.einsum("rde,rd->re", q, b), lower=False)


def solve_explicit(
    method: str, a: jax.Array, b: jax.Array, x0: jax.Array, cg_iters: int, block_size: int = 0
) -> jax.Array:
    """Solve with the explicit matrices by `method` (cg and block warm-start from `x0`)."""
    if method == "block":
        return block_solver.sweep_explicit(a, b, x0, block_size)
    if method == "cg":
        return cg(lambda p: jnp.einsum("rde,re->rd", a, p), b, x0, cg_iters)
    if method == "cholesky":
        return cholesky(a, b)
    if method == "lu":
        return lu(a, b)
    if method == "qr":
        return qr(a, b)
    raise ValueError(f"unknown solver {method!r}")
