"""`benchmarks.core.device_host_memory` on a case computed by hand: a module that makes a 300 MB
JAX array by a program, 100 MB of NumPy that the CPU device then aliases (checked by address), then
400 MB of NumPy (last: a program's output and a NumPy array before it is put count as host until
then, each below 400 MB). Outside the device buffers the host holds its baseline + 400 MB (the
aliased 100 MB neither subtracted twice nor missed); the device peak is exactly 400 MB."""

import json
import os
import subprocess
import sys

from benchmarks.core.paths import REPO

MB = 2**20
CASE = """
import json, time
import jax, jax.numpy as jnp, numpy as np
from benchmarks.core import device_host_memory as d

jnp.zeros(1).block_until_ready()
time.sleep(0.2)
base = d.rss_bytes() - d.live_array_bytes()
dev = jax.jit(lambda v: jnp.full(75 * 2**20, v))(1.0).block_until_ready()
buf = np.empty(100 * 2**20 + 64, np.uint8)
start = (-buf.ctypes.data) % 64
shared = buf[start : start + 100 * 2**20]
shared[:] = 1
alias = jax.device_put(shared).block_until_ready()
host = np.ones(400 * 2**20, np.uint8)
time.sleep(0.4)
print(json.dumps({"base": base, "aliased": alias.unsafe_buffer_pointer() == shared.ctypes.data}))
"""


def test_host_outside_device_buffers_and_device_peak_by_hand(tmp_path):
    (tmp_path / "hand_case.py").write_text(CASE)
    result = tmp_path / "result.json"
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(tmp_path)])
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.core.device_host_memory", str(result), "hand_case"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    case = json.loads(done.stdout.strip().splitlines()[-1])
    got = json.loads(result.read_text())
    assert case["aliased"]
    assert got["device_peak_bytes"] == 400 * MB
    # the baseline and the 400 MB, within what the interpreter and allocator add around them
    assert abs(got["host_outside_device_peak_bytes"] - (case["base"] + 400 * MB)) < 40 * MB, got
    assert got["rss_peak_bytes"] >= case["base"] + 800 * MB
    assert got["samples"] > 5
