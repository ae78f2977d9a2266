"""Where the accelerator's time goes, in one short run: profiler traces of one warm training epoch
and of one batch of exact top K, summed by kernel, and the Pallas CG kernel's first compile.

Made for the lent GPU machine, as one prepared command of a few minutes (the issues' "profile
first"); runnable on any CPU at toy sizes, as its test does:

    python3 -m benchmarks.gpu_profile --out DIR        # 25M pairs at d=128; 4M columns, top 100
    python3 -m benchmarks.gpu_profile --size toy --topk_cols 20000 --topk_dim 16 --out DIR

Sections, each timed apart; `DIR/profile.json` is written after every section, so a crash keeps
what came before it (the Pallas section runs last):
1. train: the benchmark's power-law matrix (`gpu_vs_implicit.SIZES`) generated on the device,
   `dataset.in_memory`, then `train` for 2 epochs with `gpu_vs_implicit.ours_config` (and
   `--ours`); the second epoch runs under `jax.profiler` (trace in DIR/train). Its device time by
   kernel (`core.trace.device_kernels`), against the epoch's seconds and the counted minimum work.
2. topk: a random `--topk_cols` x `--topk_dim` column table with log-normal row norms, exact top
   `--k` of `--topk_rows` rows through `evaluation.topk.BlockedScorer` at its default block shape:
   one batch to compile, the next traced (DIR/topk); seconds per column block and by kernel.
3. cache: `python -m alx_trainer train --config configs/gowalla.json` run twice on one dataset
   directory (`--cache_data`, else a Gowalla-shaped power-law matrix written by
   `webgraph_contract.synthetic_matrix`, which has no test split: evaluation off) with one fresh
   `--compile_cache`: each run's wall seconds, epochs and compile seconds (`metrics.jsonl`), so
   the second run's first epoch against its later ones and against the first run's. At `--size
   toy` the section shrinks too: the toy matrix's shape, `--dim` 16 and 2 epochs (unless
   `--cache_flags` sets them).
4. pallas: `ops.pallas_cg.batch_cg` at the shapes of its Triton export test (4,096 pieces of 16,
   5,120 row slots; d=64 float32 and d=128 bfloat16), compiled and run twice: seconds, or the
   error with the end of its traceback.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shlex
import shutil
import subprocess
import sys
import time
import traceback
from typing import Any, Callable, Sequence

import numpy as np

from benchmarks.core import paths, power_law, sections
from benchmarks.core.tables import print_table
from benchmarks.core.trace import device_kernels
from benchmarks.core.work import epoch_work

MODULE = "benchmarks.gpu_profile"
PALLAS_SHAPES = ((64, "float32"), (128, "bfloat16"))  # (d, table dtype) of the Pallas section
GOWALLA_SHAPE = (
    29_858,
    40_981,
    810_128,
)  # rows, columns, pairs of LightGCN's Gowalla training split


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    from benchmarks.gpu_vs_implicit import SIZES

    summary = " ".join(__doc__.split("\n\n")[0].split())  # the first paragraph, whole
    p = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=summary)
    p.add_argument("--size", default="25m", choices=sorted(SIZES), help="the training matrix")
    p.add_argument("--dim", type=int, default=128)
    p.add_argument(
        "--ours", action="append", default=[], metavar="KEY=VALUE", help="a TrainConfig field"
    )
    p.add_argument("--topk_cols", type=int, default=4_000_000)
    p.add_argument("--topk_dim", type=int, default=128)
    p.add_argument("--topk_rows", type=int, default=1024, help="rows per traced batch")
    p.add_argument("--k", type=int, default=100)
    p.add_argument("--cache_data", default="", help="dataset directory of the cache section")
    p.add_argument(
        "--cache_flags", default="", help="more flags of the cache section's `train` runs"
    )
    p.add_argument("--sections", default="train,topk,cache,pallas", help="comma-separated")
    p.add_argument("--top", type=int, default=15, help="kernels listed per section")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="traces and profile.json go here")
    args = p.parse_args(argv)
    args.section_list = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = sorted(set(args.section_list) - set(SECTIONS))
    if unknown:
        p.error(f"--sections: unknown {unknown[0]!r} ({', '.join(SECTIONS)})")
    for flag in ("dim", "topk_cols", "topk_dim", "topk_rows", "k", "top"):
        if getattr(args, flag) <= 0:
            p.error(f"--{flag}: must be positive, got {getattr(args, flag)}")
    return args


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
    from benchmarks.gpu_vs_implicit import SIZES, ours_config

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
        sections.solve_form(config),
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

    from alx_trainer.evaluation.topk import BlockedScorer

    key_t, key_n, key_q = jax.random.split(jax.random.key(args.seed), 3)
    shape = (args.topk_cols, args.topk_dim)
    norms = jnp.exp(0.5 * jax.random.normal(key_n, (args.topk_cols, 1)))
    table = np.asarray(jax.random.normal(key_t, shape) * norms / np.sqrt(args.topk_dim))
    queries = np.asarray(jax.random.normal(key_q, (2 * args.topk_rows, args.topk_dim)))
    none = [np.zeros(0, np.int64)] * args.topk_rows
    t = time.perf_counter()
    scorer = BlockedScorer(table, rows_per_batch=args.topk_rows)
    scorer.top_k(queries[: args.topk_rows], none, args.k)  # the table to the device, the compile
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
        path="threshold scan" if scorer.scan else "blocked kernel",
        first_batch_s=first_s,
        batch_s=seconds,
        ms_per_block=1e3 * seconds / max(scored, 1),
        score_gb_per_block=scorer.shape.score_bytes() / 1e9,
        **device_kernels(str(trace_dir), args.top),
    )


def cache_section(args: argparse.Namespace, out: pathlib.Path) -> dict:
    """Two identical `train` commands with one fresh compile cache: what the second one saves."""
    from benchmarks.gpu_vs_implicit import SIZES

    data, synthetic = args.cache_data, not args.cache_data
    toy = SIZES["toy"] if args.size == "toy" else None  # the section shrunk with the rest
    user = shlex.split(args.cache_flags)
    shrink = [
        f"--{name}={value}"
        for name, value in ((("dim", toy.dims[0]), ("epochs", 2)) if toy else ())
        if not any(f.split("=")[0] == f"--{name}" for f in user)
    ]
    if synthetic:
        data = str(out / "cache_data")
        rows, cols, nnz = (toy.rows, toy.cols, toy.nnz) if toy else GOWALLA_SHAPE
        command = ["--out", data, "--rows", rows, "--cols", cols, "--nnz", nnz, "--shards", 1]
        _run([sys.executable, "-m", "webgraph_contract.synthetic_matrix", *map(str, command)])
    cache = out / "compile_cache"
    shutil.rmtree(cache, ignore_errors=True)
    runs = []
    for run in (1, 2):
        model = out / f"cache_model_{run}"
        shutil.rmtree(model, ignore_errors=True)
        flags = ["--data", data, "--model_dir", str(model), "--config", str(paths.GOWALLA_CONFIG)]
        flags += ["--compile_cache", str(cache), "--no-progress"]
        flags += ["--eval_every", "0"] if synthetic else []
        t = time.perf_counter()
        _run([sys.executable, "-m", "alx_trainer", "train", *flags, *shrink, *user])
        wall = time.perf_counter() - t
        records = [json.loads(line) for line in (model / "metrics.jsonl").read_text().splitlines()]
        epochs = [r["seconds"] for r in records if "seconds" in r]
        compiles = [r.get("compile_seconds") for r in records if "seconds" in r]
        runs.append({"wall_s": wall, "epochs_s": epochs, "compile_s": compiles})
    later = [float(np.median(r["epochs_s"][1:])) if len(r["epochs_s"]) > 1 else None for r in runs]
    return {
        "data": (
            f"synthetic {'toy' if toy else 'Gowalla'} shape (no evaluation)" if synthetic else data
        ),
        "flags": shrink + user,
        "runs": runs,
        "second_first_epoch_over_later": runs[1]["epochs_s"][0] / later[1] if later[1] else None,
        "second_over_first_first_epoch": runs[1]["epochs_s"][0] / runs[0]["epochs_s"][0],
    }


def _run(command: list[str]) -> None:
    """A command of the cache section; its failure is its output's last lines."""
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
        raise RuntimeError(f"{' '.join(command[:4])}...: exit {done.returncode}: {tail}")


def pallas_section(args: argparse.Namespace, out: pathlib.Path) -> dict:
    """The Pallas CG kernel compiled and run at its export test's shapes: seconds or the error."""
    import jax
    import jax.numpy as jnp

    from alx_trainer.ops import pallas_cg

    pieces, piece_len, slots, table_rows = 4096, 16, 5120, 100_000
    rng = np.random.default_rng(args.seed)
    seg = np.sort(rng.integers(0, slots, pieces)).astype(np.int32)
    ids = rng.integers(0, table_rows, (pieces, piece_len)).astype(np.int32)
    ids[:, piece_len // 2 :][rng.random((pieces, piece_len - piece_len // 2)) < 0.3] = -1
    results = {}
    for dim, dtype in PALLAS_SHAPES:
        name = f"d{dim}_{dtype}"
        table = jnp.asarray(rng.normal(0, 0.1, (table_rows, dim)), dtype)
        x0 = jnp.zeros((slots, dim), jnp.float32)
        gram = jnp.asarray(np.eye(dim) * 0.1, jnp.float32)
        lam = jnp.ones((slots,), jnp.float32)
        solve = jax.jit(lambda *a: pallas_cg.batch_cg(*a, 3, False, True))
        try:
            t = time.perf_counter()
            x, _ = solve(table, jnp.asarray(ids), jnp.asarray(seg), x0, gram, lam)
            x.block_until_ready()
            first = time.perf_counter() - t
            t = time.perf_counter()
            x, _ = solve(table, jnp.asarray(ids), jnp.asarray(seg), x0, gram, lam)
            x.block_until_ready()
            results[name] = {
                "first_s": first,
                "s": time.perf_counter() - t,
                "finite": bool(np.isfinite(np.asarray(x)).all()),
            }
        except Exception as e:  # the point of the section: what fails, kept whole
            results[name] = {
                "error": f"{type(e).__name__}: {e}"[:2000],
                "traceback": "".join(traceback.format_exc().splitlines(True)[-40:]),
            }
    return results


SECTIONS: dict[str, Callable[[argparse.Namespace, pathlib.Path], dict]] = {
    "train": train_section,
    "topk": topk_section,
    "cache": cache_section,
    "pallas": pallas_section,
}


def print_report(report: dict) -> None:
    """A line per section and its kernels by device time."""
    print(f"\ndevice: {report['device']}")
    train, topk, pallas = (report.get(k, {}) for k in ("train", "topk", "pallas"))
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
    cache = report.get("cache", {})
    for i, run in enumerate(cache.get("runs", []), 1):
        epochs = ", ".join(f"{e:.3f}" for e in run["epochs_s"])
        compiles = ", ".join(f"{c or 0:.2f}" for c in run["compile_s"])
        print(
            f"cache: train run {i} ({cache['data']}): {run['wall_s']:.1f} s wall, epochs "
            f"{epochs} s, compiling {compiles} s"
        )
    if cache.get("runs"):
        ratio = cache["second_first_epoch_over_later"]
        print(
            f"cache: the second run's first epoch is {cache['second_over_first_first_epoch']:.2f}x"
            f" the first run's, {ratio if ratio is None else f'{ratio:.2f}x'} its later epochs"
        )
    for shape, r in pallas.items():
        outcome = (
            f"error: {r['error'][:300]}"
            if "error" in r
            else (
                f"first call {r['first_s']:.2f} s, then {r['s'] * 1e3:.2f} ms, finite {r['finite']}"
            )
        )
        print(f"pallas {shape}: {outcome}")
    for name, error in report.get("errors", {}).items():
        print(f"{name}: failed: {error.splitlines()[-1] if error else ''}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    import jax

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    device = jax.devices()[0]
    report: dict[str, Any] = {
        "argv": sys.argv[1:] if argv is None else list(argv),
        "device": f"{device.device_kind} ({device.platform})",
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds": {},
        "errors": {},
    }
    path = out / "profile.json"
    for name in args.section_list:
        t = time.perf_counter()
        try:
            report[name] = SECTIONS[name](args, out)
        except Exception:  # a section's failure is reported, the next one still runs
            report["errors"][name] = "".join(traceback.format_exc().splitlines(True)[-30:])
        report["seconds"][name] = time.perf_counter() - t
        print(f"{name}: {report['seconds'][name]:.1f} s", flush=True)
        path.write_text(json.dumps(report, indent=1, default=float))
    print_report(report)
    print(f"\nfigures in {path}")
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
