"""The benchmarks' child processes: a child's peak memory is its own, whatever its parent holds;
implicit's GPU wheels are installed only where wanted and where they fit; skipping says one line."""

import argparse
import pathlib
import sys

import numpy as np
import pytest

from benchmarks.core import children
from benchmarks.core.children import run_child

# 8 MiB
SMALL = "import numpy as np; a = np.ones(8 << 17); print('done')"


def test_child_peak_is_not_floored_at_the_parents_peak():
    # 600 MiB, touched: this process's high-water mark
    held = np.ones(600 << 17)
    held += 1
    child = run_child([sys.executable, "-c", SMALL])
    assert child.stdout.strip() == "done" and child.returncode == 0
    # numpy and 8 MiB, not the parent's 600 MiB
    assert child.peak_gib < 0.3, child.peak_gib
    assert child.cpu_s > 0
    del held


def test_child_peak_counts_what_the_child_allocates():
    # 400 MiB
    big = "import numpy as np; a = np.ones(400 << 17); a += 1"
    assert run_child([sys.executable, "-c", big]).peak_gib > 0.38


def test_child_failure_and_signal_keep_their_status():
    failed = run_child([sys.executable, "-c", "import sys; sys.exit(3)"], check=False)
    assert failed.returncode == 3
    killed = run_child(
        [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"],
        check=False,
    )
    assert killed.returncode == -9


def test_child_reports_its_own_peak_from_inside():
    code = "from benchmarks.core.children import own_peak_gib; print(own_peak_gib())"
    held = np.ones(600 << 17)
    held += 1
    assert float(run_child([sys.executable, "-c", code]).stdout) < 0.3
    del held


def wheel_args(tmp_path, implicit: str, tag: str = "cp399-cp399"):
    wheels = tmp_path / "whl"
    wheels.mkdir(exist_ok=True)
    (wheels / f"implicit-0.7.3-{tag}-manylinux2014_x86_64.whl").write_bytes(b"not a wheel")
    return argparse.Namespace(wheels=str(wheels), site=str(tmp_path / "site"), implicit=implicit)


@pytest.mark.parametrize("implicit", ["cpu", "off"])
def test_cpu_runs_install_no_wheels_and_say_nothing(tmp_path, capfd, implicit):
    env = children.children_env(wheel_args(tmp_path, implicit), gpu=True)
    assert not (tmp_path / "site").exists()
    assert str(tmp_path / "site") not in env.get("PYTHONPATH", "")
    assert capfd.readouterr() == ("", "")


def test_no_gpu_installs_no_wheels(tmp_path, capfd):
    children.children_env(wheel_args(tmp_path, "auto"), gpu=False)
    assert not (tmp_path / "site").exists() and capfd.readouterr() == ("", "")
    children.children_env(wheel_args(tmp_path, "gpu"), gpu=False)
    out, err = capfd.readouterr()
    assert not (tmp_path / "site").exists() and err == ""
    assert out.count("\n") == 1 and "no NVIDIA GPU" in out


def test_wheels_for_another_python_are_skipped_in_one_line(tmp_path, capfd):
    children.children_env(wheel_args(tmp_path, "auto"), gpu=True)
    out, err = capfd.readouterr()
    assert not (tmp_path / "site").exists() and err == "" and "ERROR" not in out
    assert out.count("\n") == 1 and "does not fit this Python" in out


def test_wheels_that_fit_are_installed_and_pips_error_is_one_line(tmp_path, capfd):
    # fits any Python; the file is broken
    args = wheel_args(tmp_path, "gpu", tag="py3-none")
    assert children.wheel_plan(pathlib.Path(args.wheels), "gpu", True)[0]
    env = children.children_env(args, gpu=True)
    out, err = capfd.readouterr()
    assert err == "" and out.count("\n") == 1 and out.startswith("wheels: install into")
    assert "PYTHONPATH" not in env or str(tmp_path / "site") not in env["PYTHONPATH"]
