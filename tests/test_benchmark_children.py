"""The benchmarks' child processes: a child's peak memory is its own, whatever its parent holds."""

import sys

import numpy as np

from benchmarks.core.children import run_child

SMALL = "import numpy as np; a = np.ones(8 << 17); print('done')"  # 8 MiB


def test_child_peak_is_not_floored_at_the_parents_peak():
    held = np.ones(600 << 17)  # 600 MiB, touched: this process's high-water mark
    held += 1
    child = run_child([sys.executable, "-c", SMALL])
    assert child.stdout.strip() == "done" and child.returncode == 0
    assert child.peak_gib < 0.3, child.peak_gib  # numpy and 8 MiB, not the parent's 600 MiB
    assert child.cpu_s > 0
    del held


def test_child_peak_counts_what_the_child_allocates():
    big = "import numpy as np; a = np.ones(400 << 17); a += 1"  # 400 MiB
    assert run_child([sys.executable, "-c", big]).peak_gib > 0.38


def test_child_failure_and_signal_keep_their_status():
    failed = run_child([sys.executable, "-c", "import sys; sys.exit(3)"], check=False)
    assert failed.returncode == 3
    killed = run_child(
        [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"],
        check=False,
    )
    assert killed.returncode == -9


def test_child_reports_its_own_peak_from_inside():
    code = "from benchmarks.core.children import own_peak_gib; print(own_peak_gib())"
    held = np.ones(600 << 17)
    held += 1
    assert float(run_child([sys.executable, "-c", code]).stdout) < 0.3
    del held
