"""The accelerator path (`--accelerator on`, forced on CPU devices) in 2 processes x 4 devices
(jax.distributed on 127.0.0.1, gloo) gives the tables of 1 process x 8, and both the float64
reference's (`reference_ials`)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from alx_trainer.config import TrainConfig
from alx_trainer.model import init_tables, load_model
from alx_trainer.ops.mesh import make_mesh
from alx_trainer.train import train

import reference_ials as ref
from conftest import REPO

FLAGS = {
    "dim": 6,
    "epochs": 2,
    "solver": "cholesky",
    "init_stddev": 0.3,
    "piece_len": 4,
    "batch_pieces": 8,
    "batch_rows": 4,
    "eval_every": 0,
    "alpha": 0.5,
    "reg": 0.8,
    "accelerator": "on",
    "calls_per_half_epoch": 2,
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("resident", ["on", "off"])
def test_two_processes_equal_one_process_on_the_accelerator_path(tmp_path, resident):
    # 3 shards: host 0 reads two, host 1 one (host 1 pads with empty calls); rows 2 and 11 are
    # longer
    # than a batch (the long-row calls), and so are some columns.
    rows = ref.random_rows(5, 40, 70, max_len=12, long_rows=[2, 11])
    data_dir = ref.write_dataset(str(tmp_path / "data"), rows, 40, 70, shards=3)
    multi_dir = str(tmp_path / "multi")
    env = dict(
        os.environ,
        XLA_FLAGS="--xla_force_host_platform_device_count=4",
        JAX_PLATFORMS="cpu",
        PYTHONPATH=str(REPO),
    )
    flags = [f"--{k}={v}" for k, v in {**FLAGS, "resident_batches": resident}.items()]
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
                *flags,
                "--no-progress",
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
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, out[-3000:]
        assert "on 8 device(s) in 2 process(es)" in out, out[-3000:]

    config = TrainConfig(
        data=data_dir,
        model_dir=str(tmp_path / "single"),
        progress=False,
        **{**FLAGS, "resident_batches": resident},
    )
    mesh = make_mesh()
    single = train(config, mesh=mesh)
    multi = load_model(multi_dir)
    assert multi.epoch == 2
    for a, b in ((multi.row_table, single.row_table), (multi.col_table, single.col_table)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5 * np.abs(b).max())
    start = init_tables(config, 40, 70, mesh)
    w0, h0 = (np.asarray(start[k], np.float64)[:n] for k, n in (("row", 40), ("col", 70)))
    w, h = ref.ials(rows, w0, h0, config.epochs, config.alpha, config.reg)
    for got, want in ((multi.row_table, w), (multi.col_table, h)):
        assert np.linalg.norm(got - want) < 1e-4 * np.linalg.norm(want)
