"""What a long-row solve costs per entry in each form `sharding.long_cg` takes, on two pinned devices.

    GLIBC_TUNABLES=glibc.malloc.hugetlb=1 python benchmarks/long_rows.py [--rows 1500000] [--dim 128]

Random fixed table of `--rows` x `--dim` float32 (one host copy both devices read, as the trainer's
replica), long rows of sorted random ids in batches of `--piece_len` x `--batch_pieces`; each
device solves its own groups in its own pinned thread (`per_core.run`), CG `--cg_iters` steps plus
the loss. Forms, as `SideRunner._run_long_cg` picks them by group size (in batches): `chunk:K` a
one-chunk group (one batched product per pass, gathered once), `block:K` a resident block read a
batch at a time, `stream:K` a row gathered batch by batch on every pass; `gather:K` is the gather
alone (its floor). Prints nanoseconds per entry of wall time over both devices (the best of
`--repeats`, the forms interleaved) and the load.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_500_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--piece_len", type=int, default=16)
    parser.add_argument("--batch_pieces", type=int, default=256)
    parser.add_argument("--cg_iters", type=int, default=3)
    parser.add_argument("--entries", type=int, default=1 << 20, help="long-row entries per device per form")
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--forms", default="gather:4,chunk:4,block:8,block:32,stream:4,stream:8,stream:32")
    args = parser.parse_args()

    from alx_trainer.ops import per_core

    per_core.use_cpu_devices(2)
    import jax
    import jax.numpy as jnp

    from alx_trainer.ops import sharding

    devices = jax.devices()
    rng = np.random.default_rng(0)
    n, d, per_batch = args.rows, args.dim, args.piece_len * args.batch_pieces
    host = sharding.aligned_empty((n, d), np.float32)
    host[:] = rng.normal(0, 0.1, (n, d)).astype(np.float32)
    srcs = [jax.device_put(host, dv, may_alias=True) for dv in devices]
    grams = [jax.device_put(np.eye(d, dtype=np.float32), dv) for dv in devices]
    gather = jax.jit(lambda src, ids: sharding.row_gather(src, ids).sum(axis=(0, 1, 2)))

    def groups(k: int, device) -> list:
        """Groups of `k` batches, each two rows of k/2 batches (one row when k = 1)."""
        rows = max(k // 2, 1)
        out = []
        for _ in range(max(args.entries // (k * per_batch), 1)):
            ids = np.sort(rng.choice(n, (k, per_batch)), axis=1).astype(np.int32)
            arrays = (ids.reshape(k, args.batch_pieces, args.piece_len), np.repeat(np.arange(rows), k // rows).astype(np.int32),
                      rng.normal(0, 0.1, (k, d)).astype(np.float32), np.full(k, 5.0, np.float32))
            out.append([jax.device_put(a, device) for a in arrays])
        return out

    def solve(form: str, k: int, work: list) -> None:
        def task(j: int) -> None:
            for ids, slot, x0, lam in work[j]:
                if form == "gather":
                    jax.block_until_ready(gather(srcs[j], ids))
                    continue
                chunk = k if form == "chunk" else 4
                out = sharding.long_cg(srcs[j], ids, slot, x0, lam, grams[j], jnp.float32(1.0), args.cg_iters, chunk,
                                       form != "stream", True)
                jax.block_until_ready(out)

        per_core.run([functools.partial(task, j) for j in range(len(devices))])

    cases = {}
    for spec in args.forms.split(","):
        form, k = spec.split(":")
        work = [groups(int(k), dv) for dv in devices]
        entries = sum(len(w) for w in work) * int(k) * per_batch
        cases[spec] = (functools.partial(solve, form, int(k), work), entries)
    best = {spec: float("inf") for spec in cases}
    for run, _ in cases.values():
        run()  # compiled
    for _ in range(args.repeats):
        for spec, (run, _) in cases.items():
            t = time.perf_counter()
            run()
            best[spec] = min(best[spec], time.perf_counter() - t)
    print(json.dumps({
        "ns_per_entry": {spec: round(best[spec] / cases[spec][1] * 1e9) for spec in cases},
        "table": [n, d], "batch": per_batch, "cg_iters": args.cg_iters, "load": round(os.getloadavg()[0], 2),
        "hugepages": "hugetlb=1" in os.environ.get("GLIBC_TUNABLES", ""),
    }))


if __name__ == "__main__":
    main()
