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

import tests.test_matvec_kernels as m
from alx_trainer.config import ConfigError, TrainConfig
from alx_trainer.data import batching
from alx_trainer.data.row_chunk import RowChunk
from alx_trainer.ops import kernels, pallas_cg
from alx_trainer.ops.spec import StepSpec, hyper_params, step_spec
from tests.test_matvec_kernels import CASES, cg_reference, observed_loss
from tests.test_matvec_kernels import _half_epoch as matvec_half_epoch

ALPHA, REG, DIM, ITERS, NUM_COLS = m.ALPHA, m.REG, m.DIM, m.ITERS, m.NUM_COLS
NUM_ROWS = 90  # more rows than the XLA path's test, its objective and columns
PIECE_LEN, PIECES, SLOTS = 4, 48, 40


@pytest.fixture(scope="module")
def problem():
    """Rows of 0-12 ids, a few of 20-40 (up to 10 pieces of 4), tables of both sides."""
    rng = np.random.default_rng(11)
    draw = lambda n: sorted(rng.choice(NUM_COLS, n, replace=False).tolist())
    rows = {r: draw(int(rng.integers(0, 13))) for r in range(NUM_ROWS)}
    for r in (5, 6, 40, 77):
        rows[r] = draw(int(rng.integers(20, 41)))
    w0 = rng.normal(0, 0.3, (NUM_ROWS, DIM))
    h = rng.normal(0, 0.3, (NUM_COLS, DIM))
    return rows, w0, h


def _batches(rows) -> batching.DeviceBatch:
    ids = sorted(rows)
    chunks = [RowChunk.from_rows(ids, [rows[r] for r in ids])]
    batch = batching.merge(list(batching.pack_normal(chunks, PIECE_LEN, PIECES, SLOTS)))
    assert len(batch) >= 3 and (batch.row_ids == -1).any() and (batch.seg == SLOTS).any()
    assert all(np.all(np.diff(s) >= 0) for s in batch.seg), "pieces in slot order"
    return batch


_kernel = jax.jit(pallas_cg.batch_cg, static_argnums=(6, 7, 8, 9))
_xla = jax.jit(kernels._matvec_cg, static_argnums=(0,))


def _solve(batch, k, w0, h, dtype, gathered, shape):
    """x [R, d] and observed loss [R] of batch k by the Pallas kernel, and x by the XLA path."""
    ids, seg, row_ids = (jnp.asarray(a[k]) for a in (batch.ids, batch.seg, batch.row_ids))
    table = jnp.asarray(h, dtype)
    x0 = jnp.asarray(w0, dtype)[jnp.maximum(row_ids, 0)].astype(jnp.float32)
    x0 = jnp.where(row_ids[:, None] >= 0, x0, 0)
    gram = jnp.asarray(h.T @ h, jnp.float32)
    lam = jnp.full(row_ids.shape, REG, jnp.float32)
    rows = table[jnp.maximum(ids, 0)] if gathered else table
    x, observed = _kernel(rows, ids, seg, x0, ALPHA * gram, lam, ITERS, gathered, True, shape)
    spec = StepSpec(num_other=NUM_COLS, solver="cg", cg_iters=ITERS, matvec=True, local_stats=False)
    fixed = (gram, jnp.asarray(hyper_params(ALPHA, REG, 0.0)))
    row_len = jnp.asarray(batch.row_len[k])
    xla, _ = _xla(spec, fixed, table[jnp.maximum(ids, 0)], ids, seg, x0, row_ids, row_len)
    x = np.where(np.asarray(row_ids)[:, None] >= 0, np.asarray(x, np.float64), 0)
    return x, np.asarray(observed, np.float64), np.asarray(xla, np.float64)


def _windows_per_tile(batch, shape) -> set[int]:
    per_tile, chunk = shape or pallas_cg.tile_shape(PIECES, SLOTS, PIECE_LEN, DIM, 4)
    counts = [np.diff(pallas_cg.tile_bounds(s, SLOTS, per_tile, np)) for s in batch.seg]
    return {-(-int(n) // chunk) for n in np.concatenate(counts)}


# (row slots per tile, pieces per window): tiles (with pieces) in one window, streamed, or both
SHAPES = {
    "default": (None, "one"),
    "16 rows, windows of 4": ((16, 4), "streamed"),
    "4 rows, windows of 2": ((4, 2), "both"),
    "8 rows, windows of 16": ((8, 16), "both"),
}


@pytest.mark.parametrize("gathered", [False, True], ids=["gather in kernel", "gathered block"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_kernel_matches_float64_cg_and_the_xla_path(problem, gathered, shape):
    rows, w0, h = problem
    batch = _batches(rows)
    shape, kinds = SHAPES[shape]
    windows = _windows_per_tile(batch, shape) - {0}
    expect = {"one": (True, False), "streamed": (False, True), "both": (True, True)}[kinds]
    assert (1 in windows, max(windows) > 1) == expect
    expected = cg_reference(rows, w0, h, ITERS)
    scale = np.abs(expected).max()
    for k in range(len(batch)):
        x, observed, xla = _solve(batch, k, w0, h, jnp.float32, gathered, shape)
        row_ids = batch.row_ids[k]
        want = np.stack([expected[r] if r >= 0 else np.zeros(DIM) for r in row_ids])
        assert np.abs(x - want).max() < 1e-4 * scale
        assert np.abs(x - xla).max() < 1e-4 * scale
        loss = [observed_loss({r: rows[r]}, expected, h) if r >= 0 else 0.0 for r in row_ids]
        assert np.abs(observed - loss).max() < 1e-4 * max(loss)


def test_bfloat16_tables(problem):
    """bfloat16 tables: the kernel widens the stored values; against the float64 CG on the
    rounded values it agrees to the rounding of the result (bfloat16 keeps 8 bits)."""
    rows, w0, h = problem
    rounded = [
        np.asarray(jnp.asarray(a, jnp.bfloat16).astype(jnp.float32), np.float64) for a in (w0, h)
    ]
    expected = cg_reference(rows, *rounded, ITERS)
    scale = np.abs(expected).max()
    batch = _batches(rows)
    for k in range(len(batch)):
        x, _, xla = _solve(batch, k, rounded[0], rounded[1], jnp.bfloat16, False, (4, 2))
        want = np.stack([expected[r] if r >= 0 else np.zeros(DIM) for r in batch.row_ids[k]])
        assert np.abs(x - want).max() < 2**-7 * scale
        assert np.abs(x - xla).max() < 1e-4 * scale  # the same stored values, float32 sums


def test_kernel_bytes_count_each_tiles_entries(problem):
    """`kernel_bytes` against a count slot by slot: a tile's entries in its first window read
    once, the rest once per pass (r0, 3 steps, the loss)."""
    rows, _, _ = problem
    batch = _batches(rows)
    per_tile, chunk = 4, 2
    for ids, seg in zip(batch.ids, batch.seg):
        want = 0
        for first_slot in range(0, SLOTS, per_tile):
            pieces = [p for p in range(PIECES) if first_slot <= seg[p] < first_slot + per_tile]
            for i, p in enumerate(pieces):
                want += int((ids[p] >= 0).sum()) * (1 if i < chunk else 1 + ITERS + 1)
        got = pallas_cg.kernel_bytes(ids, seg, SLOTS, DIM, 4, ITERS, True, (per_tile, chunk))
        assert got["rows"] == want * DIM * 4


def test_tile_shape():
    """As many rows (4-16) as fit one window at the batch's mean pieces per slot."""
    assert pallas_cg.chunk_pieces(16, 128, 2) == 8  # 32 KiB of 16 x 128 bfloat16 values
    assert pallas_cg.chunk_pieces(16, 128, 4) == 4
    assert pallas_cg.chunk_pieces(64, 128, 4) == 1  # a piece over the window: one a window
    assert pallas_cg.tile_shape(4096, 8192, 16, 128, 2) == (16, 8)  # 0.5 pieces per slot
    assert pallas_cg.tile_shape(4096, 4096, 16, 128, 2) == (8, 8)  # 1
    assert pallas_cg.tile_shape(4096, 3000, 16, 128, 2) == (4, 8)  # 1.4
    assert pallas_cg.tile_shape(4096, 762, 16, 128, 2) == (4, 8)  # 5.4: streamed


@pytest.mark.parametrize("case", list(CASES))
def test_half_epoch_with_the_pallas_kernel(case):
    """Every layout's half-epoch (one call, sharded, replicated, streamed, per-core owner) with
    `cg_kernel` 'pallas' against the float64 CG, as `tests/test_matvec_kernels.py` checks the
    XLA path; rows longer than a batch go to the long-row solve as before."""
    rng = np.random.default_rng(7)
    draw = lambda n: sorted(rng.choice(m.NUM_COLS, n, replace=False).tolist())
    rows = {r: draw(int(rng.integers(1, 13))) for r in range(m.NUM_ROWS)}
    rows.update({4: draw(45), 21: draw(45), 8: draw(32), 9: draw(32)})  # 8 pieces fill a batch
    rows.pop(33)
    w0, h = rng.normal(0, 0.3, (m.NUM_ROWS, m.DIM)), rng.normal(0, 0.3, (m.NUM_COLS, m.DIM))
    kw = dict(CASES[case])
    runner, w, terms = matvec_half_epoch((rows, w0, h), kw.pop("devices"), cg_kernel="pallas", **kw)
    assert runner.spec.cg_kernel == "pallas"
    expected = cg_reference(rows, w0, h, m.ITERS)
    assert np.abs(w - expected).max() < 1e-4 * np.abs(expected).max()
    assert terms[2] == len(rows)
    reg = m.REG * sum(float(expected[r] @ expected[r]) for r in rows)
    assert terms[1] == pytest.approx(reg, rel=1e-4)
    assert terms[0] == pytest.approx(observed_loss(rows, expected, h), rel=1e-4)


@pytest.mark.parametrize("gathered", [False, True], ids=["gather in kernel", "gathered block"])
@pytest.mark.parametrize("dim,dtype,shape", [(128, jnp.bfloat16, None), (64, jnp.float32, (4, 16))])
def test_lowers_to_triton(gathered, dim, dtype, shape):
    """The kernel at GPU shapes (65,536 id slots in pieces of 16, 5,120 row slots) lowers through
    Pallas' Triton backend: exported for CUDA from this CPU host (compiling it needs a GPU)."""
    B, L, R = 4096, 16, 5120
    rows = jax.ShapeDtypeStruct((B, L, dim) if gathered else (100_000, dim), dtype)
    f32 = lambda *s: jax.ShapeDtypeStruct(s, jnp.float32)
    i32 = lambda *s: jax.ShapeDtypeStruct(s, jnp.int32)
    args = (rows, i32(B, L), i32(B), f32(R, dim), f32(dim, dim), f32(R))
    solve = jax.jit(lambda *a: pallas_cg.batch_cg(*a, ITERS, gathered, True, shape, gpu=True))
    triton = "__gpu$xla.gpu.triton"
    unchecked = [export.DisabledSafetyCheck.custom_call(triton)]
    text = export.export(solve, platforms=["cuda"], disabled_checks=unchecked)(*args).mlir_module()
    assert text.count(triton) == 1


def test_config_checks_the_flag():
    base = {"data": "d", "model_dir": "m"}
    assert TrainConfig(**base).cg_kernel == "xla"
    with pytest.raises(ConfigError, match="cg_kernel: must be one of"):
        TrainConfig(**base, cg_kernel="triton").validate()
    for other in ({"cg_form": "explicit"}, {"solver": "cholesky"}, {"stats": "local"}):
        with pytest.raises(ConfigError, match="cg_kernel: 'pallas' is the matrix-free CG"):
            TrainConfig(**base, cg_kernel="pallas", **other).validate()
    config = TrainConfig(**base, cg_kernel="pallas", cg_form="matvec").validate()
    assert step_spec(config, 10).cg_kernel == "pallas"


def test_gpu_shapes_are_checked():
    assert pallas_cg.gpu_support(128, 16) == ""
    assert "power of two" in pallas_cg.gpu_support(96, 16)
    assert "[16, 128]" in pallas_cg.gpu_support(256, 16)
    assert "piece_len" in pallas_cg.gpu_support(64, 12)
    assert pallas_cg.gpu_support(128, 16, 16_000_000) == ""
    assert "2^31" in pallas_cg.gpu_support(128, 16, 19_700_000)  # de-sparse: 32-bit offsets


def test_a_gpu_config_too_large_for_the_kernel_is_refused(monkeypatch):
    """On a GPU, a fixed table the in-kernel gather cannot address is refused when the config is
    read, in one line, not at the first step."""
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    config = TrainConfig(
        data="d",
        model_dir="m",
        dim=128,
        cg_form="matvec",
        cg_kernel="pallas",
        accelerator="on",
        layout="replicated",
    ).validate()
    assert step_spec(config, 100_000).cg_kernel == "pallas"
    with pytest.raises(ValueError, match=r"19,700,000 x 128 values, over the 2\^31"):
        step_spec(config, 19_700_000)


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
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=1",
        "JAX_PLATFORMS": "cpu",
    }
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        cwd=pathlib.Path(__file__).resolve().parent.parent,
    )
    assert done.returncode == 0, done.stderr[-2000:]
