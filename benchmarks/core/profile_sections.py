"""The in-process sections of `benchmarks.profile`: one warm training epoch and one batch of exact
top K under JAX's profiler, summed by kernel; `train` through the command line twice on one
compile cache, with the trainer's own phases line; and the report of every section."""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import shlex
import shutil
import sys
import time

import numpy as np

from benchmarks.core import paths, power_law
from benchmarks.core.children import run_child
from benchmarks.core.datasets import has_matrix
from benchmarks.core.speed_sizes import SIZES, ours_config
from benchmarks.core.tables import print_table
from benchmarks.core.trace import device_kernels
from benchmarks.core.work import epoch_work

# rows, columns, pairs of LightGCN's Gowalla training split
GOWALLA_SHAPE = (29_858, 40_981, 810_128)
# the trainer's phases line (`phase_times.summary`) and one phase in it
PHASES_LINE = re.compile(r"phases: (.*)$", re.M)
PHASE = re.compile(r"(\w+) ([\d.]+) s(?: \(([\d.]+) CPU s\))?")


def kernel_rows(summary: dict) -> list[dict]:
    return [
        dict(row, share=row["seconds"] / max(summary["busy_s"], 1e-12)) for row in summary["top"]
    ]


def train_section(args: argparse.Namespace, out: pathlib.Path) -> dict:
    """One warm epoch of ours traced, by kernel, against the counted minimum work."""
    import jax

    from alx_trainer.callbacks import Callback
    from alx_trainer.data.dataset import in_memory
    from alx_trainer.model import table_dtype
    from alx_trainer.train import train

    size = SIZES[args.size]
    indptr, cols, facts = power_law.power_law_csr(
        args.seed, size.rows, size.cols, size.nnz, on="device"
    )
    dataset = in_memory(args.size, indptr, cols, size.cols)
    config = ours_config(args.size, args.dim, 2, str(out / "model"), args.ours)
    shutil.rmtree(config.model_dir, ignore_errors=True)
    trace_dir = out / "train"

    class TraceSecondEpoch(Callback):
        def on_epoch_end(self, run, epoch: int, record: dict) -> None:
            if epoch == 1:
                jax.profiler.start_trace(str(trace_dir))
            elif epoch == 2:
                jax.profiler.stop_trace()

    model = train(config, dataset=dataset, callbacks=[TraceSecondEpoch()])
    seconds = model.metrics[-1]["seconds"]
    flops, minimum = epoch_work(
        size.rows,
        size.cols,
        size.nnz,
        args.dim,
        config.cg_iters,
        np.dtype(table_dtype(config)).itemsize,
    )
    kernels = device_kernels(str(trace_dir), args.top)
    return dict(
        form=config.cg_form,
        matrix=[size.rows, size.cols, size.nnz],
        dim=args.dim,
        generate_s=facts.get("device_s"),
        epoch_s=seconds,
        first_epoch_s=model.metrics[0]["seconds"],
        minimum_gb=minimum / 1e9,
        minimum_gflop=flops / 1e9,
        **kernels,
    )


def topk_section(args: argparse.Namespace, out: pathlib.Path) -> dict:
    """One batch of exact top K traced, by kernel, per column block."""
    import jax
    import jax.numpy as jnp

    from alx_trainer.evaluation.engine import default_block_shape
    from alx_trainer.evaluation.topk import make_engine
    from webgraph_contract.ragged import RaggedRows

    key_t, key_n, key_q = jax.random.split(jax.random.key(args.seed), 3)
    shape = (args.topk_cols, args.topk_dim)
    norms = jnp.exp(0.5 * jax.random.normal(key_n, (args.topk_cols, 1)))
    table = np.asarray(jax.random.normal(key_t, shape) * norms / np.sqrt(args.topk_dim))
    queries = np.asarray(jax.random.normal(key_q, (2 * args.topk_rows, args.topk_dim)))
    none = RaggedRows.from_lists([np.zeros(0, np.int64)] * args.topk_rows)
    t = time.perf_counter()
    device = jax.devices()[0]
    shape = default_block_shape(device.platform)._replace(rows=args.topk_rows)
    scorer = make_engine(table, [device], shape)
    # the table to the device, the compile
    scorer.top_k(queries[: args.topk_rows], none, args.k)
    first_s = time.perf_counter() - t
    trace_dir = out / "topk"
    before = list(scorer.blocks)
    with jax.profiler.trace(str(trace_dir)):
        t = time.perf_counter()
        scorer.top_k(queries[args.topk_rows :], none, args.k)
        seconds = time.perf_counter() - t
    scored, blocks = (after - first for after, first in zip(scorer.blocks, before))
    return dict(
        columns=args.topk_cols,
        dim=args.topk_dim,
        rows=args.topk_rows,
        k=args.k,
        block=list(scorer.shape),
        blocks=blocks,
        blocks_scored=scored,
        path=type(scorer).__name__,
        first_batch_s=first_s,
        batch_s=seconds,
        ms_per_block=1e3 * seconds / max(scored, 1),
        score_gb_per_block=scorer.shape.score_bytes() / 1e9,
        **device_kernels(str(trace_dir), args.top),
    )


def dataset_dir(args: argparse.Namespace, out: pathlib.Path) -> tuple[str, bool]:
    """The dataset directory of the command-line and phases sections: `--data`, else a power-law
    matrix written once by `webgraph_contract.synthetic_matrix` (Gowalla's shape; `--size toy`'s
    at toy size, rewritten where the one there has another shape), which has no test split; whether
    it is the synthetic one."""
    if args.data:
        return args.data, False
    data = out / "synthetic_data"
    toy = SIZES["toy"] if args.size == "toy" else None
    rows, cols, nnz = (toy.rows, toy.cols, toy.nnz) if toy else GOWALLA_SHAPE
    if not has_matrix(data, rows, cols, nnz):
        command = ["--out", data, "--rows", rows, "--cols", cols, "--nnz", nnz, "--shards", 1]
        run_command(
            [sys.executable, "-m", "webgraph_contract.synthetic_matrix", *map(str, command)],
            out / "synthetic_data.log",
        )
    return str(data), True


def phases_of(log: str) -> dict[str, dict]:
    """The trainer's own phases from its log's last `phases:` line: name -> wall (and CPU) s."""
    lines = PHASES_LINE.findall(log)
    return {
        name: {"s": float(wall), "cpu_s": float(cpu) if cpu else None}
        for name, wall, cpu in PHASE.findall(lines[-1] if lines else "")
    }


def cli_section(args: argparse.Namespace, out: pathlib.Path) -> dict:
    """`python -m alx_trainer train --config configs/gowalla.json` twice on one dataset directory
    with one fresh compile cache: each run's wall seconds, its own phases line, epochs and compile
    seconds (`metrics.jsonl`): what the warm cache saves, and the trainer's own start-up phases and
    `other` (its seconds in no phase)."""
    data, synthetic = dataset_dir(args, out)
    toy = args.size == "toy"
    user = shlex.split(args.cli_flags)
    shrink = [
        f"--{name}={value}"
        for name, value in ((("dim", SIZES["toy"].dims[0]), ("epochs", 2)) if toy else ())
        if not any(f.split("=")[0] == f"--{name}" for f in user)
    ]
    cache = out / "compile_cache"
    shutil.rmtree(cache, ignore_errors=True)
    runs = []
    for run in (1, 2):
        model = out / f"cli_model_{run}"
        shutil.rmtree(model, ignore_errors=True)
        flags = ["--data", data, "--model_dir", str(model), "--config", str(paths.GOWALLA_CONFIG)]
        flags += ["--compile_cache", str(cache), "--no-progress", "--log_level", "info"]
        flags += ["--eval_every", "0"] if synthetic else []
        log, wall = run_command(
            [sys.executable, "-m", "alx_trainer", "train", *flags, *shrink, *user],
            out / f"cli_train_{run}.log",
        )
        records = [json.loads(line) for line in (model / "metrics.jsonl").read_text().splitlines()]
        epochs = [r["seconds"] for r in records if "seconds" in r]
        compiles = [r.get("compile_seconds") for r in records if "seconds" in r]
        phases = phases_of(log)
        own = {f"{name}_s": phases.get(name, {}).get("s") for name in ("start", "imports", "other")}
        runs.append(
            {"wall_s": wall, "phases": phases, **own} | {"epochs_s": epochs, "compile_s": compiles}
        )
    later = [float(np.median(r["epochs_s"][1:])) if len(r["epochs_s"]) > 1 else None for r in runs]
    return {
        "data": f"synthetic {'toy' if toy else 'Gowalla'} shape (no evaluation)"
        if synthetic
        else data,
        "flags": shrink + user,
        "runs": runs,
        "second_first_epoch_over_later": runs[1]["epochs_s"][0] / later[1] if later[1] else None,
        "second_over_first_first_epoch": runs[1]["epochs_s"][0] / runs[0]["epochs_s"][0],
    }


def run_command(command: list[str], log: pathlib.Path) -> tuple[str, float]:
    """A command of these sections (`children.run_child`, its stderr to `log`): its output (stdout
    and stderr) and wall seconds; its failure is `ChildError` with its last line."""
    child = run_child(command, log=log)
    return child.stdout + log.read_text(), child.wall_s


def print_report(report: dict) -> None:
    """A line per section and its kernels by device time."""
    print(f"\ndevice: {report['device']}")
    train, topk = (report.get(k, {}) for k in ("train", "topk"))
    if "epoch_s" in train:
        print(
            f"train {train['matrix']} d={train['dim']} ({train['form']}): epoch "
            f"{train['epoch_s']:.4f} s, device busy {train['busy_s']:.4f} s in "
            f"{train['kernels']:,} kernels; counted minimum {train['minimum_gb']:.2f} GB, "
            f"{train['minimum_gflop']:.0f} GFLOP"
        )
    if "batch_s" in topk:
        print(
            f"topk {topk['rows']:,} rows x {topk['columns']:,} columns d={topk['dim']} top "
            f"{topk['k']} ({topk['path']}, blocks {topk['block']}): {topk['batch_s']:.3f} s, "
            f"{topk['ms_per_block']:.3f} ms a block, device busy {topk['busy_s']:.3f} s in "
            f"{topk['kernels']:,} kernels"
        )
    for name in ("train", "topk"):
        if report.get(name, {}).get("top"):
            print(f"\n{name}: device time by kernel")
            print_table(
                [
                    ("kernel", "name", "", -70),
                    ("calls", "count", "", 7),
                    ("seconds", "seconds", ".4f", 9),
                    ("share", "share", ".3f", 6),
                ],
                kernel_rows(report[name]),
            )
    cli = report.get("cli", {})
    for i, run in enumerate(cli.get("runs", []), 1):
        epochs = ", ".join(f"{e:.3f}" for e in run["epochs_s"])
        phases = ", ".join(f"{n} {p['s']:.2f}" for n, p in run["phases"].items())
        print(
            f"cli: train run {i} ({cli['data']}): {run['wall_s']:.1f} s wall, phases {phases} s "
            f"(other: in none of them); epochs {epochs} s"
        )
    if cli.get("runs"):
        ratio = cli["second_first_epoch_over_later"]
        print(
            f"cli: the second run's first epoch is {cli['second_over_first_first_epoch']:.2f}x"
            f" the first run's, {ratio if ratio is None else f'{ratio:.2f}x'} its later epochs"
        )
    for line in report.get("phases", {}).get("marks", []):
        trainer = ", ".join(f"{n} {w:.2f}" for n, (w, _) in line["trainer_phases"].items())
        print(
            f"phases: {line['mark']}: RSS {line['rss_gib']:.2f} GiB (peak since the last mark "
            f"{line['peak_since_gib']:.2f}); the trainer's phases so far: {trainer or 'none'}"
        )
    for line in report.get("proxies", {}).get("epochs", []):
        print(f"proxies: {json.dumps(line)}")
    if report.get("proxies", {}).get("cost"):
        print(f"proxies: {json.dumps(report['proxies']['cost'])}")
    for name, error in report.get("errors", {}).items():
        print(f"{name}: failed: {error.splitlines()[-1] if error else ''}")
