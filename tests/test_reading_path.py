"""The path a reader follows from `python -m alx_trainer train --data DIR` to the first epoch
stays short: the trainer modules with a function called on the way, counted in a fresh process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from webgraph_contract import synthetic_matrix

from conftest import REPO

# The trainer's modules with code run between the command line and the first half-epoch's solve
# (the package's __init__ is not one: the import system calls its hook binding a submodule).
MAX_MODULES = 15

PROBE = r"""
import importlib, json, os, sys, threading
root = os.path.join(os.getcwd(), "alx_trainer") + os.sep
seen = set()
done = []

def profile(frame, event, arg):
    code = frame.f_code
    if not done and event == "call" and code.co_filename.startswith(root):
        if code.co_name != "<module>":
            seen.add(os.path.relpath(code.co_filename, os.getcwd()))

def first_epoch(*args, **kwargs):
    done.append(1)
    sys.setprofile(None)
    threading.setprofile(None)
    raise SystemExit(0)

side_runner = importlib.import_module("alx_trainer.ops.side_runner")
train = importlib.import_module("alx_trainer.train")
side_runner.SideRunner.run = first_epoch
train.run_epoch = first_epoch
from alx_trainer.cli import commands
sys.setprofile(profile)
threading.setprofile(profile)
try:
    commands.main_train(sys.argv[1:])
except SystemExit:
    pass
print(json.dumps({"reached": bool(done), "modules": sorted(seen)}))
"""


def test_train_reaches_its_first_epoch_through_few_trainer_modules(tmp_path):
    data = str(tmp_path / "data")
    synthetic_matrix.write_matrix(data, 2000, 800, 20_000, seed=1, num_shards=2)
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    argv = ["--data", data, "--model_dir", str(tmp_path / "m"), "--dim", "8", "--epochs", "1"]
    argv += ["--eval_every", "0", "--no-progress", "--compile_cache", "off"]
    run = subprocess.run(
        [sys.executable, "-c", PROBE, *argv],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.splitlines()[-1])
    assert got["reached"], "the run ended before its first epoch"
    modules = [m for m in got["modules"] if m != os.path.join("alx_trainer", "__init__.py")]
    # the command line, the plan, the dataset, the batches and the runner are all on the path
    for needed in ("cli/commands.py", "execution.py", "data/dataset.py", "ops/side_runner.py"):
        assert os.path.join("alx_trainer", needed) in modules, needed
    assert len(modules) <= MAX_MODULES, modules
