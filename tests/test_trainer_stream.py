"""'owner' layout with `stream_batches`: dense batches built from the TFRecords each half-epoch give
the
in-memory path's tables (one device, and one thread per CPU device), with and without bfloat16
storage."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest

from alx_trainer import execution
from alx_trainer.config import TrainConfig
from alx_trainer.data.dataset import open_dataset, read_chunks
from alx_trainer.execution import make_mesh
from alx_trainer.model import Model
from alx_trainer.ops import batch_sources
from alx_trainer.ops.side_runner import plan_side
from alx_trainer.train import train
from webgraph_contract import dataset_reader, synthetic_matrix


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    # power-law rows and columns: with 8 pieces of 4 ids per batch, the busiest rows take the
    # long-row path
    out = str(tmp_path_factory.mktemp("synthetic") / "data")
    synthetic_matrix.write_matrix(out, 400, 150, 6000, seed=3, num_shards=3)
    return out


def _train(data: str, model_dir: str, devices: int, **overrides) -> Model:
    config = TrainConfig(
        data=data,
        model_dir=model_dir,
        dim=8,
        epochs=2,
        alpha=0.1,
        reg=1.0,
        layout="owner",
        piece_len=4,
        batch_pieces=8,
        steps_per_call=3,
        chunk_rows=64,
        eval_every=0,
        progress=False,
        **overrides,
    )
    return train(config, mesh=make_mesh(jax.devices()[:devices]))


@pytest.mark.parametrize("devices", [1, 2])
def test_streamed_batches_give_the_in_memory_tables(matrix, tmp_path, devices):
    if devices == 2 and not execution.per_core_applies(jax.devices()[:2]):
        pytest.skip("one thread per device needs 2 cores")
    held = _train(matrix, str(tmp_path / "held"), devices)
    streamed = _train(matrix, str(tmp_path / "streamed"), devices, stream_batches=True)
    np.testing.assert_allclose(streamed.row_table, held.row_table, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(streamed.col_table, held.col_table, rtol=1e-5, atol=1e-6)
    for a, b in zip(streamed.metrics, held.metrics):
        assert a["rows_solved"] == b["rows_solved"] == 400 and a["cols_solved"] == b["cols_solved"]
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)


def test_streaming_runner_holds_only_the_long_rows(matrix):
    config = TrainConfig(
        data=matrix,
        model_dir="unused",
        dim=8,
        layout="owner",
        piece_len=4,
        batch_pieces=8,
        stream_batches=True,
        progress=False,
    )
    dataset = open_dataset(config.data)
    mesh = make_mesh(jax.devices()[:1])
    reader = functools.partial(read_chunks, dataset.files["train"], config.chunk_rows, 400, 150)
    exe = execution.current(config, 400, 150, mesh)
    runner = plan_side(config, exe, mesh, exe.step_spec(config, 150, True), reader, 400)
    # normal batches are built as they run
    assert isinstance(runner.source, batch_sources.OwnerStream)
    # the long rows are kept from the planning pass: every id of every row with more than 8 x 4 ids,
    # once
    rows = [(int(r), list(c)) for r, c, _ in dataset_reader.read_split(matrix, "train")]
    long = {r: c for r, c in rows if len(c) > 8 * 4}
    kept = list(runner.source.long_calls())
    assert long and runner.plan.long_steps == sum(len(b) for b in kept) > 0  # one device
    held: dict[int, list] = {}
    for batch in kept:
        for owner, ids in zip(batch.owner.tolist(), batch.ids.reshape(len(batch.owner), -1)):
            held.setdefault(owner, []).extend(int(i) for i in ids if i >= 0)
    assert {r: sorted(c) for r, c in held.items()} == {
        r: sorted(int(x) for x in c) for r, c in long.items()
    }


def test_bfloat16_storage_streamed_stays_close_to_float32(matrix, tmp_path):
    full = _train(matrix, str(tmp_path / "f32"), 1, table_dtype="float32")
    bf16 = _train(matrix, str(tmp_path / "bf16"), 1, table_dtype="bfloat16", stream_batches=True)
    scale = np.abs(full.row_table).max()
    # bfloat16 keeps ~3 significant digits
    assert np.abs(bf16.row_table - full.row_table).max() < 0.05 * scale
    assert bf16.metrics[-1]["loss"] == pytest.approx(full.metrics[-1]["loss"], rel=0.02)
