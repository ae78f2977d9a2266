"""The trainer's host phases on a dataset directory, each timed apart: read, plan, pack, transpose.

    python -m benchmarks.reader_speed phases --data DIR [--repeats 2] [--path accelerator|cpu]
                                              [--phases read,plan,pack,transpose]
                                              [--layout sharded|owner]
    taskset -c 0 python -m benchmarks.reader_speed phases --data DIR      # the same on one core

Per side (`train`, then `train_t`): `read` is the planning pass over the side's shard files
(`records.read_chunks`, as `batch_sources.scan` consumes it), `plan` is `plan.make_plan` on what
it read (the batch shape of `--path`: the accelerator path's 65,536-id batches, or the per-core
CPU path's), `pack` packs every call from the chunks held in memory (`batch_sources.host_calls`,
one device). With `--layout owner` (the CPU path's default layout) the host is split into one
JAX device per core as the trainer splits it, and `plan` and `pack` are the 'owner' layout's:
`pack` builds `batch_sources.OwnerResident`, each device's calls packed and put on it. Then
`transpose` makes the `train` matrix's transpose as `dataset.in_memory` does.
Each side first says how the reader decodes its files (`records.decode_mode`: "processes N" or
"threads N"). Each phase prints its wall seconds (best of `--repeats`), CPU seconds of that pass
(the reader's worker processes included), and CPU microseconds per row or per pair; the last
line is one JSON object of all of them.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time
from typing import Callable

from alx_trainer.phase_times import cpu_seconds
from benchmarks.core.children import own_peak_gib


def timed(fn: Callable[[], object], repeats: int) -> tuple[float, float, object]:
    """(best wall seconds, CPU seconds of that pass (child processes' included), its result)."""
    best = (float("inf"), 0.0, None)
    for _ in range(repeats):
        cpu, t = cpu_seconds(), time.perf_counter()
        out = fn()
        wall, cpu = time.perf_counter() - t, cpu_seconds() - cpu
        if wall < best[0]:
            best = (wall, cpu, out)
    return best


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.reader_speed phases", description=__doc__.splitlines()[0]
    )
    p.add_argument("--data", required=True, help="A dataset directory (the contract's layout).")
    p.add_argument("--repeats", type=int, default=2, help="Passes per phase; the best is reported.")
    p.add_argument(
        "--path",
        choices=("accelerator", "cpu"),
        default="accelerator",
        help="Whose batch shape the plan and pack use.",
    )
    p.add_argument(
        "--phases",
        default="read,plan,pack,transpose",
        help="Which phases to run (read always runs).",
    )
    p.add_argument(
        "--layout",
        choices=("sharded", "owner"),
        default="sharded",
        help="'owner': per-core devices, and the 'owner' layout's plan and resident calls.",
    )
    args = p.parse_args(argv)
    if args.layout == "owner" and args.path != "cpu":
        p.error("--layout owner takes --path cpu (the accelerator path has no 'owner' layout)")
    wanted = set(args.phases.split(","))
    from alx_trainer.ops import per_core

    if args.layout == "owner":  # before JAX starts, as the trainer's `split_cpu`
        per_core.use_cpu_devices(len(per_core.cores()))

    from alx_trainer.config import TrainConfig
    from alx_trainer.data import dataset as datasets
    from alx_trainer.data import records
    from alx_trainer.data.host_cores import host_threads
    from alx_trainer.data.row_chunk import RowChunk
    from alx_trainer.ops import batch_sources, plan
    from alx_trainer.ops.mesh import make_mesh, padded_rows

    config = TrainConfig(
        data=args.data,
        model_dir="/tmp/unused",
        accelerator="on" if args.path == "accelerator" else "off",
        layout=args.layout,
    )
    batch_ids = plan.batching.BATCH_IDS if args.path == "cpu" else 1 << 16
    max_calls = config.calls_per_half_epoch if args.path == "accelerator" else 0
    data = datasets.open_dataset(args.data)
    mesh = make_mesh() if args.layout == "owner" else None
    devices = mesh.size if mesh is not None else 1
    report: dict = {
        "cores": host_threads(),
        "path": args.path,
        "layout": args.layout,
        "devices": devices,
        "rows": data.num_rows,
        "cols": data.num_cols,
    }
    held = {}
    for split, (n_this, n_other) in (
        ("train", (data.num_rows, data.num_cols)),
        ("train_t", (data.num_cols, data.num_rows)),
    ):
        read = functools.partial(
            records.read_chunks, data.files[split], config.chunk_rows, n_this, n_other
        )
        mode = " ".join(map(str, records.decode_mode(data.files[split])))
        report[f"{split}.decoding"] = mode
        print(f"{split:8} decoding in {mode}", flush=True)
        wall, cpu, chunks = timed(lambda read=read: list(read()), args.repeats)
        held[split] = chunks
        scan = batch_sources.scan(iter(chunks), keep_chunks=False, long_above=None)
        rows, pairs = len(scan.lengths), int(scan.lengths.sum())
        phases = {"read": (wall, cpu)}
        shard = padded_rows(n_this, mesh) // devices if mesh is not None else n_this
        make = functools.partial(
            plan.make_plan,
            config,
            mesh is not None,
            scan.lengths,
            scan.row_ids,
            devices,
            shard,
            plan.one_host,
            batch_ids,
            max_calls,
        )
        wall, cpu, side_plan = timed(make, args.repeats)
        phases["plan"] = (wall, cpu)
        if "pack" in wanted:
            if mesh is None:
                pack = functools.partial(batch_sources.host_calls, chunks, side_plan, 1, 0)
            else:  # each device's calls its own where `per_core` applies, as in the trainer
                source = functools.partial(
                    batch_sources.OwnerResident,
                    mesh,
                    side_plan,
                    chunks,
                    shard,
                    per_core.applies(mesh.local_devices),
                )
                pack = lambda source=source: (c for calls in source().streams() for c in calls)
            phases["pack"] = timed(lambda pack=pack: sum(1 for _ in pack()), args.repeats)[:2]
        for phase, (wall, cpu) in phases.items():
            report[f"{split}.{phase}"] = {
                "wall_s": round(wall, 3),
                "cpu_s": round(cpu, 3),
                "cpu_us_per_row": round(1e6 * cpu / max(rows, 1), 3),
            }
            print(
                f"{split:8} {phase:9} {wall:8.2f} s wall {cpu:8.2f} CPU s "
                f"{1e6 * cpu / max(rows, 1):8.3f} "
                f"CPU us/row  ({rows:,} rows, {pairs:,} pairs)",
                flush=True,
            )
    if "transpose" in wanted:
        train = RowChunk.concat(held.pop("train"))
        del held
        in_memory = functools.partial(
            datasets.in_memory, "t", train.indptr, train.cols, data.num_cols
        )
        wall, cpu, _ = timed(in_memory, args.repeats)
        report["transpose"] = {
            "wall_s": round(wall, 3),
            "cpu_s": round(cpu, 3),
            "cpu_ns_per_pair": round(1e9 * cpu / max(len(train.cols), 1), 2),
        }
        print(
            f"transpose {wall:8.2f} s wall {cpu:8.2f} CPU s ({len(train.cols):,} pairs)", flush=True
        )
    report["peak_rss_gib"] = round(own_peak_gib(), 2)
    report["load"] = round(os.getloadavg()[0], 2)
    print(json.dumps(report))
