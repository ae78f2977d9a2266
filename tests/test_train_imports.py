"""`alx_trainer train` imports only what it uses: checked in a fresh process after a run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import reference_ials as ref
from conftest import REPO

RUN = """
import json, sys
from alx_trainer.__main__ import main
rc = main(sys.argv[1:])
wanted = ("matplotlib", "alx_trainer.loading", "alx_trainer.evaluation.evaluate",
          "orbax.checkpoint")
print("MODULES " + json.dumps({"rc": rc, **{m: m in sys.modules for m in wanted}}))
"""


def _modules(tmp_path, data: str, *flags: str) -> dict:
    env = dict(
        os.environ, PYTHONPATH=str(REPO), XLA_FLAGS="--xla_force_host_platform_device_count=1"
    )
    argv = ["train", "--data", data, "--dim", "4", "--epochs", "1", "--no-progress", *flags]
    argv += ["--model_dir", str(tmp_path / f"m{len(flags)}"), "--compile_cache", "off"]
    done = subprocess.run(
        [sys.executable, "-c", RUN, *argv], env=env, capture_output=True, text=True, timeout=300
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("MODULES ")]
    assert lines, done.stdout[-2000:] + done.stderr[-3000:]
    return json.loads(lines[-1].split(" ", 1)[1])


def test_train_without_evaluation_imports_no_plotting_and_no_evaluation(tmp_path):
    rows = ref.random_rows(1, 30, 20, max_len=6)
    test = {r: (rows[r][:1], rows[r][1:]) for r in range(5) if len(rows[r]) > 1}
    data = ref.write_dataset(str(tmp_path / "data"), rows, 30, 20, test=test)
    quiet = _modules(tmp_path, data, "--eval_every", "0")
    assert quiet == {
        "rc": 0,
        "matplotlib": False,
        "alx_trainer.loading": False,
        "alx_trainer.evaluation.evaluate": False,
        # the checkpoints need it
        "orbax.checkpoint": True,
    }
    # evaluating, the run imports the evaluation (still no plotting)
    evaluating = _modules(tmp_path, data)
    assert evaluating["rc"] == 0 and evaluating["alx_trainer.evaluation.evaluate"]
    assert not evaluating["matplotlib"]
