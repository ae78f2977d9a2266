"""`ruff check` (rules in pyproject.toml) passes on the whole repository."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO


def test_ruff_check_is_clean():
    run = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "."],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
