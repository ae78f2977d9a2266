"""Shared by the two-process tests: a 3-shard dataset with long rows, and `alx_trainer train`
launched as 2 processes x 4 CPU devices (jax.distributed on 127.0.0.1, gloo)."""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys

import numpy as np

from alx_trainer.model import Model, load_model

import reference_ials as ref
from conftest import REPO

N_ROWS, N_COLS = 40, 70


def long_row_dataset(tmp_path: pathlib.Path) -> tuple[dict[int, list[int]], str]:
    """Rows and the 3-shard dataset written from them: host 0 reads two shards, host 1 one (host 1
    pads with empty calls); rows 2 and 11 are longer than a batch, and so are some columns."""
    rows = ref.random_rows(5, N_ROWS, N_COLS, max_len=12, long_rows=[2, 11])
    return rows, ref.write_dataset(str(tmp_path / "data"), rows, N_ROWS, N_COLS, shards=3)


def flag_args(flags: dict[str, object]) -> list[str]:
    """`--name=value` command-line arguments for TrainConfig fields."""
    return [f"--{k}={v}" for k, v in flags.items()]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_two_processes(
    data_dir: str,
    model_dir: str,
    args: list[str],
    process_ids: tuple[int, ...] = (0, 1),
    port: int = 0,
) -> list[subprocess.Popen]:
    """`alx_trainer train` with `args` started as processes of a 2-process run x 4 CPU devices,
    one per id in `process_ids` (an id twice, or one alone), the coordinator at
    127.0.0.1:`port` (a free one for 0); their stdout and stderr together in a pipe each."""
    # as a user starts them: the command sets the C++ log level itself (an in-process test run
    # with --log_level debug leaves TF_CPP_MIN_LOG_LEVEL=0 in this process's environment)
    env = dict(
        {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"},
        XLA_FLAGS="--xla_force_host_platform_device_count=4",
        JAX_PLATFORMS="cpu",
        PYTHONPATH=str(REPO),
    )
    port = port or free_port()
    command = [sys.executable, "-m", "alx_trainer", "train", "--data", data_dir]
    command += ["--model_dir", model_dir, *args, "--no-progress", "--distributed"]
    command += ["--coordinator_address", f"127.0.0.1:{port}", "--num_processes", "2"]
    return [
        subprocess.Popen(
            [*command, "--process_id", str(i)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in process_ids
    ]


def outputs_of(procs: list[subprocess.Popen], timeout: float) -> list[str]:
    """The processes' outputs once they exit (a process still running after `timeout` seconds is
    killed, and the test fails)."""
    try:
        return [p.communicate(timeout=timeout)[0] for p in procs]
    finally:  # a hung process (waiting for the other) is no test's leftover
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def train_in_two_processes(
    data_dir: str, model_dir: str, args: list[str], timeout: float
) -> list[str]:
    """Runs `alx_trainer train` with `args` as 2 processes x 4 CPU devices; asserts both exit 0
    and report 8 devices in 2 processes; returns their outputs (stdout and stderr)."""
    procs = start_two_processes(data_dir, model_dir, args)
    outputs = outputs_of(procs, timeout)
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, out[-3000:]
        assert "on 8 device(s) in 2 process(es)" in out, out[-3000:]
    return outputs


def assert_same_tables(multi_dir: str, single: Model, epochs: int) -> None:
    """The model saved in `multi_dir` is at `epochs` with the tables of `single`."""
    multi = load_model(multi_dir)
    assert multi.epoch == epochs
    for a, b in ((multi.row_table, single.row_table), (multi.col_table, single.col_table)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5 * np.abs(b).max())
