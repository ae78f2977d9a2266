"""The accelerator path forced on CPU devices (`accelerator='on'`): exact tables, few calls, no
input copies.

Resident and streamed batches are checked against the float64 reference (`reference_ials`), the
per-core path's own test matrix included (rows longer than a batch, a row filling one exactly).
Calls are counted in JAX's profiler trace (each program launch, whatever made it), host-to-device
copies by `jax.transfer_guard_host_to_device('disallow_explicit')`, which makes any of them an
error, and reads of device arrays on the host by counting `jax.Array._value`.
"""

from __future__ import annotations

import functools
import sys

import jax
import numpy as np
import pytest
from jax._src.array import ArrayImpl

from alx_trainer import compile_cache, execution
from alx_trainer.callbacks import Callback
from alx_trainer.config import TrainConfig
from alx_trainer.execution import make_mesh
from alx_trainer.model import init_tables
from alx_trainer.ops import kernels
from alx_trainer.train import train
from benchmarks.core.trace import launches as trace_launches  # the benchmarks' launch count

import reference_ials as ref

NUM_ROWS, NUM_COLS = 60, 90
ALPHA, REG = 0.5, 0.8


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    rows = ref.random_rows(0, NUM_ROWS, NUM_COLS, max_len=14, long_rows=[5, 17, 30])
    rows[9] = sorted(np.random.default_rng(1).choice(NUM_COLS, size=32, replace=False).tolist())
    path = str(tmp_path_factory.mktemp("accelerator") / "data")
    ref.write_dataset(path, rows, NUM_ROWS, NUM_COLS, shards=3)
    return path, rows


def _config(data_dir: str, model_dir: str, **kw) -> TrainConfig:
    # 4 x 8 = 32 ids per batch: rows 5, 17 and 30 (46 ids) are long rows
    base = {
        "data": data_dir,
        "model_dir": model_dir,
        "dim": 6,
        "epochs": 2,
        "alpha": ALPHA,
        "reg": REG,
        "solver": "cholesky",
        "progress": False,
        "eval_every": 0,
        "init_stddev": 0.3,
        "piece_len": 4,
        "batch_pieces": 8,
        "batch_rows": 4,
        "accelerator": "on",
        "checkpoint_every": 0,
    }
    base.update(kw)
    return TrainConfig(**base)


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("resident", ["on", "off"])
@pytest.mark.parametrize("layout,devices", [("sharded", 8), ("replicated", 8), ("auto", 1)])
def test_resident_and_streamed_batches_match_float64_reference(
    dataset, tmp_path, resident, layout, devices
):
    data_dir, rows = dataset
    mesh = make_mesh(jax.devices()[:devices])
    config = _config(data_dir, str(tmp_path / "m"), layout=layout, resident_batches=resident)
    t = init_tables(config, NUM_ROWS, NUM_COLS, mesh)
    w0, h0 = (
        np.asarray(t["row"], np.float64)[:NUM_ROWS],
        np.asarray(t["col"], np.float64)[:NUM_COLS],
    )
    model = train(config, mesh=mesh)
    w, h = ref.ials(rows, w0, h0, config.epochs, ALPHA, REG)
    assert _rel(model.row_table, w) < 1e-4 and _rel(model.col_table, h) < 1e-4
    expected = ref.loss(rows, model.row_table, model.col_table, ALPHA, REG)
    assert model.metrics[-1]["loss_observed"] == pytest.approx(expected["observed"], rel=1e-4)
    assert model.metrics[-1]["rows_solved"] == len(rows)


def test_cg_with_explicit_matrices_in_bfloat16_products_stays_close(dataset, tmp_path):
    """The matrix-unit form (explicit normal matrices, bfloat16 products summed in float32, CG in
    float32)."""
    data_dir, rows = dataset
    mesh = make_mesh()
    config = _config(
        data_dir,
        str(tmp_path / "m"),
        solver="cg",
        cg_iters=20,
        cg_form="explicit",
        matmul_precision="bfloat16",
    )
    t = init_tables(config, NUM_ROWS, NUM_COLS, mesh)
    w0, h0 = (
        np.asarray(t["row"], np.float64)[:NUM_ROWS],
        np.asarray(t["col"], np.float64)[:NUM_COLS],
    )
    model = train(config, mesh=mesh)
    w, h = ref.ials(rows, w0, h0, config.epochs, ALPHA, REG)
    # bfloat16 keeps 8 bits of each product's inputs: about 2^-8 relative per entry
    assert _rel(model.row_table, w) < 2e-2 and _rel(model.col_table, h) < 2e-2


class _Epoch2(Callback):
    """Over epoch 2 (from the end of epoch 1 to the end of epoch 2): a profiler trace and, with
    `guard`, host-to-device copies made errors (for every thread)."""

    def __init__(self, trace_dir: str, guard: bool) -> None:
        self.trace_dir, self.guard = trace_dir, guard

    def on_epoch_end(self, run, epoch, record) -> None:
        if epoch == 1:
            if self.guard:
                jax.config.update("jax_transfer_guard_host_to_device", "disallow_explicit")
            jax.profiler.start_trace(self.trace_dir)
        elif epoch == 2:
            jax.profiler.stop_trace()
            jax.config.update("jax_transfer_guard_host_to_device", "allow")

    def on_train_end(self, run) -> None:
        jax.config.update("jax_transfer_guard_host_to_device", "allow")


class _HostReads(Callback):
    """Device arrays read on the host (`np.asarray`, `float`, `jax.device_get`: each goes through
    `jax.Array._value`) from epoch 2's row side's start to its column side's end: the epoch's work,
    before its record is made. (JAX's device-to-host transfer guard does not see CPU devices.)"""

    def __init__(self, monkeypatch) -> None:
        self.reads, self.counting = 0, False
        value = ArrayImpl._value

        def counted(array):
            self.reads += self.counting
            return value.fget(array)

        monkeypatch.setattr(ArrayImpl, "_value", property(counted))

    def on_half_epoch_begin(self, run, epoch, side, total_steps) -> None:
        self.counting = self.counting or (epoch == 2 and side == "row")

    def on_half_epoch_end(self, run, epoch, side) -> None:
        self.counting = self.counting and side != "col"


def _count_epoch_gramians(monkeypatch) -> list[int]:
    """The gramians (`kernels._gramian_local`) each trace of the one-call epoch's body computes,
    one entry per trace (the epoch programs made afresh)."""
    counts: list[int] = []
    calls = [0]
    gramian, epoch = kernels._gramian_local, kernels._epoch

    def counted_gramian(table):
        calls[0] += 1
        return gramian(table)

    # (the wrapper keeps `_epoch`'s name: the program's name in the trace)
    @functools.wraps(epoch)
    def counted_epoch(*args):
        before = calls[0]
        out = epoch(*args)
        counts.append(calls[0] - before)
        return out

    monkeypatch.setattr(kernels, "_gramian_local", counted_gramian)
    monkeypatch.setattr(kernels, "_epoch", counted_epoch)
    kernels.make_epoch.cache_clear()
    # traced, not loaded whole from an earlier run's kept executables
    monkeypatch.setattr(compile_cache, "_kept_dir", None)
    return counts


@pytest.mark.parametrize("tied", [False, True])
def test_later_epochs_copy_nothing_and_run_one_call(tmp_path, monkeypatch, tied):
    """Resident batches: an epoch is one call (both half-epochs, their normal and long rows and
    gramians), whatever calls_per_half_epoch says (it bounds the streamed calls), and copies
    nothing to the host until it is done; its tables equal the float64 reference's."""
    n = NUM_ROWS
    rows = ref.random_rows(0, n, n, max_len=14, long_rows=[5, 17, 30])
    data_dir = ref.write_dataset(str(tmp_path / "data"), rows, n, n, shards=3)
    # 16 ids per batch: more batches than calls
    config = _config(
        data_dir,
        str(tmp_path / "m"),
        epochs=3,
        resident_batches="on",
        calls_per_half_epoch=3,
        batch_pieces=4,
        batch_rows=2,
        tied=tied,
    )
    mesh = make_mesh()
    t = init_tables(config, n, n, mesh)
    w0 = np.asarray(t["row"], np.float64)[:n]
    h0 = None if tied else np.asarray(t["col"], np.float64)[:n]
    trace = str(tmp_path / "trace")
    reads = _HostReads(monkeypatch)
    gramians = _count_epoch_gramians(monkeypatch)
    # a copy to the devices would raise
    model = train(config, mesh=mesh, callbacks=[_Epoch2(trace, guard=True), reads])
    assert model.metrics[-1]["rows_solved"] == len(rows)
    launches = trace_launches(trace)
    assert launches == {"jit__epoch": 1}, launches
    # the one-call program computes the gramians of the two tables it solves, not that of the
    # table its row side reads (the loop passes the one it kept)
    assert gramians and all(n == 2 for n in gramians), gramians
    assert reads.reads == 0
    w, h = ref.ials(rows, w0, None if tied else h0, config.epochs, ALPHA, REG)
    assert _rel(model.row_table, w) < 1e-4 and _rel(model.col_table, h) < 1e-4
    if not tied:
        expected = ref.loss(rows, model.row_table, model.col_table, ALPHA, REG)
        assert model.metrics[-1]["loss_observed"] == pytest.approx(expected["observed"], rel=1e-4)
        assert model.metrics[-1]["loss_unobserved"] == pytest.approx(expected["unobserved"], 1e-4)


def test_host_reads_are_counted_where_there_are_some(dataset, tmp_path, monkeypatch):
    """The count of the test above does see host reads: the half-epoch path (the epoch's call split
    in two) reads each half-epoch's loss terms and gramian on the host."""
    data_dir, _ = dataset
    # (the module: `alx_trainer.train` is also the package's function)
    monkeypatch.setattr(sys.modules["alx_trainer.train"], "one_call_epoch", lambda r, c: False)
    config = _config(data_dir, str(tmp_path / "m"), epochs=3, resident_batches="on")
    reads = _HostReads(monkeypatch)
    train(config, mesh=make_mesh(), callbacks=[reads])
    assert reads.reads >= 2


def test_streamed_batches_are_copied_every_epoch(dataset, tmp_path):
    """The guard of the test above does catch input copies: the streamed path makes them."""
    data_dir, _ = dataset
    config = _config(data_dir, str(tmp_path / "m"), epochs=3, resident_batches="off")
    with pytest.raises(Exception, match="host-to-device transfer"):
        train(config, mesh=make_mesh(), callbacks=[_Epoch2(str(tmp_path / "trace"), guard=True)])
    jax.profiler.stop_trace()


@pytest.mark.parametrize("free,copies", [(1 << 40, False), (0, True)])
def test_automatic_residency_follows_the_free_memory(dataset, tmp_path, monkeypatch, free, copies):
    """`resident_batches` 'auto' keeps the batches on the devices only when the free memory
    allows."""
    data_dir, _ = dataset
    monkeypatch.setattr(execution, "free_bytes", lambda device: free)
    config = _config(data_dir, str(tmp_path / "m"), epochs=3, resident_batches="auto")
    guarded = _Epoch2(str(tmp_path / "trace"), guard=True)
    if copies:
        with pytest.raises(Exception, match="host-to-device transfer"):
            train(config, mesh=make_mesh(), callbacks=[guarded])
        jax.profiler.stop_trace()
    else:
        train(config, mesh=make_mesh(), callbacks=[guarded])


def test_matrix_free_forms_take_batches_as_large_as_a_device_needs(tmp_path, monkeypatch):
    """150k ids on one device (a GPU's batch size): the matrix-free CG packs each side into one
    batch cut to its pieces (balanced, not a power of two mostly padding) where the d x d forms
    keep 65,536 ids; the solves do not depend on the batching, so the tables equal those of
    65,536-id batches."""
    from alx_trainer.data import batching

    ids = execution.accelerator_batch_ids
    assert ids(128, False, "gpu") == 1 << 20  # 512 MiB of float32 rows
    assert ids(1024, False, "gpu") == 1 << 17
    assert ids(128, True, "gpu") == 1 << 16  # d x d statistics per row
    assert ids(1 << 14, False, "gpu") == 1 << 16  # never below 65,536
    assert ids(128, False, "cpu") == 1 << 16  # CPU devices: batches that stay in cache
    monkeypatch.setattr(execution, "accelerator_batch_ids", lambda d, s, _: ids(d, s, "gpu"))
    rng = np.random.default_rng(2)
    rows = {r: sorted(rng.choice(2000, 50, replace=False).tolist()) for r in range(3000)}
    data_dir = str(tmp_path / "data")
    ref.write_dataset(data_dir, rows, 3000, 2000, shards=2)
    row_lengths = np.full(3000, 50)
    col_lengths = np.bincount(np.concatenate(list(rows.values())), minlength=2000)
    plans = []
    make_plan = batching.make_plan
    monkeypatch.setattr(
        batching, "make_plan", lambda *a, **kw: plans.append(make_plan(*a, **kw)) or plans[-1]
    )
    tables = {}
    for name, kw in (("auto", {}), ("65536", {"piece_len": 16, "batch_pieces": 4096})):
        plans.clear()
        base = {"solver": "cg", "cg_form": "matvec", "batch_rows": 0, "batch_pieces": 0}
        base.update(epochs=1, piece_len=0)
        config = _config(data_dir, str(tmp_path / name), **{**base, **kw})
        model = train(config, mesh=make_mesh(jax.devices()[:1]))
        tables[name] = (model.row_table, model.col_table)
        for p, side in zip(plans, (row_lengths, col_lengths)):
            slots = p.piece_len * p.batch_pieces
            if name == "auto":  # one batch a side, at most 2% + 64 pieces over its pieces
                pieces = int(np.sum(-(-side // p.piece_len)))
                assert p.steps == 1 and pieces <= p.batch_pieces <= 1.02 * pieces + 64
                assert slots > 1 << 16
            else:
                assert slots == 1 << 16 and p.steps >= 3
    for auto, fixed in zip(tables["auto"], tables["65536"]):
        np.testing.assert_allclose(auto, fixed, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("resident,reads", [("on", 1), ("off", 1 + 3)])
def test_resident_batches_read_each_side_once(dataset, tmp_path, monkeypatch, resident, reads):
    """Resident batches are packed from the rows the planning pass kept: each side's files are
    read once in all; streamed batches read them again once every epoch (3 here; their long rows
    come from the planning pass, not a second read), and train the same tables."""
    data_dir, _ = dataset
    module = sys.modules["alx_trainer.train"]
    opened = {"train": 0, "train_t": 0}
    reader = module.split_reader

    def counting(dataset, split, *args):
        make = reader(dataset, split, *args)

        def counted():
            opened[split] += 1
            return make()

        return counted

    monkeypatch.setattr(module, "split_reader", counting)
    config = _config(data_dir, str(tmp_path / "m"), epochs=3, resident_batches=resident)
    model = train(config, mesh=make_mesh())
    assert opened == {"train": reads, "train_t": reads}, opened
    monkeypatch.setattr(module, "split_reader", reader)
    streamed = train(
        _config(data_dir, str(tmp_path / "s"), epochs=3, resident_batches="off"), mesh=make_mesh()
    )
    np.testing.assert_allclose(model.row_table, streamed.row_table, rtol=1e-5, atol=1e-6)
