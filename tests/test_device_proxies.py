"""`benchmarks.device_proxies`: the host CPU share is measured over the interval it divides by, so
it is possible (at most the host's cores), and none is given where the resolution forbids it."""

import json
import os
import subprocess
import sys

from benchmarks.core.paths import REPO
from benchmarks.device_proxies import host_share


def test_host_cpu_share_at_a_small_size_is_possible():
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.device_proxies", "--rows", "2000", "--cols", "1000"]
        + ["--nnz", "20000", "--dim", "8", "--epochs", "4"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, JAX_PLATFORMS="cpu"),
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    timed = [line for line in lines if line.get("epoch", 0) > 2]
    assert len(timed) == 2
    cores = os.cpu_count()
    for line in timed:
        assert 0 < line["window_s"] <= line["seconds"] * 1.5 + 0.001, line
        assert line["host_cpu_s"] <= cores * line["window_s"] + line["host_cpu_resolution_s"]
        share = line["host_cpu_share"]
        assert share is None or 0 <= share <= cores, line


def test_share_below_resolution_is_not_given():
    tick = host_share(0.004, 0.042, 0.03)  # three threads' 10 ms ticks over a 4 ms epoch
    assert tick["host_cpu_share"] is None and "below resolution" in tick["host_cpu_share_note"]
    fine = host_share(0.5, 0.02, 1e-6)
    assert fine["host_cpu_share"] == 0.04 and "host_cpu_share_note" not in fine
