"""Where the time goes: the trainer's own phases, one warm epoch and one batch of top K by device
kernel, the command line's fixed cost, and the accelerator path's proxies on CPU devices.

    python -m benchmarks.profile [--device auto|cpu|gpu] [--size 25m] [--dim 128]
        [--sections train,topk,cli,phases,proxies] [--data DIR] [--out DIR]
    python -m benchmarks.profile --device cpu --size toy --topk_cols 20000 --topk_dim 16
        --proxy_size 2000,1000,20000 --out DIR                        # a toy on CPU

Sections, each timed apart; `OUT/profile.json` is written after every section, so a crash keeps
what came before it; a failed section is reported and the next one still runs:
1. train: the size's power-law matrix (`benchmarks.core.speed_sizes`) generated on the device,
   `dataset.in_memory`, then `train` for 2 epochs (`--ours` overrides any TrainConfig field); the
   second epoch runs under `jax.profiler` (trace in OUT/train). Its device time by kernel
   (`core.trace.device_kernels`), against the epoch's seconds and the counted minimum work.
2. topk: a random `--topk_cols` x `--topk_dim` column table with log-normal row norms, exact top
   `--k` of `--topk_rows` rows through the evaluation's blocked scorer at its default block shape:
   one batch to compile, the next traced (OUT/topk); seconds per column block and by kernel.
3. cli: `python -m alx_trainer train --config configs/gowalla.json` twice on one dataset directory
   (`--data`, else a Gowalla-shaped power-law matrix written by
   `webgraph_contract.synthetic_matrix`, which has no test split: evaluation off; at `--size toy`
   the toy's shape, d=16, 2 epochs) with
   one fresh compile cache: each run's wall seconds, the trainer's own phases line (its start-up
   phases `start` and `imports` and its `other`, the seconds in no phase, also apart), epochs and
   compile seconds.
4. phases: `train` on the same dataset directory in a child process: the trainer's phases
   (`alx_trainer.phase_times`) and the resident memory at each mark its callbacks see, with the
   peak between marks (`benchmarks.core.phases`).
5. proxies: on `--proxy_devices` CPU devices whatever `--device` says, a `--proxy_size` matrix on
   the accelerator path: launches per half-epoch, host CPU share, bytes copied to the devices per
   epoch, XLA's bytes against the counted minimum (`benchmarks.core.proxies`).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time
import traceback
from typing import Any, Callable, Sequence

from benchmarks.core import paths
from benchmarks.core.children import PLATFORMS, Runner, main_or_child
from benchmarks.core.phases import phases_child
from benchmarks.core.profile_sections import (
    cli_section,
    dataset_dir,
    print_report,
    topk_section,
    train_section,
)
from benchmarks.core.proxies import proxies_child
from benchmarks.core.speed_sizes import SIZES

MODULE = "benchmarks.profile"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    # the first paragraph, whole
    summary = " ".join(__doc__.split("\n\n")[0].split())
    p = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=summary)
    p.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto")
    p.add_argument("--size", default="25m", choices=sorted(SIZES), help="the training matrix")
    p.add_argument("--dim", type=int, default=128, help="d (at --size toy: the toy's own)")
    p.add_argument(
        "--ours", action="append", default=[], metavar="KEY=VALUE", help="a TrainConfig field"
    )
    p.add_argument("--topk_cols", type=int, default=4_000_000)
    p.add_argument("--topk_dim", type=int, default=128)
    p.add_argument("--topk_rows", type=int, default=1024, help="rows per traced batch")
    p.add_argument("--k", type=int, default=100)
    p.add_argument("--data", default="", help="dataset directory of the cli and phases sections")
    p.add_argument("--cli_flags", default="", help="more flags of the cli section's `train` runs")
    p.add_argument("--epochs", type=int, default=2, help="epochs of the phases section")
    p.add_argument(
        "--proxy_size", default="200000,50000,2000000", help="ROWS,COLS,NNZ of the proxies"
    )
    p.add_argument("--proxy_dim", type=int, default=64)
    p.add_argument("--proxy_devices", type=int, default=1, help="CPU devices of the proxies")
    p.add_argument(
        "--proxy_epochs", type=int, default=4, help="at least 3: epoch 2 traced, later timed"
    )
    p.add_argument("--resident", default="auto", choices=("auto", "on", "off"))
    p.add_argument("--cg_form", default="auto", choices=("auto", "matvec", "explicit"))
    p.add_argument("--sections", default="train,topk,cli,phases,proxies", help="comma-separated")
    p.add_argument("--top", type=int, default=15, help="kernels listed per section")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--section_timeout", type=float, default=300, help="seconds a child section may run"
    )
    p.add_argument("--out", default=str(paths.work_dir("profile")), help="traces, profile.json")
    args = p.parse_args(argv)
    args.section_list = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = sorted(set(args.section_list) - set(SECTIONS))
    if unknown:
        p.error(f"--sections: unknown {unknown[0]!r} ({', '.join(SECTIONS)})")
    for flag in ("dim", "topk_cols", "topk_dim", "topk_rows", "k", "top", "epochs", "proxy_dim"):
        if getattr(args, flag) <= 0:
            p.error(f"--{flag}: must be positive, got {getattr(args, flag)}")
    try:
        args.proxy_shape = [int(n) for n in args.proxy_size.split(",")]
    except ValueError:
        args.proxy_shape = []
    if len(args.proxy_shape) != 3 or min(args.proxy_shape) <= 0:
        p.error(f"--proxy_size: expected ROWS,COLS,NNZ, got {args.proxy_size!r}")
    if args.proxy_epochs < 3:
        p.error(f"--proxy_epochs: at least 3, got {args.proxy_epochs}")
    if args.size == "toy":
        args.dim = SIZES["toy"].dims[0]
    return args


def child_result(runner: Runner, kind: str, spec: dict, env: dict | None = None) -> list[dict]:
    """A child section's lines; its failure raised as one line."""
    lines, error, _ = runner(kind, kind, spec, env)
    if error:
        raise RuntimeError(f"{kind}: {error}")
    return lines


def phases_section(args: argparse.Namespace, out: pathlib.Path, runner: Runner) -> dict:
    """The trainer's phases and resident memory by mark, `train` on the dataset directory."""
    data, _ = dataset_dir(args, out)
    spec = {"data": data, "model_dir": str(out / "phases_model"), "ours": args.ours}
    lines = child_result(runner, "phases", dict(spec, dim=args.dim, epochs=args.epochs))
    result = next((line["result"] for line in lines if "result" in line), {})
    return dict(result, data=data, marks=[line for line in lines if "mark" in line])


def proxies_section(args: argparse.Namespace, out: pathlib.Path, runner: Runner) -> dict:
    """The accelerator path's proxies on `--proxy_devices` CPU devices."""
    rows, cols, nnz = args.proxy_shape
    spec = {"rows": rows, "cols": cols, "nnz": nnz, "dim": args.proxy_dim}
    spec.update(devices=args.proxy_devices, epochs=args.proxy_epochs)
    spec.update(resident=args.resident, cg_form=args.cg_form)
    flags = f"--xla_force_host_platform_device_count={args.proxy_devices}"
    env = dict(runner.env, XLA_FLAGS=flags, JAX_PLATFORMS="cpu")
    lines = child_result(runner, "proxies", spec, env)
    result = next((line["result"] for line in lines if "result" in line), {})
    return dict(result, epochs=[line for line in lines if "epoch" in line])


Section = Callable[[argparse.Namespace, pathlib.Path, Runner], dict]
SECTIONS: dict[str, Section] = {
    "train": lambda args, out, _: train_section(args, out),
    "topk": lambda args, out, _: topk_section(args, out),
    "cli": lambda args, out, _: cli_section(args, out),
    "phases": phases_section,
    "proxies": proxies_section,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.device in PLATFORMS:
        os.environ["JAX_PLATFORMS"] = PLATFORMS[args.device]
    import jax

    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runner = Runner(MODULE, out, dict(os.environ), float("inf"), args.section_timeout)
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
        # a section's failure is reported, the next one still runs
        try:
            report[name] = SECTIONS[name](args, out, runner)
        except Exception:
            report["errors"][name] = "".join(traceback.format_exc().splitlines(True)[-30:])
        report["seconds"][name] = time.perf_counter() - t
        print(f"{name}: {report['seconds'][name]:.1f} s", flush=True)
        path.write_text(json.dumps(report, indent=1, default=float))
    print_report(report)
    print(f"\nfigures in {path}")
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    main_or_child(main, {"phases": phases_child, "proxies": proxies_child})
