"""`benchmarks.pipeline` at a toy size, as a user runs it: the graph stage alone on 2,000
generated power-law edges, its figures written; the graph it keeps is no larger than the edges
that went in."""

import json
import subprocess
import sys

from benchmarks.core.paths import REPO


def test_graph_stage_toy_run_writes_its_figures(tmp_path):
    out = tmp_path / "pipeline.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.pipeline", "--graph_edges", "2000"]
        + ["--work_dir", str(tmp_path / "work"), "--json", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["wat"] == [] and report["text_edges"] == [] and "reader" not in report
    [stage] = report["graph_stage"]
    assert stage["exit"] == 0 and stage["edges_in"] == 2000
    assert 0 < stage["edges"] <= 2000 and 0 < stage["nodes"] <= stage["edges"] * 2
    assert stage["cpu_s"] > 0 and stage["peak_gib"] > 0
    assert "graph stage, 2,000 power-law edges" in done.stdout
