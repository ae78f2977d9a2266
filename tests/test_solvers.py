"""The conjugate-gradient recurrence (`solvers.cg`, run by the normal rows' steps and the long rows'
`long_rows.long_cg`) against an independent float64 reference: the minimizer of the A-norm error
over
the Krylov space, which k exact CG steps reach."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from alx_trainer.ops import solvers


def _systems(seed: int, rows: int, d: int):
    rng = np.random.default_rng(seed)
    h = rng.normal(size=(rows, 3 * d, d))
    a = np.einsum("rnd,rne->rde", h, h) + 0.5 * np.eye(d)  # symmetric positive definite per row
    return a, rng.normal(size=(rows, d)), rng.normal(size=(rows, d))


def _krylov_minimizer(a: np.ndarray, b: np.ndarray, x0: np.ndarray, k: int) -> np.ndarray:
    """x0 + argmin over K_k(A, r0) of |x - A^-1 b|_A: what k exact CG steps reach."""
    r0 = b - a @ x0
    if not r0.any():
        return x0
    basis = np.stack([np.linalg.matrix_power(a, j) @ r0 for j in range(k)], axis=1)
    v = np.linalg.qr(basis)[0]
    y = np.linalg.solve(v.T @ a @ v, v.T @ r0)
    return x0 + v @ y


def _device_cg(a, b, x0, k: int) -> np.ndarray:
    run = jax.jit(lambda a, b, x0: solvers.cg(lambda p: jnp.einsum("rde,re->rd", a, p), b, x0, k))
    return np.asarray(run(*(x.astype(np.float32) for x in (a, b, x0))))


def test_cg_reaches_the_krylov_minimizer_and_converges():
    a, b, x0 = _systems(0, 5, 8)
    a /= np.abs(a).max()  # a float32-friendly scale
    for k in (1, 3, 5):
        got = _device_cg(a, b, x0, k)
        want = np.stack([_krylov_minimizer(a[i], b[i], x0[i], k) for i in range(len(a))])
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-4 * np.abs(want).max())
    exact = np.linalg.solve(a, b[..., None])[..., 0]
    # d steps are exact in exact arithmetic; float32 needs a few more
    got = _device_cg(a, b, x0, 16)
    np.testing.assert_allclose(got, exact, rtol=0, atol=1e-3 * np.abs(exact).max())


def test_a_row_already_solved_stays_where_it_is():
    a, b, x0 = (x.astype(np.float32) for x in _systems(1, 6, 8))
    b[2] = a[2] @ x0[2]  # r0 = 0 must leave the row where it is (no 0/0)
    got = _device_cg(a, b, x0, 3)
    want = np.stack(
        [
            _krylov_minimizer(*(x[i].astype(np.float64) for x in (a, b, x0)), 3)
            for i in range(len(a))
        ]
    )
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4 * np.abs(want).max())
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got[2], x0[2], atol=1e-5)
