"""The Pallas CG kernel (`cg_kernel` 'pallas', interpret mode on CPU) against a float64 NumPy CG of
the same steps and against the XLA path, on dense batches as `data.batching` lays them out: rows
split over several pieces, padded pieces and slots, tiles whose pieces fit one window (resident)
and tiles streamed window by window. Its Triton lowering is checked by exporting for CUDA."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

from alx_trainer.config import ConfigError, TrainConfig
from alx_trainer.data import batching, records
from alx_trainer.ops import kernels, pallas_cg
from alx_trainer.ops.spec import StepSpec, hyper_params, step_spec
import tests.test_matvec_kernels as m
from tests.test_matvec_kernels import ALPHA, CASES, DIM, ITERS, NUM_COLS, REG, cg_reference, observed_loss
from tests.test_matvec_kernels import _half_epoch as matvec_half_epoch

NUM_ROWS = 90  # the XLA path's test's table sizes, objective and steps otherwise
PIECE_LEN, PIECES, SLOTS = 4, 48, 40


@pytest.fixture(scope="module")
def problem():
    """Rows of 0-12 ids, a few of 20-40 (up to 10 pieces of 4), tables of both sides."""
    rng = np.random.default_rng(11)
    rows = {r: sorted(rng.choice(NUM_COLS, int(rng.integers(0, 13)), replace=False).tolist()) for r in range(NUM_ROWS)}
    for r in (5, 6, 40, 77):
        rows[r] = sorted(rng.choice(NUM_COLS, int(rng.integers(20, 41)), replace=False).tolist())
    w0 = rng.normal(0, 0.3, (NUM_ROWS, DIM))
    h = rng.normal(0, 0.3, (NUM_COLS, DIM))
    return rows, w0, h


def _batches(rows) -> batching.DeviceBatch:
    ids = sorted(rows)
    chunks = records.chunks_from_rows(ids, [rows[r] for r in ids])
    return batching.merge(list(batching.pack_normal(chunks, PIECE_LEN, PIECES, SLOTS)))


_kernel = jax.jit(pallas_cg.batch_cg, static_argnums=(6, 7, 8, 9))
_xla = jax.jit(kernels._matvec_cg, static_argnums=(0,))


def _solve(batch, k, w0, h, dtype, gathered, chunk):
    """x [R, d] and observed loss [R] of batch k by the Pallas kernel, and x by the XLA path."""
    ids, seg, row_ids = (jnp.asarray(a[k]) for a in (batch.ids, batch.seg, batch.row_ids))
    table = jnp.asarray(h, dtype)
    x0 = jnp.where(row_ids[:, None] >= 0, jnp.asarray(w0, dtype)[jnp.maximum(row_ids, 0)], 0).astype(jnp.float32)
    gram = jnp.asarray(h.T @ h, jnp.float32)
    lam = jnp.full(row_ids.shape, REG, jnp.float32)
    rows = table[jnp.maximum(ids, 0)] if gathered else table
    x, observed = _kernel(rows, ids, seg, x0, ALPHA * gram, lam, ITERS, gathered, True, chunk)
    spec = StepSpec(num_other=NUM_COLS, solver="cg", cg_iters=ITERS, matvec=True, local_stats=False)
    fixed = (gram, jnp.asarray(hyper_params(ALPHA, REG, 0.0)))
    row_len = jnp.asarray(batch.row_len[k])
    xla, _ = _xla(spec, fixed, table[jnp.maximum(ids, 0)], ids, seg, x0, row_ids, row_len)
    valid = np.asarray(row_ids)[:, None] >= 0
    return np.where(valid, np.asarray(x, np.float64), 0), np.asarray(observed, np.float64), np.asarray(xla, np.float64)


@pytest.mark.parametrize("gathered", [False, True], ids=["gather in kernel", "gathered block"])
@pytest.mark.parametrize("chunk", [0, 4, 16], ids=["resident", "window 4", "window 16"])
def test_kernel_matches_float64_cg_and_the_xla_path(problem, gathered, chunk):
    rows, w0, h = problem
    batch = _batches(rows)
    assert len(batch) >= 3 and (batch.row_ids == -1).any() and (batch.seg == SLOTS).any()
    assert all(np.all(np.diff(s) >= 0) for s in batch.seg), "pieces in slot order (the kernel's tiles rely on it)"
    expected = cg_reference(rows, w0, h, ITERS)
    scale = np.abs(expected).max()
    kinds = set()
    for k in range(len(batch)):
        x, observed, xla = _solve(batch, k, w0, h, jnp.float32, gathered, chunk)
        row_ids = batch.row_ids[k]
        want = np.stack([expected[r] if r >= 0 else np.zeros(DIM) for r in row_ids])
        assert np.abs(x - want).max() < 1e-4 * scale
        assert np.abs(x - xla).max() < 1e-4 * scale
        for slot, r in enumerate(row_ids):
            loss = observed_loss({r: rows[r]}, expected, h) if r >= 0 else 0.0
            assert observed[slot] == pytest.approx(loss, rel=1e-4, abs=1e-6) or r < 0
        bounds = pallas_cg.tile_bounds(batch.seg[k], SLOTS, np)
        window = chunk or pallas_cg.chunk_pieces(PIECE_LEN, DIM, 4)
        kinds |= {"resident" if n <= window else "streamed" for n in np.diff(bounds)}
    assert kinds == ({"resident", "streamed"} if chunk == 4 else {"resident"} if chunk == 0 else kinds)


def test_bfloat16_tables(problem):
    """bfloat16 tables: the kernel widens the stored values; against the float64 CG on the rounded
    values it agrees to the rounding of the result (bfloat16 keeps 8 bits)."""
    rows, w0, h = problem
    rounded = [np.asarray(jnp.asarray(a, jnp.bfloat16).astype(jnp.float32), np.float64) for a in (w0, h)]
    expected = cg_reference(rows, *rounded, ITERS)
    batch = _batches(rows)
    for k in range(len(batch)):
        x, _, xla = _solve(batch, k, rounded[0], rounded[1], jnp.bfloat16, False, 4)
        want = np.stack([expected[r] if r >= 0 else np.zeros(DIM) for r in batch.row_ids[k]])
        assert np.abs(x - want).max() < 2**-7 * np.abs(expected).max()
        assert np.abs(x - xla).max() < 1e-4 * np.abs(expected).max()  # the same stored values, float32 sums


@pytest.mark.parametrize("case", list(CASES))
def test_half_epoch_with_the_pallas_kernel(case):
    """Every layout's half-epoch (one call, sharded, replicated, streamed, per-core owner) with
    `cg_kernel` 'pallas' against the float64 CG, as `tests/test_matvec_kernels.py` checks the XLA path."""
    rng = np.random.default_rng(7)
    rows = {r: sorted(rng.choice(m.NUM_COLS, int(rng.integers(1, 13)), replace=False).tolist()) for r in range(m.NUM_ROWS)}
    for r in (4, 21):  # longer than a batch: the long-row solve (explicit statistics) takes them
        rows[r] = sorted(rng.choice(m.NUM_COLS, 45, replace=False).tolist())
    for r in (8, 9):  # all 8 pieces of a batch
        rows[r] = sorted(rng.choice(m.NUM_COLS, 32, replace=False).tolist())
    rows.pop(33)
    w0, h = rng.normal(0, 0.3, (m.NUM_ROWS, m.DIM)), rng.normal(0, 0.3, (m.NUM_COLS, m.DIM))
    kw = dict(CASES[case])
    runner, w, terms = matvec_half_epoch((rows, w0, h), kw.pop("devices"), cg_kernel="pallas", **kw)
    assert runner.spec.cg_kernel == "pallas"
    expected = cg_reference(rows, w0, h, m.ITERS)
    assert np.abs(w - expected).max() < 1e-4 * np.abs(expected).max()
    assert terms[2] == len(rows)
    assert terms[1] == pytest.approx(m.REG * sum(float(expected[r] @ expected[r]) for r in rows), rel=1e-4)
    assert terms[0] == pytest.approx(observed_loss(rows, expected, h), rel=1e-4)


@pytest.mark.parametrize("gathered", [False, True], ids=["gather in kernel", "gathered block"])
@pytest.mark.parametrize("dim,dtype", [(128, jnp.bfloat16), (64, jnp.float32)])
def test_lowers_to_triton(gathered, dim, dtype):
    """The kernel at a GPU shape (65,536 id slots of 16, 5,120 row slots) lowers through Pallas'
    Triton backend (exported for CUDA on this CPU host; compiling it needs a GPU)."""
    B, L, R = 4096, 16, 5120
    rows = jax.ShapeDtypeStruct((B, L, dim) if gathered else (100_000, dim), dtype)
    args = (rows, jax.ShapeDtypeStruct((B, L), jnp.int32), jax.ShapeDtypeStruct((B,), jnp.int32),
            jax.ShapeDtypeStruct((R, dim), jnp.float32), jax.ShapeDtypeStruct((dim, dim), jnp.float32),
            jax.ShapeDtypeStruct((R,), jnp.float32))

    def solve(*a):
        return pallas_cg.batch_cg(*a, ITERS, gathered, True)

    pallas_cg._mode = lambda: False  # noqa: SLF001 - lower for the GPU from a CPU host
    try:
        text = export.export(jax.jit(solve), platforms=["cuda"],
                             disabled_checks=[export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")])(*args)
        text = text.mlir_module()
    finally:
        del pallas_cg._mode
    assert text.count("__gpu$xla.gpu.triton") == 1


def test_config_checks_the_flag():
    base = {"data": "d", "model_dir": "m"}
    assert TrainConfig(**base).cg_kernel == "xla"
    with pytest.raises(ConfigError, match="cg_kernel: must be one of"):
        TrainConfig(**base, cg_kernel="triton").validate()
    with pytest.raises(ConfigError, match="cg_kernel: 'pallas' is the matrix-free CG"):
        TrainConfig(**base, cg_kernel="pallas", cg_form="explicit").validate()
    with pytest.raises(ConfigError, match="cg_kernel: 'pallas' is the matrix-free CG"):
        TrainConfig(**base, cg_kernel="pallas", solver="cholesky").validate()
    assert step_spec(TrainConfig(**base, cg_kernel="pallas", cg_form="matvec"), 10).cg_kernel == "pallas"


def test_gpu_shapes_are_checked():
    assert pallas_cg.gpu_support(128, 16) == ""
    assert "power of two" in pallas_cg.gpu_support(96, 16)
    assert "[16, 256]" in pallas_cg.gpu_support(1024, 16)
    assert "piece_len" in pallas_cg.gpu_support(64, 12)


def test_default_path_never_loads_the_gpu_backend():
    """Importing the kernels and running a default (XLA) half-epoch loads no Pallas at all; an
    interpreted Pallas half-epoch then loads no Triton lowering (Pallas itself imports its Mosaic
    GPU interpreter's Python modules)."""
    code = (
        "import sys, numpy as np\n"
        "import tests.test_matvec_kernels as m\n"
        "from alx_trainer.ops import kernels, pallas_cg\n"
        "rows = {r: [r % 70, (3 * r) % 70] for r in range(50)}\n"
        "rng = np.random.default_rng(0)\n"
        "problem = (rows, rng.normal(0, .3, (50, 8)), rng.normal(0, .3, (70, 8)))\n"
        "def loaded(*names):\n"
        "    return [n for n in sys.modules if n.startswith(names)]\n"
        "triton = ('jax._src.pallas.triton', 'jax.experimental.pallas.triton')\n"
        "pallas = ('jax._src.pallas', 'jax.experimental.pallas')\n"
        "m._half_epoch(problem, 1, accelerator='on', resident_batches='on')\n"
        "assert not loaded(*pallas), loaded(*pallas)\n"
        "m._half_epoch(problem, 1, accelerator='on', resident_batches='on', cg_kernel='pallas')\n"
        "assert not loaded(*triton), loaded(*triton)\n"
    )
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=1", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          cwd=pathlib.Path(__file__).resolve().parent.parent)
    assert done.returncode == 0, done.stderr[-2000:]
