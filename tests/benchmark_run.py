"""Shared by the benchmarks' end-to-end tests: one toy run of a benchmark, as a user runs it."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from typing import Any

from conftest import REPO


def toy_run(module: str, tmp_path: pathlib.Path, *flags: str) -> tuple[dict[str, Any], str]:
    """`python -m MODULE FLAGS` on one CPU device (less to compile), with its work folder and JSON
    under `tmp_path` and no wheels to install; asserts it exits 0; its JSON report and stdout."""
    out = tmp_path / "figures.json"
    places = ["--work", tmp_path / "work", "--json", out, "--wheels", tmp_path / "none"]
    run = subprocess.run(
        [sys.executable, "-m", module, *flags, *map(str, places)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        env=dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1"),
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return json.loads(out.read_text()), run.stdout
