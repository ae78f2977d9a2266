"""`python -m alx_trainer COMMAND` ends once its exit handlers have run, without the interpreter's
teardown (`cli.common.end_process`), and loses nothing by it: its output, its files and its exit
status are those of a run that tore down."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import reference_ials as ref
from conftest import REPO

# Imported at start-up (sitecustomize): says on stderr whether the exit handlers ran and whether
# the interpreter tore its modules down (an object's __del__ at shutdown).
WATCH = """
import atexit, os

atexit.register(lambda: os.write(2, b"EXIT-HANDLERS\\n"))


class _Teardown:
    def __del__(self):
        os.write(2, b"TEARDOWN\\n")


_watch = _Teardown()
"""


def _command(tmp_path, *argv: str) -> subprocess.CompletedProcess:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(WATCH)
    env = dict(
        os.environ,
        PYTHONPATH=f"{site}{os.pathsep}{REPO}",
        XLA_FLAGS="--xla_force_host_platform_device_count=1",
    )
    return subprocess.run(
        [sys.executable, "-m", "alx_trainer", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_commands_end_after_their_exit_handlers_without_teardown(tmp_path):
    rows = ref.random_rows(2, 30, 20, max_len=6)
    test = {r: (rows[r][:1], rows[r][1:]) for r in range(6) if len(rows[r]) > 1}
    data = ref.write_dataset(str(tmp_path / "data"), rows, 30, 20, test=test)
    model = str(tmp_path / "m")
    flags = ["--data", data, "--model_dir", model, "--compile_cache", "off"]
    done = _command(tmp_path, "train", *flags, "--dim", "4", "--epochs", "2", "--no-progress")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "trained 2 epoch(s)" in done.stdout and "phases: " in done.stderr
    assert "EXIT-HANDLERS" in done.stderr and "TEARDOWN" not in done.stderr
    with open(os.path.join(model, "metrics.jsonl")) as f:
        assert [json.loads(line)["epoch"] for line in f] == [1, 2]
    out = tmp_path / "eval.json"
    done = _command(tmp_path, "eval", *flags[:4], "--output", str(out), "--no-progress")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "recall@20" in done.stdout and "TEARDOWN" not in done.stderr
    assert json.loads(out.read_text())["recall@20"] >= 0
    # a failure keeps its status and its one line
    done = _command(tmp_path, "eval", "--data", data, "--model_dir", str(tmp_path / "none"))
    assert done.returncode == 1 and "model directory not found" in done.stderr
    assert "EXIT-HANDLERS" in done.stderr and "TEARDOWN" not in done.stderr
    # a caller of `main` (not the command's own process) tears down as before
    env = dict(os.environ, PYTHONPATH=f"{tmp_path / 'site'}{os.pathsep}{REPO}")
    code = "import sys; from alx_trainer.__main__ import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run(
        [sys.executable, "-c", code, "eval", "--data", data, "--model_dir", model, "--no-progress"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and "TEARDOWN" in done.stderr, done.stderr[-3000:]
