"""The small ones of issue 44: Ctrl-C at any moment is one line and exit 130; a `--data` that is
neither a directory nor a prepared TFDS name, and a `train --model_dir` in the dataset, are one
line naming them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from alx_cli import run_cli

from tests.guard_data import small_dataset, small_model

from conftest import REPO


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    base = tmp_path_factory.mktemp("guard_cli")
    data = small_dataset(base)
    small_model(data, base / "model")
    return base


@pytest.mark.parametrize("delay", [0.2, 0.6, 1.5, 3.0, 6.0])
def test_ctrl_c_at_any_moment_is_one_line_and_130(work, delay):
    # `predict --rows -` waits on stdin once loaded: Ctrl-C finds it importing, loading or waiting
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "alx_trainer",
            "predict",
            "--data",
            str(work / "data"),
            "--model_dir",
            str(work / "model"),
            "--rows",
            "-",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    lines = [line for line in err.splitlines() if line.strip()]
    assert proc.returncode == 130, err
    assert out == "" and len(lines) == 1 and lines[0].endswith(": interrupted"), err


@pytest.mark.parametrize("name", ["foo/bar", "web_graph/nonexistent"])
def test_data_neither_a_directory_nor_a_tfds_name_is_one_line(work, name):
    pytest.importorskip("tensorflow_datasets")
    rc, out, err = run_cli(["eval", "--data", name, "--model_dir", str(work / "model")])
    assert rc == 1 and out == "" and len(err.strip().splitlines()) == 1, err
    line = err.strip()
    assert line.startswith(f"alx_trainer eval: error: --data {name}: no such dataset directory")
    assert line.count("(") == line.count(")") and "closely match" not in line


@pytest.mark.parametrize("where", ["", "model"])
def test_train_model_dir_in_the_dataset_is_refused(work, where):
    data = work / "data"
    before = sorted(os.listdir(data))
    model_dir = data / where if where else data
    rc, out, err = run_cli(
        ["train", "--data", str(data), "--model_dir", str(model_dir), "--dim", "4", "--no-progress"]
    )
    lines = [line for line in err.splitlines() if "error" in line]
    assert rc == 1 and len(lines) == 1, err
    verb = "is inside" if where else "is"
    assert f"--model_dir {model_dir} {verb} the dataset directory --data {data}" in lines[0]
    assert sorted(os.listdir(data)) == before
