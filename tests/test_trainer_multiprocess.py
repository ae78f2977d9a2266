"""2 processes x 4 CPU devices (jax.distributed on 127.0.0.1, gloo) give the tables of 1 process x
8."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import numpy as np

from alx_trainer.config import TrainConfig
from alx_trainer.model import load_model
from alx_trainer.ops.mesh import make_mesh
from alx_trainer.train import train

import reference_ials as ref
from conftest import REPO

ARGS = [
    "--dim",
    "6",
    "--epochs",
    "2",
    "--solver",
    "cg",
    "--cg_iters",
    "4",
    "--piece_len",
    "4",
    "--batch_pieces",
    "8",
    "--batch_rows",
    "4",
    "--no-progress",
    "--eval_every",
    "0",
    "--alpha",
    "0.5",
    "--reg",
    "0.8",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_equal_one_process(tmp_path):
    # 3 shards: host 0 reads two, host 1 one, so host 1 pads with empty steps; rows 2 and 11 are
    # long.
    rows = ref.random_rows(5, 40, 70, max_len=12, long_rows=[2, 11])
    data_dir = ref.write_dataset(str(tmp_path / "data"), rows, 40, 70, shards=3)
    multi_dir = str(tmp_path / "multi")
    env = dict(
        os.environ,
        XLA_FLAGS="--xla_force_host_platform_device_count=4",
        JAX_PLATFORMS="cpu",
        PYTHONPATH=str(REPO),
    )
    port = _free_port()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "alx_trainer",
                "train",
                "--data",
                data_dir,
                "--model_dir",
                multi_dir,
                *ARGS,
                "--distributed",
                "--coordinator_address",
                f"127.0.0.1:{port}",
                "--num_processes",
                "2",
                "--process_id",
                str(i),
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    outputs = [p.communicate(timeout=240)[0] for p in procs]
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, out[-3000:]
        assert "on 8 device(s) in 2 process(es)" in out, out[-3000:]

    config = TrainConfig(
        data=data_dir,
        model_dir=str(tmp_path / "single"),
        dim=6,
        epochs=2,
        solver="cg",
        cg_iters=4,
        piece_len=4,
        batch_pieces=8,
        batch_rows=4,
        progress=False,
        eval_every=0,
        alpha=0.5,
        reg=0.8,
    )
    single = train(config, mesh=make_mesh())
    multi = load_model(multi_dir)
    assert multi.epoch == 2
    for a, b in ((multi.row_table, single.row_table), (multi.col_table, single.col_table)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5 * np.abs(b).max())
