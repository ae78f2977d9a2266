"""The trainer against the independent float64 NumPy iALS (tests/reference_ials.py)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
from typing import Iterator

import jax
import numpy as np
import pytest

from alx_trainer import execution
from alx_trainer.config import TrainConfig
from alx_trainer.data.dataset import in_memory, read_chunks, split_reader
from alx_trainer.execution import make_mesh
from alx_trainer.model import fold_in, init_tables
from alx_trainer.train import train

import reference_ials as ref

NUM_ROWS, NUM_COLS = 60, 90
ALPHA, REG = 0.5, 0.8
# piece_len 4 x batch_pieces 8 = 32 ids per device batch: rows 5 and 17 (46 ids) are longer than a
# whole batch, row 9 fills exactly one batch, the rest are short.
SHAPE = {"piece_len": 4, "batch_pieces": 8, "batch_rows": 4}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    rows = ref.random_rows(0, NUM_ROWS, NUM_COLS, max_len=14, long_rows=[5, 17])
    rng = np.random.default_rng(1)
    rows[9] = sorted(rng.choice(NUM_COLS, size=32, replace=False).tolist())
    path = str(tmp_path_factory.mktemp("exact") / "data")
    ref.write_dataset(path, rows, NUM_ROWS, NUM_COLS, shards=3)
    return path, rows


def _config(data_dir: str, model_dir: str, **kw) -> TrainConfig:
    base = dict(
        data=data_dir,
        model_dir=model_dir,
        dim=6,
        epochs=1,
        alpha=ALPHA,
        reg=REG,
        solver="cholesky",
        progress=False,
        eval_every=0,
        init_stddev=0.3,
        **SHAPE,
    )
    base.update(kw)
    return TrainConfig(**base)


def _initial(config: TrainConfig, mesh):
    t = init_tables(config, NUM_ROWS, NUM_COLS, mesh)
    row = np.asarray(t["row"], np.float64)[:NUM_ROWS]
    col = None if config.tied else np.asarray(t["col"], np.float64)[:NUM_COLS]
    return row, col


class _Compiled(logging.Handler):
    """The names of the programs XLA compiled while installed (`jax.log_compiles` messages)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.names: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if (
            found := re.match(r"Finished XLA compilation of jit\((\w+)\)", record.getMessage())
        ) is not None:
            self.names.append(found.group(1))

    def count(self, name: str) -> int:
        return self.names.count(name)


@contextlib.contextmanager
def compilations() -> Iterator[_Compiled]:
    """Collect the programs compiled inside the block (JAX's own compile log, not the trainer's)."""
    handler, logger = _Compiled(), logging.getLogger("jax")
    logger.addHandler(handler)
    # for every thread (the context manager sets this one's)
    jax.config.update("jax_log_compiles", True)
    try:
        yield handler
    finally:
        jax.config.update("jax_log_compiles", False)
        logger.removeHandler(handler)


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def _train_matches_reference(config: TrainConfig, mesh, rows, tol: float = 1e-4):
    """Train from the same initial tables as the float64 reference; both tables within `tol`.
    Returns the model and the reference's tables."""
    w0, h0 = _initial(config, mesh)
    model = train(config, mesh=mesh)
    w, h = ref.ials(rows, w0, h0, config.epochs, ALPHA, REG)
    assert _rel(model.row_table, w) < tol
    assert _rel(model.col_table, h) < tol
    return model, w, h


def test_cholesky_matches_float64_reference_after_one_epoch(dataset, tmp_path):
    data_dir, rows = dataset
    mesh = make_mesh()
    assert mesh.size == 8
    model, w, h = _train_matches_reference(_config(data_dir, str(tmp_path / "m")), mesh, rows)
    # rows never seen (none here) aside, the loss terms match the reference's objective
    expected = ref.loss(rows, w, h, ALPHA, REG)
    assert model.metrics[-1]["loss_observed"] == pytest.approx(expected["observed"], rel=1e-4)
    assert model.metrics[-1]["loss_unobserved"] == pytest.approx(expected["unobserved"], rel=1e-4)


@pytest.mark.parametrize("solver", ["lu", "qr", "cg"])
def test_every_solver_matches_reference(dataset, tmp_path, solver):
    data_dir, rows = dataset
    mesh = make_mesh()
    _train_matches_reference(
        _config(data_dir, str(tmp_path / "m"), solver=solver, cg_iters=12, epochs=2), mesh, rows
    )


def test_cg_approaches_exact_solution_as_iterations_grow(dataset, tmp_path):
    data_dir, rows = dataset
    mesh = make_mesh()
    errors = []
    for iters in (1, 2, 4, 8):
        config = _config(data_dir, str(tmp_path / f"m{iters}"), solver="cg", cg_iters=iters)
        w0, h0 = _initial(config, mesh)
        model = train(config, mesh=mesh)
        w, h = ref.ials(rows, w0, h0, 1, ALPHA, REG)
        errors.append(_rel(model.col_table, h))
    assert errors == sorted(errors, reverse=True), errors
    assert errors[0] > 1e-2 and errors[-1] < 1e-4, errors


@pytest.mark.parametrize("cg_form", ["matvec", "explicit"])
def test_gather_and_local_statistics_agree(dataset, tmp_path, cg_form):
    data_dir, _ = dataset
    mesh = make_mesh()
    a = train(
        _config(data_dir, str(tmp_path / "g"), solver="cg", cg_iters=3, cg_form=cg_form), mesh=mesh
    )
    b = train(
        _config(data_dir, str(tmp_path / "l"), solver="cg", cg_iters=3, stats="local"), mesh=mesh
    )
    assert _rel(a.row_table, b.row_table) < 1e-5
    assert _rel(a.col_table, b.col_table) < 1e-5


@pytest.mark.parametrize("layout", ["replicated", "owner"])
def test_layouts_match_sharded_gather(dataset, tmp_path, layout):
    data_dir, _ = dataset
    mesh = make_mesh()
    kw = {"solver": "cg", "cg_iters": 3, "cg_form": "matvec", "epochs": 2, "steps_per_call": 3}
    a = train(_config(data_dir, str(tmp_path / "s"), layout="sharded", **kw), mesh=mesh)
    b = train(_config(data_dir, str(tmp_path / "r"), layout=layout, **kw), mesh=mesh)
    assert _rel(a.row_table, b.row_table) < 1e-5
    assert _rel(a.col_table, b.col_table) < 1e-5
    for key in (
        "loss_observed",
        "loss_unobserved",
        "loss_reg_row",
        "loss_reg_col",
        "rows_solved",
        "cols_solved",
    ):
        assert b.metrics[-1][key] == pytest.approx(a.metrics[-1][key], rel=1e-5), key


@pytest.mark.parametrize("layout", ["sharded", "owner"])
def test_one_device_and_eight_devices_give_the_same_tables(dataset, tmp_path, layout):
    data_dir, _ = dataset
    kw = {"epochs": 2, "layout": layout}
    one = train(_config(data_dir, str(tmp_path / "one"), **kw), mesh=make_mesh(jax.devices()[:1]))
    eight = train(_config(data_dir, str(tmp_path / "eight"), **kw), mesh=make_mesh())
    np.testing.assert_allclose(
        one.row_table, eight.row_table, rtol=0, atol=1e-5 * np.abs(one.row_table).max()
    )
    np.testing.assert_allclose(
        one.col_table, eight.col_table, rtol=0, atol=1e-5 * np.abs(one.col_table).max()
    )


def test_owner_devices_in_their_own_threads_match_sharded(dataset, tmp_path):
    """Two devices (one per core here): the 'owner' steps run per device, each in its own thread."""
    data_dir, _ = dataset
    two = jax.devices()[:2]
    assert execution.per_core_applies(two)
    # a spec of its own (alpha)
    kw = {
        "solver": "cg",
        "cg_iters": 9,
        "cg_form": "matvec",
        "epochs": 2,
        "steps_per_call": 2,
        "alpha": 0.4567,
    }
    ref_model = train(
        _config(data_dir, str(tmp_path / "s"), layout="sharded", **kw), mesh=make_mesh()
    )
    with compilations() as compiled:
        got = train(
            _config(data_dir, str(tmp_path / "o"), layout="owner", **kw), mesh=make_mesh(two)
        )
    assert _rel(got.row_table, ref_model.row_table) < 1e-5
    assert _rel(got.col_table, ref_model.col_table) < 1e-5
    for key in (
        "loss_observed",
        "loss_unobserved",
        "loss_reg_row",
        "loss_reg_col",
        "rows_solved",
        "cols_solved",
    ):
        assert got.metrics[-1][key] == pytest.approx(ref_model.metrics[-1][key], rel=1e-5), key
    # one compilation per device and side (cg_iters 9: a spec of its own)
    assert compiled.count("_step") == 4


def test_tied_tables_and_frequency_scaled_reg_match_reference(tmp_path):
    n = 40
    # rows 0, 7, .. absent
    rows = {r: c for r, c in ref.random_rows(3, n, n, max_len=9).items() if r % 7}
    data_dir = ref.write_dataset(str(tmp_path / "sq"), rows, n, n)
    mesh = make_mesh()
    config = _config(data_dir, str(tmp_path / "m"), tied=True, reg=0.05, reg_exponent=1.0, epochs=2)
    t = init_tables(config, n, n, mesh)
    t0 = np.asarray(t["row"], np.float64)[:n]
    model = train(config, mesh=mesh)
    w, _ = ref.ials(rows, t0, None, 2, ALPHA, 0.05, reg_exponent=1.0)
    assert _rel(model.row_table, w) < 1e-4
    assert model.col_table is model.row_table


def test_step_compiles_once_per_side(dataset, tmp_path):
    data_dir, _ = dataset
    mesh = make_mesh()
    # a spec no other test uses
    config = _config(data_dir, str(tmp_path / "m"), epochs=3, cg_iters=13)
    with compilations() as compiled:
        first = train(config, mesh=mesh)
    assert compiled.count("_step") == 2  # the row side, the column side
    # other objective weights (alpha, lambda, nu) reuse the compiled steps, and do take effect
    other = dataclasses.replace(
        config, model_dir=str(tmp_path / "m2"), alpha=0.4321, reg=0.7, reg_exponent=0.5
    )
    with compilations() as compiled:
        second = train(other, mesh=mesh)
    assert _rel(second.row_table, first.row_table) > 1e-2
    assert compiled.count("_step") == 0


def test_fold_in_matches_reference(dataset, tmp_path):
    data_dir, rows = dataset
    mesh = make_mesh()
    model = train(_config(data_dir, str(tmp_path / "m")), mesh=mesh)
    new_rows = [np.array(rows[5]), np.array([1, 2, 3]), np.array(rows[9]), np.array([], np.int64)]
    # the fold-in on every local device (as on a GPU) and, below, on the first (CPU's default)
    every = dataclasses.replace(model.plan, eval_devices="all_local")
    got = fold_in(model.col_table, new_rows, model.config, every.for_fold_in(model.config))
    target = np.zeros((len(new_rows), model.col_table.shape[1]))
    want = ref.solve_rows(model.col_table, dict(enumerate(new_rows)), target, ALPHA, REG)
    assert got.dtype == np.float32 and got.shape == want.shape
    assert _rel(got, want) < 1e-4
    np.testing.assert_array_equal(got[3], 0)
    # the default CG solver from a zero start converges to the same solution with enough steps
    cg = fold_in(
        model.col_table, new_rows, dataclasses.replace(model.config, solver="cg", cg_iters=20)
    )
    assert _rel(cg, want) < 1e-4


def test_automatic_batch_shape_matches_reference(dataset, tmp_path):
    """`piece_len`/`batch_pieces` 0: per side, 8 ids per piece where 16 would pad by more than
    20%."""
    from alx_trainer.data.dataset import open_dataset
    from alx_trainer.ops.side_runner import plan_side

    data_dir, rows = dataset
    mesh = make_mesh()
    auto = {"piece_len": 0, "batch_pieces": 0, "batch_rows": 0}
    config = _config(
        data_dir, str(tmp_path / "m"), solver="cg", cg_iters=12, epochs=2, layout="owner", **auto
    )
    files = open_dataset(data_dir).files["train"]
    exe = execution.current(config, NUM_ROWS, NUM_COLS, mesh)
    runner = plan_side(
        config,
        exe,
        mesh,
        exe.step_spec(config, NUM_COLS, observed_loss=True),
        lambda: read_chunks(files, 64, NUM_ROWS, NUM_COLS),
        NUM_ROWS,
    )
    ids = sum(len(r) for r in rows.values())
    # rows of at most 46 ids: 16 pads them more
    assert sum(16 * -(-len(r) // 16) for r in rows.values()) > 1.2 * ids
    assert (runner.plan.piece_len, runner.plan.batch_pieces) == (8, 512)
    _train_matches_reference(config, mesh, rows)


def test_training_loss_only_in_the_epochs_asked_for(dataset, tmp_path):
    data_dir, rows = dataset
    mesh = make_mesh()
    config = _config(
        data_dir,
        str(tmp_path / "m"),
        solver="cg",
        cg_iters=12,
        epochs=3,
        layout="owner",
        train_loss_every=2,
    )
    w0, h0 = _initial(config, mesh)
    model = train(config, mesh=mesh)
    assert ["loss_observed" in r for r in model.metrics] == [False, True, False]
    assert ["loss" in r for r in model.metrics] == [False, True, False]
    assert all("loss_unobserved" in r and "loss_reg_col" in r for r in model.metrics)
    w, h = ref.ials(rows, w0, h0, 2, ALPHA, REG)  # epoch 2's loss, with epoch 2's tables
    expected = ref.loss(rows, w, h, ALPHA, REG)
    assert model.metrics[1]["loss_observed"] == pytest.approx(expected["observed"], rel=1e-4)
    w, h = ref.ials(rows, w, h, 1, ALPHA, REG)  # skipping the loss leaves the solves as they were
    assert _rel(model.row_table, w) < 1e-4 and _rel(model.col_table, h) < 1e-4
    never = train(
        _config(
            data_dir,
            str(tmp_path / "n"),
            solver="cg",
            cg_iters=12,
            epochs=1,
            layout="owner",
            train_loss_every=0,
        ),
        mesh=mesh,
    )
    assert "loss_observed" not in never.metrics[-1]


def _csr(rows, num_rows: int) -> tuple[np.ndarray, np.ndarray]:
    lengths = [len(rows.get(r, [])) for r in range(num_rows)]
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    cols = np.concatenate([np.asarray(rows.get(r, []), np.int64) for r in range(num_rows)])
    return indptr, cols


def test_in_memory_matrix_trains_as_the_reference(dataset, tmp_path):
    """A CSR matrix handed to `train` (no files) gives the float64 reference's tables."""
    _, rows = dataset
    mesh = make_mesh()
    config = _config("csr", str(tmp_path / "m"), epochs=2, chunk_rows=7)  # data: only a name here
    w0, h0 = _initial(config, mesh)
    held = in_memory("csr", *_csr(rows, NUM_ROWS), NUM_COLS)
    model = train(config, mesh=mesh, dataset=held)
    w, h = ref.ials(rows, w0, h0, config.epochs, ALPHA, REG)
    assert _rel(model.row_table, w) < 1e-4
    assert _rel(model.col_table, h) < 1e-4


def test_in_memory_host_shares_cover_every_row_once(dataset):
    _, rows = dataset
    held = in_memory("csr", *_csr(rows, NUM_ROWS), NUM_COLS)
    for split, n in (("train", NUM_ROWS), ("train_t", NUM_COLS)):
        seen: dict[int, list[int]] = {}
        for host in range(3):
            for chunk in split_reader(held, split, 4, NUM_ROWS, NUM_COLS, host, 3)():
                for k, r in enumerate(chunk.row_ids.tolist()):
                    assert r not in seen
                    seen[r] = chunk.row(k).tolist()
        expected = rows if split == "train" else ref.transpose(rows)
        assert {r: c for r, c in seen.items() if c} == {
            r: sorted(c) for r, c in expected.items() if c
        }
        assert len(seen) == n


def test_in_memory_rejects_a_bad_row_pointer():
    with pytest.raises(ValueError, match="csr: indptr"):
        in_memory("csr", np.array([0, 3, 2]), np.arange(3), 5)


@pytest.mark.parametrize("solver, nu", [("cholesky", 1.0), ("cholesky", -0.5), ("cg", -0.5)])
def test_alpha_zero_rows_without_links_solve_to_zero(tmp_path, solver, nu):
    """At alpha 0 a row with no link has lambda (0 + 0)^nu (0 or inf): it is solved to 0 (its
    objective's least-norm minimum), the other rows as the float64 reference solves them."""
    indptr = np.array([0, 2, 2, 4, 5])  # row 1 has no link
    cols = np.array([0, 1, 1, 2, 0])
    held = in_memory("alpha0", indptr, cols, 3)
    config = TrainConfig(
        data="alpha0",
        model_dir=str(tmp_path / "m"),
        dim=4,
        epochs=1,
        alpha=0.0,
        reg=0.8,
        reg_exponent=nu,
        solver=solver,
        cg_iters=16,
        init_stddev=0.3,
        progress=False,
        eval_every=0,
    )
    mesh = make_mesh()
    t = init_tables(config, 4, 3, mesh)
    row0, col0 = (np.asarray(t[k], np.float64) for k in ("row", "col"))
    model = train(config, dataset=held, mesh=mesh)
    rows = {0: [0, 1], 2: [1, 2], 3: [0]}
    w = ref.solve_rows(col0[:3], rows, row0[:4], 0.0, 0.8, nu)
    h = ref.solve_rows(w, ref.transpose(rows), col0[:3], 0.0, 0.8, nu)
    w_got, h_got = np.asarray(model.row_table), np.asarray(model.col_table)
    assert np.abs(w_got[1]).max() < 1e-6
    np.testing.assert_allclose(w_got[[0, 2, 3]], w[[0, 2, 3]], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(h_got, h, rtol=1e-4, atol=1e-5)
