"""The iALS++ block solver (`--solver block`) against the float64 NumPy reference
(tests/reference_ials.py)."""

from __future__ import annotations

import numpy as np
import pytest

from alx_trainer.config import TrainConfig
from alx_trainer.execution import make_mesh
from alx_trainer.model import init_tables
from alx_trainer.ops import block_solver
from alx_trainer.train import train

import reference_ials as ref

NUM_ROWS, NUM_COLS, DIM = 60, 90, 6
ALPHA, REG = 0.5, 0.8
# 4 x 8 = 32 ids per device batch: rows 5 and 17 (46 ids) are longer than a whole batch (their
# statistics are summed over batches, then swept on explicit matrices), row 9 fills one batch.
SHAPE = {"piece_len": 4, "batch_pieces": 8, "batch_rows": 4}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    rows = ref.random_rows(0, NUM_ROWS, NUM_COLS, max_len=14, long_rows=[5, 17])
    rows[9] = sorted(np.random.default_rng(1).choice(NUM_COLS, size=32, replace=False).tolist())
    path = str(tmp_path_factory.mktemp("block") / "data")
    ref.write_dataset(path, rows, NUM_ROWS, NUM_COLS, shards=3)
    return path, rows


def _config(data_dir: str, model_dir: str, **kw) -> TrainConfig:
    base = dict(
        data=data_dir,
        model_dir=model_dir,
        dim=DIM,
        epochs=2,
        alpha=ALPHA,
        reg=REG,
        solver="block",
        progress=False,
        eval_every=0,
        init_stddev=0.3,
        **SHAPE,
    )
    base.update(kw)
    return TrainConfig(**base)


def _initial(config: TrainConfig, mesh):
    t = init_tables(config, NUM_ROWS, NUM_COLS, mesh)
    return np.asarray(t["row"], np.float64)[:NUM_ROWS], np.asarray(t["col"], np.float64)[:NUM_COLS]


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("block_size", [1, 4, DIM])
@pytest.mark.parametrize("layout", ["sharded", "owner"])
def test_block_sweeps_match_float64_reference(dataset, tmp_path, block_size, layout):
    """Block size 4 leaves a partial last block of 2 (d = 6); both layouts on 8 devices."""
    data_dir, rows = dataset
    mesh = make_mesh()
    assert mesh.size == 8
    config = _config(
        data_dir,
        str(tmp_path / "m"),
        block_size=block_size,
        layout=layout,
        reg_exponent=0.5,
        reg=0.05,
    )
    w0, h0 = _initial(config, mesh)
    model = train(config, mesh=mesh)
    w, h = ref.ials(rows, w0, h0, 2, ALPHA, 0.05, reg_exponent=0.5, block_size=block_size)
    assert _rel(model.row_table, w) < 1e-4
    assert _rel(model.col_table, h) < 1e-4
    expected = ref.loss(rows, w, h, ALPHA, 0.05)
    assert model.metrics[-1]["loss_observed"] == pytest.approx(expected["observed"], rel=1e-4)


@pytest.mark.parametrize("kw", [{"layout": "replicated"}, {"stats": "local"}])
def test_block_sweep_in_the_other_layouts(dataset, tmp_path, kw):
    data_dir, rows = dataset
    mesh = make_mesh()
    config = _config(data_dir, str(tmp_path / "m"), block_size=4, **kw)
    w0, h0 = _initial(config, mesh)
    model = train(config, mesh=mesh)
    w, h = ref.ials(rows, w0, h0, 2, ALPHA, REG, block_size=4)
    assert _rel(model.row_table, w) < 1e-4
    assert _rel(model.col_table, h) < 1e-4


@pytest.mark.parametrize("block_size", [DIM, 100])
def test_full_block_is_the_exact_solve(dataset, tmp_path, block_size):
    data_dir, rows = dataset
    mesh = make_mesh()
    config = _config(data_dir, str(tmp_path / "m"), block_size=block_size)
    w0, h0 = _initial(config, mesh)
    model = train(config, mesh=mesh)
    w, h = ref.ials(rows, w0, h0, 2, ALPHA, REG)  # exact solves, no blocks
    assert _rel(model.row_table, w) < 1e-4
    assert _rel(model.col_table, h) < 1e-4


def test_small_blocks_are_not_the_exact_solve_but_never_raise_the_loss(dataset, tmp_path):
    """One sweep of small blocks is a different (inexact) update; block descent never increases Eq.
    3."""
    data_dir, rows = dataset
    mesh = make_mesh()
    config = _config(data_dir, str(tmp_path / "m"), block_size=1, epochs=4)
    w0, h0 = _initial(config, mesh)
    model = train(config, mesh=mesh)
    w, h = ref.ials(rows, w0, h0, 4, ALPHA, REG)
    assert _rel(model.col_table, h) > 1e-3
    losses = [m["loss"] for m in model.metrics]
    assert all(b <= a * (1 + 1e-6) for a, b in zip(losses, losses[1:])), losses


def test_sweep_explicit_equals_the_residual_sweep():
    """The explicit-matrix sweep (long rows) and the residual sweep (dense batches) agree."""
    import jax.numpy as jnp

    rng = np.random.default_rng(2)
    d, rows, pieces, length = 7, 3, 5, 4
    h = rng.normal(size=(pieces, length, d)).astype(np.float32)
    seg = np.array([0, 0, 1, 2, 3], np.int32)  # the last piece is padding (slot 3 of 3 rows)
    h[4] = 0
    x0 = rng.normal(size=(rows, d)).astype(np.float32)
    fixed = rng.normal(size=(20, d))
    gram = (fixed.T @ fixed).astype(np.float32)
    lam = np.array([0.5, 1.0, 2.0], np.float32)
    x, _ = block_solver.sweep(
        jnp.asarray(h),
        jnp.asarray(seg),
        jnp.asarray(x0),
        jnp.asarray(gram),
        jnp.asarray(lam),
        ALPHA,
        jnp.ones(rows, bool),
        3,
    )
    a = np.zeros((rows, d, d), np.float32)
    b = np.zeros((rows, d), np.float32)
    for p in range(4):
        a[seg[p]] += h[p].T @ h[p]
        b[seg[p]] += h[p].sum(axis=0)
    a += ALPHA * gram + lam[:, None, None] * np.eye(d, dtype=np.float32)
    y = block_solver.sweep_explicit(jnp.asarray(a), jnp.asarray(b), jnp.asarray(x0), 3)
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-4, atol=1e-5)


def test_block_size_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="block_size"):
        _config("d", "m", block_size=0).validate()
