"""The benchmarks' `--help`: whole sentences, and the subcommands docs/benchmarks.md lists."""

import subprocess
import sys

import pytest

from benchmarks.core.paths import REPO


def help_text(module: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{module}", *args, "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return " ".join(done.stdout.split())


def test_gpu_profile_description_is_whole():
    text = help_text("gpu_profile")
    assert "one warm training epoch and of one batch of exact top K" in text
    assert "Pallas CG kernel's first compile." in text


@pytest.mark.parametrize(
    ("module", "sub", "flag"),
    [("trainer_profile", "memory", "--data"), ("reader_speed", "phases", "--data")],
)
def test_help_names_the_subcommand_and_it_answers(module, sub, flag):
    assert f"python -m benchmarks.{module} {sub}" in help_text(module)
    assert flag in help_text(module, sub)
