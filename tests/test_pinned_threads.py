"""One thread per CPU device (`alx_trainer.execution`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from alx_trainer import execution


def test_run_returns_results_in_order_and_reraises():
    assert execution.run_per_core([lambda: "a", lambda: "b", lambda: "c"]) == ["a", "b", "c"]

    def bad():
        raise KeyError("device 1 failed")

    with pytest.raises(KeyError, match="device 1 failed"):
        execution.run_per_core([lambda: 0, bad])


def test_run_keeps_one_thread_per_task_slot():
    first = execution.run_per_core([threading.current_thread] * 2)
    again = execution.run_per_core([threading.current_thread] * 2)
    assert all(a is b for a, b in zip(first, again)), "a new thread per call"
    assert first[0] is not first[1] and threading.current_thread() not in first


SCRIPT = """
import json, os, sys, threading
from alx_trainer import execution
before = sorted(os.sched_getaffinity(0))
old = execution.process_threads()
assert execution.use_cpu_devices(2)
import jax
made = sorted(sorted(os.sched_getaffinity(t)) for t in execution.process_threads() - old)
pinned = execution.run_per_core([lambda: sorted(os.sched_getaffinity(0))] * 2)
print(json.dumps({"devices": len(jax.devices()),
                  "async": jax.config.read("jax_cpu_enable_async_dispatch"),
                  "before": before, "after": sorted(os.sched_getaffinity(0)), "pinned": pinned,
                  "made": made,
                  "again": execution.use_cpu_devices(3)}))
"""


@pytest.mark.skipif(
    len(execution.cores()) < 2 or not hasattr(os, "sched_setaffinity"), reason="needs 2 cores"
)
def test_use_cpu_devices_pins_one_thread_per_device(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["devices"] == 2 and got["async"] is False
    assert got["after"] == got["before"]  # the main thread gets its cores back
    # device j's thread on core j only
    assert got["pinned"] == [
        [got["before"][0]],
        [got["before"][1]],
    ]
    assert got["again"] is False  # JAX has started: its devices stay
    # XLA's own threads (its intra-op pool among them): one core each, spread over both devices'
    # cores, not all left on the first core the client was created on
    assert got["made"] and all(len(cores) == 1 for cores in got["made"])
    assert {c for cores in got["made"] for c in cores} == set(got["before"][:2])
