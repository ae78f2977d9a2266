"""implicit 0.7 (the peer) set up at our objective, on its CPU or its CUDA model.

Ours, for a row x with observed columns S against the fixed table H (rows h_j):
    sum_{i in S} (1 - h_i.x)^2 + alpha sum_{all j} (h_j.x)^2 + lambda_x |x|^2,
    lambda_x = lambda (|S| + alpha N)^nu  (N: columns of H; nu = 0 is a constant lambda),
with the same form, and the column's own lambda, for the columns. implicit 0.7 (confidence A on an
observed pair, L2 weight R, binary data) weights an observed pair by A and every other pair by 1:
    sum_{i in S} A (1 - h_i.x)^2 + sum_{j not in S} (h_j.x)^2 + R |x|^2
  = (A - 1) [sum_{i in S} (t - h_i.x)^2 + sum_{all j} (h_j.x)^2 / (A - 1) + R |x|^2 / (A - 1)] + c,
with t = A / (A - 1). Put A = 1 + 1/alpha: that is (1/alpha) x ours with target t = 1 + alpha
instead of 1 and lambda = alpha R. A target t is the same problem with every embedding scaled by
sqrt(t) and lambda divided by t (each term scales by t^2 except the L2 terms, by t), and a scale
changes no ranking; CG from a scaled start runs the scaled iterates. So implicit(A = 1 + 1/alpha,
R = lambda (1 + alpha) / alpha) is exactly ours at (alpha, lambda, nu = 0), up to a constant factor
of the objective and a common scale sqrt(1 + alpha) of the embeddings
(`tests/test_implicit_mapping.py` checks it). At nu > 0 there is no exact counterpart: implicit
has one L2 weight for every row and column, and `implicit_params` gives it ours at the mean row,
lambda (|S|_mean + alpha N)^nu (1 + alpha) / alpha: weaker than ours on long rows, stronger on
short ones. The starts differ too: implicit draws uniform [0, 0.01) entries, ours normal(0,
init_stddev) ones.

implicit 0.7's GPU `fit` never applies its `alpha` (only `recalculate_user` does), so the
confidence is written into the matrix's values (`implicit_problem`) and the model gets alpha = 1,
on either model.
"""

from __future__ import annotations

import contextlib
import time
from typing import Callable

import numpy as np

GIB = 2.0**30


def implicit_params(
    alpha: float, lam: float, nu: float, mean_row: float, n_cols: int
) -> tuple[float, float]:
    """implicit's (confidence, regularization) for our (alpha, lambda, nu): exact at nu = 0; for
    nu > 0, one constant L2 weight (the user side's lambda_r at the mean row length)."""
    return 1 + 1 / alpha, lam * (1 + alpha) / alpha * (mean_row + alpha * n_cols) ** nu


def implicit_problem(
    indptr: np.ndarray,
    cols: np.ndarray,
    num_cols: int,
    alpha: float,
    reg: float,
    reg_exponent: float,
):
    """implicit's input for our objective: (CSR matrix whose values are the confidences,
    regularization); fit it with implicit's alpha = 1 (`implicit_model`)."""
    import scipy.sparse as sp

    lengths = np.diff(indptr)
    mean_row = float(lengths.sum() / max(1, np.count_nonzero(lengths)))
    confidence, regularization = implicit_params(alpha, reg, reg_exponent, mean_row, num_cols)
    data = np.full(len(cols), confidence, np.float32)
    matrix = sp.csr_matrix(
        (data, np.asarray(cols, np.int32), np.asarray(indptr, np.int64)),
        shape=(len(indptr) - 1, num_cols),
    )
    return matrix, regularization


def confidence_rows(rows: list[np.ndarray], num_cols: int, confidence: float):
    """New users' items as the CSR of confidences `recalculate_user` folds in (alpha = 1)."""
    import scipy.sparse as sp

    indptr = np.cumsum([0] + [len(c) for c in rows])
    indices = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    data = np.full(len(indices), confidence, np.float32)
    return sp.csr_matrix((data, indices, indptr), shape=(len(rows), num_cols))


def implicit_model(
    dim: int,
    regularization: float,
    epochs: int,
    cg_iters: int,
    *,
    gpu: bool = False,
    threads: int = 0,
    training_loss: bool = False,
    seed: int = 0,
):
    """implicit's ALS with CG (`cg_iters` steps per solve), alpha = 1 (the confidences are in the
    matrix): its CUDA model with `gpu`, else its CPU model on `threads` threads (0: all)."""
    kwargs = {
        "factors": dim,
        "regularization": regularization,
        "alpha": 1.0,
        "iterations": epochs,
        "calculate_training_loss": training_loss,
        "random_state": seed,
    }
    if gpu:
        from implicit.gpu.als import AlternatingLeastSquares

        model = AlternatingLeastSquares(**kwargs)
    else:
        from implicit.cpu.als import AlternatingLeastSquares
        from threadpoolctl import threadpool_limits

        # built as `fit` runs it, BLAS at one thread: its check (a warning otherwise) sees that
        with threadpool_limits(1, "blas"):
            model = AlternatingLeastSquares(**kwargs, use_cg=True, num_threads=threads)
    model.cg_steps = cg_iters
    return model


def fit(model, matrix, on_epoch: Callable[[int, float], None] | None = None) -> list[float]:
    """Fit `model` on `matrix`; seconds of each epoch (`on_epoch(epoch, seconds)` as each ends).
    The CPU model runs with BLAS at one thread, implicit's own advice (its threads, not BLAS's)."""
    from threadpoolctl import threadpool_limits

    seconds: list[float] = []

    def callback(it: int, elapsed: float, _loss) -> None:
        seconds.append(elapsed)
        if on_epoch:
            on_epoch(it + 1, elapsed)

    cpu = type(model).__module__.startswith("implicit.cpu")
    with threadpool_limits(1, "blas") if cpu else contextlib.nullcontext():
        model.fit(matrix, show_progress=False, callback=callback)
    return seconds


def implicit_memory(stats, matrix, dim: int) -> dict:
    """implicit GPU's peak device memory: RMM's peak (factors, gramians, buffers) plus its two CSR
    copies, which it allocates as CUDA managed memory outside RMM. Where RMM saw less than the two
    factor tables (its statistics did not reach implicit's allocator), the same allocations counted
    instead."""
    users, items = matrix.shape
    # Cui and Ciu: indptr, indices, data
    managed = 2 * (4 * (users + items + 2) + 8 * matrix.nnz)
    # two tables, two d x d gramians (float32)
    counted = 4 * dim * (users + items + 2 * dim)
    measured = stats is not None and stats.peak_bytes >= 4 * dim * (users + items)
    return {
        "peak_device_gib": ((stats.peak_bytes if measured else counted) + managed) / GIB,
        "peak_device_source": "RMM statistics + managed CSR" if measured else "counted",
    }


def timed_fit(model, matrix, on_epoch=None) -> tuple[list[float], float]:
    """`fit`, and the seconds of the whole fit beyond its epochs (its set-up)."""
    t = time.perf_counter()
    seconds = fit(model, matrix, on_epoch)
    return seconds, time.perf_counter() - t - sum(seconds)
