"""The main job end to end at a small size: WAT packing -> Beam pipeline -> tfds build -> train -> eval -> predict."""

import json
import subprocess
import sys

from conftest import REPO


def test_demo_small_runs_end_to_end(tmp_path):
    out = tmp_path / "demo"
    done = subprocess.run([sys.executable, str(REPO / "demo.py"), "--small", "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    metrics = json.loads((out / "eval.json").read_text())
    # Even two epochs at d=16 must beat recommending the most linked-to pages.
    assert metrics["recall@20"] > metrics["popularity/recall@20"]
    assert (out / "recall_per_epoch.png").stat().st_size > 0
    assert (out / "dataset" / "degree_distribution.png").stat().st_size > 0
    assert "predicted outlinks of http" in done.stdout
