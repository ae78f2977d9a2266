"""The main job end to end at a small size: WAT packing -> Beam pipeline -> tfds build -> train -> eval -> predict.

Run as a user runs it (none of the test session's environment settings), it also keeps the line
budget of issue 26: the commands print their own progress and results, the libraries nothing.
"""

import json
import math
import re
import subprocess
import sys

from test_first_contact import library_lines, user_env

from conftest import REPO

# 123 lines for the full demo (8 epochs), of which tfds's own DatasetInfo print is 39 and the
# pipeline's counters 20; `--small` prints 6 epoch lines fewer. Before issue 26: 362 lines.
LINE_BUDGET = 120


def test_demo_small_runs_end_to_end_and_prints_only_what_matters(tmp_path):
    out = tmp_path / "demo"
    done = subprocess.run([sys.executable, str(REPO / "demo.py"), "--small", "--out", str(out)], cwd=REPO,
                          env=user_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900)
    text = done.stdout.decode("utf-8", "replace")
    assert done.returncode == 0, text[-6000:]
    metrics = json.loads((out / "eval.json").read_text())
    # Even two epochs at d=16 must beat recommending the most linked-to pages.
    assert metrics["recall@20"] > metrics["popularity/recall@20"]
    assert (out / "recall_per_epoch.png").stat().st_size > 0
    assert (out / "dataset" / "degree_distribution.png").stat().st_size > 0
    assert "predicted outlinks of http" in text
    # quiet: no library line, no carriage-return progress bar in a log, within the budget
    lines = text.splitlines()
    assert library_lines(text) == [] and "\r" not in text
    assert len(lines) <= LINE_BUDGET, "\n".join(lines)
    # numbers that explain themselves: one short line per epoch, no NaN printed or plotted
    epochs = [line for line in lines if line.startswith("epoch ")]
    assert len(epochs) == 2 and all(len(line) <= 80 and "solved" in line for line in epochs)
    assert not re.search(r"\bnan\b", text, re.IGNORECASE)
    assert all(math.isfinite(v) for v in metrics.values() if isinstance(v, float))
    records = [json.loads(line) for line in (out / "model" / "metrics.jsonl").read_text().splitlines()]
    assert all(math.isfinite(v) for r in records for v in r.values() if isinstance(v, float))
