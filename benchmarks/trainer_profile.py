"""Where one epoch of ours goes, per side: reading, packing, transfer, normal rows, long rows.

    python -m benchmarks.trainer_profile --data DIR [--dim 64] [--cg_iters 3] [--epochs 2]
    [--no-hugepages]
    python -m benchmarks.trainer_profile memory --data DIR ...   # resident memory by phase

Splits the CPU as `python -m alx_trainer train` does (one JAX device per core, 'owner' layout,
restarted with glibc's huge-page tunable unless `--no-hugepages`, see `alx_trainer.cli.hugepages`),
then for each side times, in this order: reading the TFRecords into CSR chunks, packing them into
each device's dense batches, copying those to the devices, and (over `--epochs` half-epochs, the
first dropped as compilation) the fixed table's gramian and its copy for every device, the
compiled steps of the normal rows and the long-row path (rows with more than `batch_pieces`
pieces). It also counts the padded slots of the dense batches against the observed pairs, and the
useful FLOPs and bytes of an epoch (see `benchmarks.core.work.epoch_work`).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import time

import numpy as np

from benchmarks.core.children import own_peak_gib
from benchmarks.core.trace import op_seconds
from benchmarks.core.work import epoch_work


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.trainer_profile",
        description=__doc__.split("\n")[0],
        epilog="Subcommand: `python -m benchmarks.trainer_profile memory --data DIR ...`: resident "
        "memory by phase (benchmarks.core.trainer_memory; `memory --help` lists its flags).",
    )
    parser.add_argument("--data", required=True)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--cg_iters", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch_pieces", type=int, default=0, help="0: as the trainer chooses")
    parser.add_argument(
        "--piece_len", type=int, default=0, help="0: per side, as the trainer chooses"
    )
    parser.add_argument(
        "--sides",
        default="row,col",
        help="the half-epochs to profile (at least the first needs the other)",
    )
    parser.add_argument(
        "--trace",
        action="store_true",
        help="also trace the last half-epoch of each side's normal rows with the "
        "JAX profiler and give XLA's own time per kind of operation (gather, "
        "dot, scatter, ...)",
    )
    parser.add_argument(
        "--hugepages",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="restart with GLIBC_TUNABLES=glibc.malloc.hugetlb=1 as the command "
        "line does "
        "(without, every fresh buffer and table gather pays 4 KiB pages)",
    )
    args = parser.parse_args()

    from alx_trainer.cli import hugepages

    if args.hugepages and hugepages.wanted():
        os.execve(
            sys.executable,
            [sys.executable, "-m", "benchmarks.trainer_profile", *sys.argv[1:]],
            dict(os.environ, GLIBC_TUNABLES=hugepages.TUNABLE),
        )
    from alx_trainer.cli import train as cli_train
    from alx_trainer.config import TrainConfig

    config = TrainConfig(
        data=args.data,
        model_dir="/tmp/unused",
        dim=args.dim,
        cg_iters=args.cg_iters,
        progress=False,
        eval_every=0,
        batch_pieces=args.batch_pieces,
        piece_len=args.piece_len,
    )
    cli_train.split_cpu(config)
    import jax

    from alx_trainer.data import batching, records
    from alx_trainer.data.dataset import open_dataset
    from alx_trainer.model import init_tables
    from alx_trainer.ops.host_fixed_table import ReplicaBuffer
    from alx_trainer.ops.mesh import make_mesh
    from alx_trainer.ops.side_runner import SideRunner
    from alx_trainer.ops.spec import step_spec
    from alx_trainer.train import sides

    mesh = make_mesh()
    dataset = open_dataset(config.data)
    size = {"row": dataset.num_rows, "col": dataset.num_cols}
    tables = init_tables(config, dataset.num_rows, dataset.num_cols, mesh)
    report: dict = {
        "devices": len(mesh.devices.flat),
        "dim": args.dim,
        "glibc_tunables": os.environ.get("GLIBC_TUNABLES", ""),
    }
    replica = ReplicaBuffer()  # as `train` shares one between its two runners
    for side in sides(False):
        if side.name not in args.sides.split(","):
            continue
        n_this, n_other = (
            (size["row"], size["col"]) if side.name == "row" else (size["col"], size["row"])
        )
        files = records.host_files(dataset.files[side.split], 0, 1)
        reader = functools.partial(records.read_chunks, files, config.chunk_rows, n_this, n_other)
        t = time.perf_counter()
        chunks = list(reader())
        read_s = time.perf_counter() - t
        lengths = np.concatenate([c.lengths for c in chunks])
        spec = step_spec(config, n_other, observed_loss=side.name == "col")
        t = time.perf_counter()
        runner = SideRunner(config, mesh, spec, functools.partial(iter, chunks), n_this, replica)
        init_s = time.perf_counter() - t  # plan + pack + device_put (chunks already in memory)
        long = batching.num_pieces(lengths, runner.plan.piece_len) > runner.plan.batch_pieces
        src, dst = tables[side.other], tables[side.table]
        normal_s, long_s, gram_s, replica_s = [], [], [], []
        kinds: dict = {}
        long_kinds: dict = {}
        for epoch in range(args.epochs):
            t = time.perf_counter()
            gram = jax.block_until_ready(runner.fixed(src))
            gram_s.append(time.perf_counter() - t)
            t = time.perf_counter()
            step_src = jax.block_until_ready(runner.replicated(src))
            replica_s.append(time.perf_counter() - t)
            traced = args.trace and epoch == args.epochs - 1
            trace_dir = tempfile.mkdtemp(prefix="alx_trace_") if traced else None
            if trace_dir:
                jax.profiler.start_trace(trace_dir)
            t = time.perf_counter()
            dst, _ = runner.run_normal(step_src, dst, gram)
            jax.block_until_ready(dst)
            normal_s.append(time.perf_counter() - t)
            if trace_dir:
                jax.profiler.stop_trace()
                kinds = op_seconds(trace_dir)
            if trace_dir:
                jax.profiler.start_trace(trace_dir := tempfile.mkdtemp(prefix="alx_trace_"))
            t = time.perf_counter()
            if runner.plan.long_steps:
                dst, _ = runner.run_long(step_src, dst, gram)
            jax.block_until_ready(dst)
            long_s.append(time.perf_counter() - t)
            del step_src  # the next replica reuses its memory
            if trace_dir:
                jax.profiler.stop_trace()
                long_kinds = op_seconds(trace_dir)
        tables[side.table] = dst
        calls = runner.source.streams()
        slots = sum(int(np.prod(a[0].shape)) for per in calls for a, _ in per)
        report[side.name] = {
            "rows": int(len(lengths)),
            "nnz": int(lengths.sum()),
            "long_rows": int(long.sum()),
            "long_nnz": int(lengths[long].sum()),
            "piece_len": runner.plan.piece_len,
            "batch_pieces": runner.plan.batch_pieces,
            "long_batches": runner.plan.long_steps,
            "long_solves": runner.plan.long_solves,
            "padded_slots": slots,
            "slots_per_normal_nnz": slots / max(int(lengths[~long].sum()), 1),
            "read_s": read_s,
            "plan_pack_transfer_s": init_s,
            "gramian_s": gram_s[1:] or gram_s,
            "fixed_replica_s": replica_s[1:] or replica_s,
            "normal_compute_s": normal_s[1:] or normal_s,
            "long_rows_s": long_s[1:] or long_s,
        }
        if kinds:
            report[side.name]["xla_op_s"] = kinds
            report[side.name]["long_xla_op_s"] = long_kinds
        print(json.dumps({side.name: report[side.name]}), flush=True)
        del chunks, runner, calls  # one side's batches in memory at a time
    nnz = next(
        report[s]["nnz"] for s in ("row", "col") if s in report
    )  # both sides: the same pairs
    flops, byte_count = epoch_work(size["row"], size["col"], nnz, args.dim, args.cg_iters)
    report["epoch_useful_gflop"], report["epoch_min_gb"] = (
        round(flops / 1e9, 1),
        round(byte_count / 1e9, 2),
    )
    report["peak_rss_gib"] = round(own_peak_gib(), 2)
    print(json.dumps(report))


if __name__ == "__main__":
    if sys.argv[1:2] == ["memory"]:  # resident memory by phase: benchmarks.core.trainer_memory
        from benchmarks.core import trainer_memory

        trainer_memory.main(sys.argv[2:])
    else:
        main()
