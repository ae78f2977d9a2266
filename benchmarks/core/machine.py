"""What the machine can do at most, to set achieved rates against: matmul FLOP/s, copy bytes/s,
and the device's memory statistics."""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from benchmarks.core.children import run_child

GIB = 2.0**30


def timed_calls(fn, args: tuple, calls: int = 10) -> float:
    """Seconds per call of a jitted function, calls queued back to back after a warm-up."""
    fn(*args).block_until_ready()
    t = time.perf_counter()
    for _ in range(calls):
        y = fn(*args)
    y.block_until_ready()
    return (time.perf_counter() - t) / calls


def matmul_rate(
    n: int, dtype: str = "float32", precision: str = "HIGHEST", calls: int = 10
) -> float:
    """FLOP/s of an n^3 matmul on the default device at a precision: float32 HIGHEST is true
    float32; DEFAULT lets XLA use TF32 (NVIDIA) or bfloat16 passes (TPU) for float32 inputs."""
    import jax
    import jax.numpy as jnp

    a = jax.random.normal(jax.random.key(0), (n, n), dtype)
    b = jax.random.normal(jax.random.key(1), (n, n), dtype)
    level = getattr(jax.lax.Precision, precision)
    return (
        2 * n**3 / timed_calls(jax.jit(lambda a, b: jnp.dot(a, b, precision=level)), (a, b), calls)
    )


def copy_rate(mib: int) -> float:
    """Bytes/s of a device-to-device copy of `mib` MiB (an elementwise pass: read once, written
    once)."""
    import jax
    import jax.numpy as jnp

    x = jnp.ones(mib * 2**20 // 4, jnp.float32)
    return 2 * x.nbytes / timed_calls(jax.jit(lambda x: x + 1), (x,))


def cpu_matmul_peak(n: int = 4096, calls: int = 3) -> float:
    """float32 FLOP/s of a large matmul with JAX as it starts by default (one device, every core),
    measured in a fresh process: a trainer's process splits the CPU into one device per core."""
    code = (
        f"from benchmarks.core.machine import matmul_rate; print(matmul_rate({n}, calls={calls}))"
    )
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env.pop("XLA_FLAGS", None)
    return float(run_child([sys.executable, "-c", code], env=env).stdout.split()[-1])


def memory_bandwidth(mib: int = 512, repeats: int = 3) -> float:
    """Bytes/s of a large NumPy copy (read + write counted), the best of `repeats`."""
    a = np.ones(mib * 2**20 // 8)
    b = np.empty_like(a)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t)
    return 2 * a.nbytes / best


def device_memory() -> dict:
    """JAX's peak and limit on the first device in GiB (None where the backend keeps none)."""
    import jax

    stats = jax.local_devices()[0].memory_stats() or {}
    peak, limit = stats.get("peak_bytes_in_use"), stats.get("bytes_limit")
    return {
        "peak_device_gib": peak / GIB if peak is not None else None,
        "peak_device_source": "JAX peak_bytes_in_use" if peak is not None else None,
        "device_limit_gib": limit / GIB if limit is not None else None,
    }


def load_line() -> str:
    """The load averages, for a line of a report."""
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())
