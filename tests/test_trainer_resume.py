"""Checkpoints: written shard by shard they read back bit-identical (float32 and bfloat16 tables);
a resumed run continues exactly like an uninterrupted one, after `kill -9` too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from alx_trainer import checkpoint
from alx_trainer.cli.common import parse_dataclass_args
from alx_trainer.config import TrainConfig
from alx_trainer.model import load_model, trim
from alx_trainer.train import train

import reference_ials as ref
from conftest import REPO

EPOCHS = 12


def _command(data_dir: str, model_dir: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "alx_trainer",
        "train",
        "--data",
        data_dir,
        "--model_dir",
        model_dir,
        "--dim",
        "8",
        "--epochs",
        str(EPOCHS),
        "--cg_iters",
        "3",
        "--piece_len",
        "4",
        "--batch_pieces",
        "8",
        "--no-progress",
        "--eval_every",
        "0",
        "--keep_checkpoints",
        "2",
        "--reg",
        "0.5",
    ]


def test_kill_9_then_resume_gives_the_same_tables(tmp_path):
    rows = ref.random_rows(7, 80, 60, max_len=10)
    data_dir = ref.write_dataset(str(tmp_path / "data"), rows, 80, 60)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    killed_dir = str(tmp_path / "killed")
    proc = subprocess.Popen(
        _command(data_dir, killed_dir),
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 600  # a loaded machine takes minutes to start JAX and TensorFlow
    ckpt = os.path.join(killed_dir, checkpoint.CHECKPOINT_SUBDIR)
    while time.time() < deadline and proc.poll() is None:
        if os.path.isdir(ckpt) and any(n.isdigit() and int(n) >= 2 for n in os.listdir(ckpt)):
            break
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL, "training finished before it could be killed"
    done = max(int(n) for n in os.listdir(ckpt) if n.isdigit())
    assert 2 <= done < EPOCHS

    resumed = subprocess.run(
        _command(data_dir, killed_dir), cwd=REPO, env=env, capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    config = parse_dataclass_args(TrainConfig, _command(data_dir, str(tmp_path / "straight"))[4:])
    train(config)  # uninterrupted, in this process (the same 8 virtual devices)
    a, b = load_model(killed_dir), load_model(config.model_dir)
    assert a.epoch == b.epoch == EPOCHS
    np.testing.assert_array_equal(a.row_table, b.row_table)
    np.testing.assert_array_equal(a.col_table, b.col_table)
    # metrics: exactly one record per epoch (those after the checkpoint were recomputed, not
    # doubled)
    epochs = [r["epoch"] for r in a.metrics]
    assert epochs == list(range(1, EPOCHS + 1))


def _bits(values: np.ndarray) -> np.ndarray:
    """The bit patterns of a float table (uint16 of bfloat16, uint32 of float32)."""
    return values.view(np.uint16 if values.dtype.itemsize == 2 else np.uint32)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_checkpoint_reads_back_bit_identical(tmp_path, dtype):
    """Tables sharded over the 8 devices, saved: `resume` (the training path) restores every
    shard with the same bits, `restore_numpy` (`load_model`'s) gives their exact float32
    widening, and `trim` (the tables to the host a shard at a time) gives the same rows."""
    import jax.numpy as jnp

    from alx_trainer.execution import make_mesh
    from alx_trainer.model import table_from_numpy

    mesh = make_mesh()
    rng = np.random.default_rng(5)
    # sizes that are no multiple of the devices: padded tables, trimmed inside a shard
    sizes = {"row": 61, "col": 29}
    values = {k: rng.normal(size=(n, 6)).astype(np.float32) for k, n in sizes.items()}
    tables = {k: table_from_numpy(mesh, v, jnp.dtype(dtype)) for k, v in values.items()}
    saved = {k: np.asarray(t) for k, t in tables.items()}
    model_dir = str(tmp_path / "model")
    meta = {
        "table_shapes": {k: list(t.shape) for k, t in tables.items()},
        "table_dtype": dtype,
        "dataset_fingerprint": "f",
        "config": {"data": "d"},
        "num_rows": sizes["row"],
        "num_cols": sizes["col"],
    }
    mgr = checkpoint.manager(model_dir)
    checkpoint.save(mgr, 3, tables, meta)
    blank = {
        k: table_from_numpy(mesh, np.zeros_like(v), jnp.dtype(dtype)) for k, v in values.items()
    }
    assert checkpoint.resume(mgr, blank, model_dir, "d", "f") == 3
    mgr.close()
    for name, table in blank.items():
        assert table.dtype == jnp.dtype(dtype) and table.sharding == tables[name].sharding
        for shard in table.addressable_shards:
            want = saved[name][shard.index]
            assert np.array_equal(_bits(np.asarray(shard.data)), _bits(want))
    host, got_meta, epoch = checkpoint.restore_numpy(model_dir)
    assert epoch == 3 and got_meta["table_dtype"] == dtype
    for name, n in sizes.items():
        wide = saved[name].astype(np.float32)
        assert host[name].dtype == np.float32
        assert np.array_equal(_bits(host[name]), _bits(wide))
        assert np.array_equal(_bits(trim(tables[name], n)), _bits(wide[:n]))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_resumed_run_continues_like_an_uninterrupted_one(tmp_path, dtype):
    """4 epochs straight and 1 + 3 epochs (a second `train` resuming from the first's
    checkpoint) give tables with the same bits."""
    rows = ref.random_rows(11, 70, 50, max_len=9, long_rows=[3])
    data_dir = ref.write_dataset(str(tmp_path / "data"), rows, 70, 50)

    def config(model_dir: str, epochs: int) -> TrainConfig:
        return TrainConfig(
            data=data_dir,
            model_dir=str(tmp_path / model_dir),
            dim=8,
            epochs=epochs,
            piece_len=4,
            batch_pieces=8,
            table_dtype=dtype,
            eval_every=0,
            progress=False,
            reg=0.5,
        )

    straight = train(config("straight", 4))
    train(config("resumed", 1))
    resumed = train(config("resumed", 4))
    assert resumed.epochs_trained == 3 and straight.epochs_trained == 4
    for a, b in ((straight.row_table, resumed.row_table), (straight.col_table, resumed.col_table)):
        assert np.array_equal(_bits(a), _bits(b))
    assert np.array_equal(_bits(load_model(str(tmp_path / "resumed")).col_table), _bits(b))
