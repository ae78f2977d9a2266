"""The main job end to end at a small size: WAT packing -> Beam pipeline -> tfds build -> train ->
eval -> predict.

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

# The budget of the full demo (`make demo`, 8 epochs); `--small` prints 6 epoch lines fewer. Before
# issue 26: 362 lines (513 with the libraries' output); then 122, of which tfds's DatasetInfo print
# was 39
# and the pipeline's counter table 20, now 2 (`python -m tfds_builder build`'s summary) and 5
# (`--brief`).
LINE_BUDGET = 80
SMALL_RUN_FEWER_LINES = 8 - 2


def test_demo_small_runs_end_to_end_and_prints_only_what_matters(tmp_path):
    out = tmp_path / "demo"
    done = subprocess.run(
        [sys.executable, str(REPO / "demo.py"), "--small", "--out", str(out)],
        cwd=REPO,
        env=user_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=900,
    )
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
    assert len(lines) + SMALL_RUN_FEWER_LINES <= LINE_BUDGET, "\n".join(lines)
    # the TFDS build's summary: every split with the example count the pipeline wrote, and where
    splits = json.loads((out / "dataset" / "stats.json").read_text())["splits"]
    (summary,) = [line for line in lines if line.startswith("web_graph/hollins/1.0.0: ")]
    assert all(f"{name} {splits[name]:,}" in summary for name in ("train", "train_t", "test"))
    assert f"wrote {out / 'tfds' / 'web_graph' / 'hollins' / '1.0.0'}" in lines
    assert "DatasetInfo" not in text
    # numbers that explain themselves: one short line per epoch, no NaN printed or plotted
    epochs = [line for line in lines if line.startswith("epoch ")]
    assert len(epochs) == 2 and all(len(line) <= 80 and "solved" in line for line in epochs)
    assert not re.search(r"\bnan\b", text, re.IGNORECASE)
    assert all(math.isfinite(v) for v in metrics.values() if isinstance(v, float))
    records = [
        json.loads(line) for line in (out / "model" / "metrics.jsonl").read_text().splitlines()
    ]
    assert all(math.isfinite(v) for r in records for v in r.values() if isinstance(v, float))
