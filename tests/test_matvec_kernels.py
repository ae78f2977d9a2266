"""The matrix-free CG kernels against a float64 NumPy CG of the same steps, one half-epoch each.

A half-epoch solves every row of one side by `cg_iters` conjugate-gradient steps from the table's
rows (warm start) on (alpha G + lambda I + sum_i h_i h_i^T) x = sum_i h_i. The reference runs the
same recurrence in float64 on the same start, so float32 kernels must agree to rounding: the
one-call half-epoch (accelerator path, resident batches), the streamed steps and long-row solves
(accelerator path), and the per-core 'owner' steps. Rows longer than a batch are included.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from alx_trainer import execution
from alx_trainer.config import TrainConfig
from alx_trainer.execution import make_mesh
from alx_trainer.model import table_from_numpy
from alx_trainer.ops.side_runner import plan_side
from webgraph_contract.ragged import RaggedRows

NUM_ROWS, NUM_COLS, DIM, ITERS = 50, 70, 8, 3
ALPHA, REG = 0.3, 0.7


def cg_reference(rows, w0, h, iters):
    """float64 CG, `iters` steps per row from w0, as `solvers.cg_update` steps it."""
    gram = h.T @ h
    out = w0.copy()
    for r, cols in rows.items():
        hr = h[cols]
        a = ALPHA * gram + REG * np.eye(DIM) + hr.T @ hr
        x = w0[r].copy()
        res = hr.sum(axis=0) - a @ x
        p, rs = res.copy(), res @ res
        for _ in range(iters):
            ap = a @ p
            pap = p @ ap
            step = rs / pap if pap > 0 else 0.0
            x, res = x + step * p, res - step * ap
            rs_new = res @ res
            p, rs = res + (rs_new / rs if rs > 0 else 0.0) * p, rs_new
        out[r] = x
    return out


def observed_loss(rows, w, h) -> float:
    return float(sum(((1 - h[c] @ w[r]) ** 2).sum() for r, c in rows.items()))


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(7)
    rows = {
        r: sorted(rng.choice(NUM_COLS, int(rng.integers(1, 13)), replace=False).tolist())
        for r in range(NUM_ROWS)
    }
    for r in (4, 21):  # longer than a batch (8 pieces of 4 ids)
        rows[r] = sorted(rng.choice(NUM_COLS, 45, replace=False).tolist())
    rows.pop(33)  # a row without entries keeps its values
    w0 = rng.normal(0, 0.3, (NUM_ROWS, DIM))
    h = rng.normal(0, 0.3, (NUM_COLS, DIM))
    return rows, w0, h


def _half_epoch(problem, devices: int, table_dtype: str = "float32", **kw):
    rows, w0, h = problem
    mesh = make_mesh(jax.devices()[:devices])
    config = TrainConfig(
        data="mem",
        model_dir="unused",
        dim=DIM,
        alpha=ALPHA,
        reg=REG,
        solver="cg",
        cg_iters=ITERS,
        cg_form="matvec",
        piece_len=4,
        batch_pieces=8,
        batch_rows=4,
        progress=False,
        table_dtype=table_dtype,
        **kw,
    )
    ids = sorted(rows)
    exe = execution.current(config, NUM_ROWS, NUM_COLS, mesh)
    spec = exe.step_spec(config, NUM_COLS, observed_loss=True)
    chunk = RaggedRows.from_lists([rows[r] for r in ids], ids)
    runner = plan_side(config, exe, mesh, spec, lambda: iter([chunk]), NUM_ROWS)
    src = table_from_numpy(mesh, h, table_dtype)
    dst = table_from_numpy(mesh, w0, table_dtype)
    result = runner.run(src, dst)
    return runner, result, np.asarray(result.table.astype(np.float32), np.float64)[:NUM_ROWS]


CASES = {
    "one call (accelerator, resident)": {
        "devices": 1,
        "accelerator": "on",
        "resident_batches": "on",
    },
    "one call, sharded on 8 devices": {
        "devices": 8,
        "accelerator": "on",
        "resident_batches": "on",
        "layout": "sharded",
    },
    "one call, replicated on 8 devices": {
        "devices": 8,
        "accelerator": "on",
        "resident_batches": "on",
        "layout": "replicated",
    },
    "streamed steps (accelerator)": {
        "devices": 8,
        "accelerator": "on",
        "resident_batches": "off",
        "calls_per_half_epoch": 2,
    },
    "per-core owner steps": {"devices": 2, "accelerator": "off", "layout": "owner"},
}


@pytest.mark.parametrize("case", list(CASES))
def test_matvec_half_epoch_matches_float64_cg(problem, case):
    kw = dict(CASES[case])
    runner, result, w = _half_epoch(problem, kw.pop("devices"), **kw)
    rows, w0, h = problem
    assert runner.spec.matvec
    assert runner.one_call == (kw.get("resident_batches") == "on")
    expected = cg_reference(rows, w0, h, ITERS)
    assert np.abs(w - expected).max() < 1e-4 * np.abs(expected).max()
    assert result.terms.rows == len(rows)
    assert result.terms.reg == pytest.approx(
        REG * sum(float(expected[r] @ expected[r]) for r in rows), rel=1e-4
    )
    assert result.terms.observed == pytest.approx(observed_loss(rows, expected, h), rel=1e-4)


def test_one_call_returns_the_gramian_of_its_result(problem):
    _, result, w = _half_epoch(
        problem, 8, accelerator="on", resident_batches="on", layout="sharded"
    )
    gram = np.asarray(result.gramian, np.float64)
    assert np.abs(gram - w.T @ w).max() < 1e-4 * np.abs(w.T @ w).max()


def test_bfloat16_tables_read_in_their_own_dtype(problem):
    """bfloat16 tables: the kernels widen the stored values, so the reference on the rounded values
    agrees to the rounding of the result (bfloat16 keeps 8 bits)."""
    rows, w0, h = problem
    rounded = [
        np.asarray(jax.numpy.asarray(a, jax.numpy.bfloat16).astype(np.float32), np.float64)
        for a in (w0, h)
    ]
    _, _, w = _half_epoch(
        (rows, *rounded), 1, table_dtype="bfloat16", accelerator="on", resident_batches="on"
    )
    expected = cg_reference(rows, rounded[0], rounded[1], ITERS)
    assert np.abs(w - expected).max() < 2**-7 * np.abs(expected).max()


def test_unrolled_loops_compute_the_same(problem):
    """`StepSpec.unroll` (for cost analysis) changes the program's form, not its result."""
    runner, _, w = _half_epoch(problem, 1, accelerator="on", resident_batches="on")
    rows, w0, h = problem
    mesh = runner.mesh
    program, normal, longs = runner.one_call_program(dataclasses.replace(runner.spec, unroll=True))
    out, _, _ = program(
        table_from_numpy(mesh, h, "float32"),
        table_from_numpy(mesh, w0, "float32"),
        runner.fixed(table_from_numpy(mesh, h, "float32")),
        normal,
        longs,
    )
    assert np.abs(np.asarray(out, np.float64)[:NUM_ROWS] - w).max() < 1e-5


def test_streamed_half_epochs_keep_to_calls_per_half_epoch(problem):
    runner, _, _ = _half_epoch(
        problem, 1, accelerator="on", resident_batches="off", calls_per_half_epoch=2
    )
    assert not runner.one_call and runner.plan.calls <= 2 < runner.plan.steps
