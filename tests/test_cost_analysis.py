"""XLA's cost analysis of every program of an epoch (`ops.cost`), and the one-call half-epoch's
launches counted in a profiler trace on CPU devices."""

from __future__ import annotations

import logging

import jax
import numpy as np

from alx_trainer.callbacks import Callback
from alx_trainer.config import TrainConfig
from alx_trainer.data.dataset import Dataset, in_memory
from alx_trainer.execution import make_mesh
from alx_trainer.train import epoch_cost, train
from benchmarks.core.trace import launches as trace_launches  # the benchmarks' launch count

DIM = 16


def _matrix() -> Dataset:
    rng = np.random.default_rng(5)
    lengths = rng.integers(1, 20, 300)
    lengths[[3, 77]] = 150  # longer than a batch of 8 x 16 ids
    cols = np.concatenate([rng.choice(200, n, replace=False) for n in lengths])
    return in_memory("m", np.concatenate([[0], np.cumsum(lengths)]), cols, 200)


def _config(tmp_path, **kw) -> TrainConfig:
    base = {
        "data": "m",
        "model_dir": str(tmp_path / "m"),
        "dim": DIM,
        "epochs": 3,
        "progress": False,
        "eval_every": 0,
        "checkpoint_every": 0,
        "accelerator": "on",
        "resident_batches": "on",
        "piece_len": 8,
        "batch_pieces": 16,
        "batch_rows": 8,
    }
    base.update(kw)
    return TrainConfig(**base)


def test_every_program_of_an_epoch_has_its_bytes_and_flops(tmp_path):
    data = _matrix()
    found = epoch_cost(_config(tmp_path), data, make_mesh(jax.devices()[:1]))
    names = {(p["side"], p["name"].split(" ")[0]) for p in found["programs"]}
    assert {
        ("row", "normal"),
        ("row", "long"),
        ("row", "gramian"),
        ("col", "normal"),
        ("col", "gramian"),
    } <= names
    assert all(p["bytes_accessed"] > 0 and p["times"] >= 1 for p in found["programs"]), found[
        "programs"
    ]
    assert all(p["flops"] > 0 for p in found["programs"] if p["name"] != "replicate"), found[
        "programs"
    ]
    # a normal batch at least reads each of its ids' fixed rows once (16 x 8 ids of DIM float32)
    batch = next(p for p in found["programs"] if p["name"] == "normal batch")
    assert batch["bytes_accessed"] >= 16 * 8 * DIM * 4
    total = sum(p["bytes_accessed"] * p["times"] for p in found["programs"])
    assert found["bytes_per_epoch"] == total


def test_the_training_log_reports_them_at_debug_level(tmp_path, caplog):
    with caplog.at_level(logging.DEBUG, logger="alx_trainer"):
        train(
            _config(tmp_path, epochs=1),
            mesh=make_mesh(jax.devices()[:1]),
            dataset=_matrix(),
            tables=False,
        )
    text = caplog.text
    assert (
        "row side, normal batch" in text
        and "col side, gramian" in text
        and "GB accessed per epoch" not in text
    )
    assert "per epoch and device" in text


class _Trace(Callback):
    def __init__(self, path: str) -> None:
        self.path = path

    def on_epoch_end(self, run, epoch, record) -> None:
        if epoch == 1:
            jax.profiler.start_trace(self.path)
        elif epoch == 2:
            jax.profiler.stop_trace()


def test_a_resident_epoch_is_one_launch(tmp_path):
    """Epoch 2 (programs compiled, gramians kept): every launch counted in the profiler trace, and
    the cost analysis's launches per epoch equal to that count."""
    for devices, layout in ((1, "auto"), (8, "replicated")):
        trace = str(tmp_path / f"trace{devices}")
        config = _config(tmp_path, model_dir=str(tmp_path / f"m{devices}"), layout=layout)
        mesh = make_mesh(jax.devices()[:devices])
        train(config, mesh=mesh, dataset=_matrix(), tables=False, callbacks=[_Trace(trace)])
        launches = trace_launches(trace)
        # both half-epochs, everything launched
        assert sum(launches.values()) == 1, launches
        found = epoch_cost(config, _matrix(), mesh)
        assert found["launches_per_epoch"] == sum(launches.values()), (found, launches)
