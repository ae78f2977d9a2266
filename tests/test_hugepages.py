"""`python -m alx_trainer train` restarts itself once with glibc's huge-page tunable (where THP is
`madvise`)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from alx_trainer.cli import hugepages


def _thp_madvise() -> bool:
    try:
        return "[madvise]" in open(hugepages.THP_MODE).read()
    except OSError:
        return False


def test_an_explicit_glibc_tunables_is_respected(monkeypatch):
    monkeypatch.setenv("GLIBC_TUNABLES", "")
    assert not hugepages.wanted()


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or not _thp_madvise(), reason="needs THP in madvise mode"
)
def test_restart_sets_the_tunable_once(tmp_path):
    (tmp_path / "envprint.py").write_text("import os\nprint(os.environ.get('GLIBC_TUNABLES'))\n")
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), *sys.path])
    code = (
        "from alx_trainer.cli import hugepages; hugepages.restart_with_hugepages('envprint', []); "
        "print('not restarted')"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert (
        run.stdout.strip() == hugepages.TUNABLE
    )  # the restarted process has it; the original never printed


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or not _thp_madvise(), reason="needs THP in madvise mode"
)
def test_train_command_still_reports_errors_after_the_restart(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "alx_trainer",
            "train",
            "--data",
            str(tmp_path / "none"),
            "--model_dir",
            str(tmp_path / "m"),
            "--dim",
            "0",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (
        run.returncode == 2 and "dim: must be positive" in run.stderr
    )  # a bad flag value: usage, exit 2
