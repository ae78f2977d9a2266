"""Seconds and peak memory of initializing one embedding table, as the trainer does it on this host.

    python benchmarks/table_init.py [--rows 19700000] [--dim 128] [--dtype bfloat16] [--devices 0]

Splits the CPU as `python -m alx_trainer train` does (one JAX device per core unless
`--devices`), then times `sharding.init_table` (N(0, 0.1) rows) and reports wall and CPU seconds, GB/s of
table written, the resident-memory peak over the table's size, and the rows' standard deviation.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _peak_bytes() -> int:
    return int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) * 1024


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=19_700_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    parser.add_argument("--devices", type=int, default=0, help="JAX CPU devices (0: one per core)")
    args = parser.parse_args()
    from alx_trainer.ops import per_core

    per_core.use_cpu_devices(args.devices or len(per_core.cores()))
    import jax
    import jax.numpy as jnp
    import numpy as np

    from alx_trainer.ops import sharding

    mesh = sharding.make_mesh()
    jnp.zeros(1).block_until_ready()
    sharding.init_table(mesh, 0, 1000, args.dim, 0.1, args.dtype).block_until_ready()  # compiled
    _reset_peak()
    before = int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) * 1024
    t, cpu = time.perf_counter(), time.process_time()
    table = sharding.init_table(mesh, 0, args.rows, args.dim, 0.1, args.dtype)
    table.block_until_ready()
    seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
    peak = _peak_bytes() - before
    sample = np.asarray(table.addressable_shards[0].data[:100_000]).astype(np.float32)
    print(json.dumps({
        "rows": args.rows, "dim": args.dim, "dtype": args.dtype, "devices": mesh.size,
        "seconds": round(seconds, 2), "cpu_s": round(cpu, 2),
        "gb_per_s": round(table.nbytes / seconds / 1e9, 3), "table_gib": round(table.nbytes / 2**30, 2),
        "peak_over_table": round(peak / table.nbytes, 3), "std": round(float(sample.std()), 4),
        "load": round(__import__("os").getloadavg()[0], 1), "jax": jax.__version__,
    }))


if __name__ == "__main__":
    main()
