"""What ends a 2-process run (2 x 4 CPU devices, jax.distributed on 127.0.0.1, gloo) before its
last epoch: SIGTERM to one process stops both after the same epoch, checkpointed, with one line."""

from __future__ import annotations

import os
import signal
import time

from two_processes import (
    flag_args,
    free_port,
    long_row_dataset,
    outputs_of,
    start_two_processes,
)

from alx_trainer.model import load_model

FLAGS = {"dim": 4, "epochs": 5000, "solver": "cg", "cg_iters": 2, "eval_every": 0}


def _epochs_logged(model_dir: str) -> int:
    try:
        with open(os.path.join(model_dir, "metrics.jsonl"), encoding="utf-8") as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


def test_sigterm_stops_both_processes_at_one_epoch(tmp_path):
    _, data_dir = long_row_dataset(tmp_path)
    model_dir = str(tmp_path / "model")
    procs = start_two_processes(data_dir, model_dir, flag_args(FLAGS))
    try:
        deadline = time.monotonic() + 180
        while _epochs_logged(model_dir) < 2 and time.monotonic() < deadline:
            assert all(p.poll() is None for p in procs), "a process ended before SIGTERM"
            time.sleep(0.5)
        assert _epochs_logged(model_dir) >= 2, "no epoch trained in 180 s"
        procs[1].send_signal(signal.SIGTERM)
    finally:
        outputs = outputs_of(procs, timeout=90)
    for p, out in zip(procs, outputs):
        assert p.returncode == 128 + signal.SIGTERM, out[-3000:]
        assert "alx_trainer train: stopped after epoch" in out, out[-3000:]
        assert "Traceback" not in out and "Check failure" not in out, out[-3000:]
    stopped = {int(out.split("stopped after epoch ")[1].split()[0]) for out in outputs}
    assert len(stopped) == 1, outputs
    epoch = stopped.pop()
    assert 2 <= epoch < FLAGS["epochs"]
    assert load_model(model_dir).epoch == epoch
    assert _epochs_logged(model_dir) == epoch


def test_duplicate_process_id_ends_within_the_timeout(tmp_path):
    """Both processes given --process_id 0 (the run never has its process 1): each gives up after
    --distributed_timeout with a non-zero exit (JAX ends the join in C++), instead of waiting
    without end."""
    _, data_dir = long_row_dataset(tmp_path)
    args = flag_args({"dim": 4, "epochs": 1, "distributed_timeout": 5})
    started = time.monotonic()
    procs = start_two_processes(data_dir, str(tmp_path / "model"), args, process_ids=(0, 0))
    outputs = outputs_of(procs, timeout=120)
    assert time.monotonic() - started < 100
    for p, out in zip(procs, outputs):
        assert p.returncode not in (0, None), out[-3000:]
        assert "trained" not in out, out[-3000:]


def test_processes_with_different_configs_refuse_with_one_line(tmp_path):
    """--dim 4 in process 0 and 6 in process 1: both refuse before training, with one line naming
    the flag (gloo aborted with `gloo::EnforceNotMet` and a C++ stack trace)."""
    _, data_dir = long_row_dataset(tmp_path)
    model_dir = str(tmp_path / "model")
    flags = {"epochs": 1, "eval_every": 0}
    procs = [
        start_two_processes(data_dir, model_dir, flag_args({**flags, "dim": dim}), (i,), port)[0]
        for port in [free_port()]
        for i, dim in ((0, 4), (1, 6))
    ]
    outputs = outputs_of(procs, timeout=120)
    for p, out in zip(procs, outputs):
        assert p.returncode == 1, out[-3000:]
        lines = [line for line in out.splitlines() if line.strip()]
        assert len(lines) == 1, out[-3000:]
        assert "differ in --dim: " in lines[0], lines[0]
        assert "only --process_id differs" in lines[0], lines[0]
