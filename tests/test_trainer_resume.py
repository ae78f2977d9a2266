"""Resume after `kill -9`: the final tables equal those of an uninterrupted run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np

from alx_trainer import checkpoint
from alx_trainer.cli.dataclass_flags import parse_dataclass_args
from alx_trainer.config import TrainConfig
from alx_trainer.model import load_model
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
