"""`benchmarks.quality` at a toy size on CPU, as a user runs it: the hollins.edu crawl's
strong-generalization split made by the pipeline, one grid cell for each library, both scored by
the same evaluation; each best cell's Recall@20 in (0, 1], ours against implicit, popularity
beside, and the README's figure named; the planted run also as on a GPU (`--gpu_path_memory`)."""

import json
import re
import subprocess
import sys

from benchmarks.core.paths import REPO


def test_hollins_toy_run_scores_both_libraries_and_the_baseline():
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.quality", "--device", "cpu", "hollins"]
        + ["--dim", "8", "--epochs", "2", "--lambdas", "10", "--alphas", "0.5"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    out = done.stdout
    assert re.search(r"hollins: \d+ rows x \d+ columns, \d+ training pairs; \d+ held-out", out)
    best = {
        name: float(recall)
        for name, recall in re.findall(
            r"^(ours|implicit|popularity)\b.*?\s([01]\.\d{4})\s", out, re.M
        )
    }
    assert set(best) == {"ours", "implicit", "popularity"}
    assert all(0 < r <= 1 for r in best.values()), best
    # one cell: the best cell's line, the last of each library's, is that cell
    ratio = float(re.search(r"ours / implicit Recall@20: ([\d.]+)", out).group(1))
    assert abs(ratio - best["ours"] / best["implicit"]) < 0.002
    assert "README's `make demo` Recall@20" in out


def test_planted_toy_run_reports_ours_the_oracle_and_popularity(tmp_path):
    out = tmp_path / "planted.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.quality", "--device", "cpu", "planted"]
        + ["--scale", "0.0002", "--work", str(tmp_path / "w"), "--out", str(out)]
        + ["--gpu_path_memory", "--dim", "8", "--epochs", "2"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "INCOMPLETE" not in done.stdout
    figures = json.loads(out.read_text())
    # every test row ranked, and the three rankings scored on the same rows
    assert figures["num_rows"] == figures["test_rows"] > 0
    for name in ("recall@50", "oracle/recall@50", "popularity/recall@50"):
        assert 0 < figures[name] <= 1, name
    # nothing ranks above the true probabilities by more than sampling noise
    assert figures["oracle/recall@50"] >= figures["popularity/recall@50"]
    ratio = figures["recall@50"] / figures["oracle/recall@50"]
    assert f"ours / oracle at Recall@50: {ratio:.3f}" in done.stdout
    # the GPU path's memory: the host's part is below its whole RSS; a toy's arrays live so briefly
    # that a loaded machine's sampler may miss them (device 0), and a run sampled less than once a
    # second says UNRELIABLE instead of a figure
    for name in ("train", "eval"):
        line = next(x for x in done.stdout.splitlines() if f"{name} as on a GPU:" in x)
        assert "host outside device buffers" in line, name
        samples = figures[f"{name}_gpu_path_samples"]
        if samples < max(10, figures[f"{name}_gpu_path_s"]):
            assert "UNRELIABLE" in line, name
            continue
        assert "UNRELIABLE" not in line, name
        assert figures[f"{name}_gpu_path_device_gib"] >= 0, name
        host = figures[f"{name}_gpu_path_host_gib"]
        # below the peak RSS the sampler's own process read (the launcher's figure counts pages
        # another way)
        assert 0 < host <= figures[f"{name}_gpu_path_rss_gib"], name
