"""What the machine can do at most, to set achieved rates against: matmul FLOP/s, copy bytes/s,
and the device's memory statistics."""

from __future__ import annotations

import os
import time

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
