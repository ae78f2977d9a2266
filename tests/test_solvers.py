"""The conjugate-gradient recurrence, shared by the devices (`solvers.cg`) and the host (`solvers.host_cg`),
against an independent float64 reference: the minimizer of the A-norm error over the Krylov space."""

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
    basis = np.stack([np.linalg.matrix_power(a, j) @ r0 for j in range(k)], axis=1)
    v = np.linalg.qr(basis)[0]
    y = np.linalg.solve(v.T @ a @ v, v.T @ r0)
    return x0 + v @ y


def test_host_cg_reaches_the_krylov_minimizer_and_converges():
    a, b, x0 = _systems(0, 5, 8)
    matvec = lambda p: np.einsum("rde,re->rd", a, p)  # noqa: E731
    r0 = b - matvec(x0)
    for k in (1, 3, 5):
        got = solvers.host_cg(matvec, x0, r0, k)
        want = np.stack([_krylov_minimizer(a[i], b[i], x0[i], k) for i in range(len(a))])
        np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-10)
    exact = np.linalg.solve(a, b[..., None])[..., 0]
    np.testing.assert_allclose(solvers.host_cg(matvec, x0, r0, 8), exact, rtol=1e-7, atol=1e-9)  # d steps: exact


def test_device_cg_runs_the_same_recurrence():
    a, b, x0 = (x.astype(np.float32) for x in _systems(1, 6, 8))
    b[2] = a[2] @ x0[2]  # a row already solved: r0 = 0 must leave it where it is (no 0/0)
    got = jax.jit(lambda a, b, x0: solvers.cg(lambda p: jnp.einsum("rde,re->rd", a, p), b, x0, 3))(a, b, x0)
    a64, b64, x64 = (x.astype(np.float64) for x in (a, b, x0))
    matvec = lambda p: np.einsum("rde,re->rd", a64, p)  # noqa: E731
    want = solvers.host_cg(matvec, x64, b64 - matvec(x64), 3)
    np.testing.assert_allclose(np.asarray(got), want, rtol=2e-4, atol=2e-4 * np.abs(want).max())
    assert np.isfinite(np.asarray(got)).all()
    np.testing.assert_allclose(np.asarray(got)[2], x0[2], atol=1e-5)
