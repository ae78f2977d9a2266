"""How fast against implicit: seconds per epoch, memory, rates and recall, CPU or GPU, one run.

    python -m benchmarks.speed [--device auto|cpu|gpu] [--sizes gowalla,10m,25m,149m,de-sparse]
        [--dims 64,1024] [--epochs N] [--ours KEY=VALUE ...] [--implicit auto|gpu|cpu|off]
        [--forms matvec,matvec:65536,explicit:tf32,explicit:bfloat16,explicit:float32]
        [--forms_at gowalla:64,gowalla:1024,25m:128] [--cost on|off] [--budget_s S] [--json FILE]
    python -m benchmarks.speed --device cpu --sizes toy,ml1m --implicit cpu   # a CPU's sizes
    python -m benchmarks.speed --sizes de-sparse --de_sparse_scale 0.0001 --dims 8 --epochs 2

Sizes: `toy`, `ml1m` (MovieLens-1M's shape), `10m`, `25m`, `149m` (WebGraph in-sparse): power-law
matrices generated on the device (`benchmarks.core.speed_sizes`); `gowalla`: LightGCN's split read
from `--gowalla`, with its test users scored (Recall@20); `de-sparse`: the WebGraph de-sparse size
with its strong-generalization test split, trained and evaluated through the trainer's public
functions (`benchmarks.core.de_sparse`, its own flags below), run last, in `--de_sparse_s` seconds
of its own after the other sizes' `--budget_s`.

`--device` picks the JAX platform of every child (cpu, or gpu: JAX_PLATFORMS=cuda; auto: JAX's
choice) and implicit's model with it (`--implicit auto`: its GPU model where its CUDA extension
loads and the device is not cpu). For the lent GPU machine (`../shared/gpu/README.md`: no
TensorFlow, no Beam, no network), fetch implicit's GPU wheels into `.whl/` first
(`bash benchmarks/gpu_wheels.sh`); the run installs them into `--site` and gives every child the
GPU README's environment.

What one run does, each step in its own child process (`benchmarks.core.sections`; a failure, an
out-of-memory or a timeout prints one line and the run goes on; no section starts after
`--budget_s`):
1. The device's own peaks (a `--peak_n`^3 matmul in bfloat16 and float32, a device-to-device copy
   of `--copy_mib` MiB), then the power-law matrices generated on the device and saved.
2. Per size and d: ours (`alx_trainer.train.train` on `dataset.in_memory`, with glibc's huge
   pages where the command line would take them; `--ours KEY=VALUE` overrides any TrainConfig
   field), then implicit at our objective (`core.implicit_als`). Seconds
   per epoch: the median of the epochs after the first; ours' setup timed apart; then XLA's cost
   analysis of one epoch (`alx_trainer.train.epoch_cost`) where it fits the child's time.
3. The solve forms (`--forms` at the `--forms_at` points): ours again in each of XLA's forms, every
   row labelled with its whole variant (`matvec:65536` is not `matvec`), each point's fastest form
   within 0.002 of the best Gowalla Recall@20 set against the default ('auto') row.
4. One table, the forms' verdicts, the de-sparse section, and `--json` with every figure.

Work per epoch is counted (`benchmarks.core.work.epoch_work`: the minimum any implementation must
move and compute), rates set against step 1's peaks. Peak device memory: ours, JAX's
`peak_bytes_in_use`; implicit, RMM's statistics plus its two CSR copies. Host peak RSS of every
child is reported too.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import platform
import sys
import time
from typing import Any, Sequence

from alx_trainer.cli import hugepages
from benchmarks.core import de_sparse, de_sparse_children, paths, sections, solve_forms
from benchmarks.core.children import (
    PLATFORMS,
    Runner,
    add_wheel_args,
    children_env,
    error_line,
    main_or_child,
)
from benchmarks.core.section_rows import add_row, compare_forms, print_sections, run_section
from benchmarks.core.speed_sizes import (
    DE_SPARSE,
    GOWALLA_DIMS,
    NAMES,
    plan_sections,
    prepare_data,
)

FORMS = "matvec,matvec:65536,explicit:tf32,explicit:bfloat16,explicit:float32"
# 10M and 149M nnz: ours at 'auto' only
FORMS_AT = "gowalla:64,gowalla:1024,25m:128"
MODULE = "benchmarks.speed"
# the sizes' budget and one child's limit, seconds, by device (a GPU run fits a 10-minute window)
BUDGET_S = {"gpu": 340.0, "cpu": 3600.0}
SECTION_S = {"gpu": 300.0, "cpu": 1200.0}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__.split("\n")[0])
    p.add_argument(
        "--device", choices=("auto", "cpu", "gpu"), default="auto", help="the children's platform"
    )
    p.add_argument("--sizes", default="gowalla,10m,25m,149m", help=f"comma-separated, of {NAMES}")
    p.add_argument(
        "--dims", default="", help=f"d for every size (default: Gowalla {GOWALLA_DIMS}, else 128)"
    )
    p.add_argument("--epochs", type=int, default=0, help="epochs per run (0: each size's own)")
    p.add_argument("--gowalla", default=str(paths.GOWALLA_DIR), help="train.txt/test.txt folder")
    p.add_argument("--gowalla_users", type=int, default=0, help="only users below this id (0: all)")
    p.add_argument(
        "--ours", action="append", default=[], metavar="KEY=VALUE", help="a TrainConfig field"
    )
    p.add_argument(
        "--forms",
        default=FORMS,
        help="solve forms compared for ours at --forms_at ('matvec', 'matvec:65536', "
        "'explicit:float32|tf32|bfloat16'; '' none)",
    )
    p.add_argument(
        "--forms_at",
        default=FORMS_AT,
        help="where the forms are compared: SIZE:D or SIZE (its every d), comma-separated; "
        "only planned ones run",
    )
    p.add_argument(
        "--implicit",
        choices=("auto", "gpu", "cpu", "off"),
        default="auto",
        help="implicit's model: auto = GPU when its CUDA extension loads, else CPU "
        "(said in the table)",
    )
    p.add_argument(
        "--cost",
        choices=("on", "off"),
        default="on",
        help="XLA's cost analysis of ours' epoch at each size and d (the default form)",
    )
    p.add_argument("--peak_n", type=int, default=8192, help="matmul size of the peak measurement")
    p.add_argument(
        "--copy_mib", type=int, default=2048, help="MiB copied by the bandwidth measurement"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work", default=str(paths.work_dir("speed")))
    p.add_argument("--json", default="", help="the JSON of every figure (default WORK/speed.json)")
    p.add_argument(
        "--budget_s",
        type=float,
        default=None,
        help="no section of the sizes starts after this many seconds (de-sparse: --de_sparse_s; "
        f"default {BUDGET_S['gpu']:.0f}, on --device cpu {BUDGET_S['cpu']:.0f})",
    )
    p.add_argument(
        "--section_timeout",
        type=float,
        default=None,
        help="seconds one child process may run (default "
        f"{SECTION_S['gpu']:.0f}, on --device cpu {SECTION_S['cpu']:.0f})",
    )
    add_wheel_args(p)
    de_sparse.add_args(p)
    args = p.parse_args(argv)
    args.size_list = [s for s in args.sizes.split(",") if s]
    bad = [s for s in args.size_list if s not in NAMES]
    if bad or not args.size_list:
        p.error(f"--sizes: unknown {bad or args.sizes!r}; choose from {list(NAMES)}")
    try:
        args.dim_list = [int(d) for d in args.dims.split(",") if d.strip()]
    except ValueError:
        p.error(f"--dims: expected comma-separated integers, got {args.dims!r}")
    if any(d <= 0 for d in args.dim_list) or args.epochs < 0:
        p.error("--dims and --epochs: must be positive")
    args.form_list = list(dict.fromkeys(f.strip() for f in args.forms.split(",") if f.strip()))
    try:
        for form in args.form_list:
            solve_forms.form_overrides(form)
        args.forms_at = {
            solve_forms.forms_point(item.strip(), NAMES)
            for item in args.forms_at.split(",")
            if item.strip()
        }
    except ValueError as e:
        p.error(str(e))
    de_sparse.check_args(p, args)
    if args.device == "cpu" and args.implicit in ("auto", "gpu"):
        args.implicit = "cpu"
    # a lent GPU's window is 10 minutes; 2 CPU cores take minutes for one 25M size
    where = "cpu" if args.device == "cpu" else "gpu"
    if args.budget_s is None:
        args.budget_s = BUDGET_S[where]
    if args.section_timeout is None:
        args.section_timeout = SECTION_S[where]
    return args


def device_env(args: argparse.Namespace) -> dict[str, str]:
    """The children's environment: the wheels where implicit's GPU model can use them
    (`children_env`), JAX_PLATFORMS per `--device`. Sets `args.ours_env`, what ours' children add:
    glibc's huge-page tunable where `python -m alx_trainer` would restart itself with it."""
    env = children_env(args, gpu=False if args.device == "cpu" else None)
    if args.device in PLATFORMS:
        env["JAX_PLATFORMS"] = PLATFORMS[args.device]
    args.ours_env = {"GLIBC_TUNABLES": hugepages.TUNABLE} if hugepages.wanted() else {}
    return env


def run_sizes(runner: Runner, args: argparse.Namespace, report: dict, plan: list) -> None:
    """Ours and implicit per power-law or Gowalla size and d, then the forms."""
    implicit_s: dict[tuple[str, int], float | None] = {}
    for size, dim, config, _ in plan:
        meta = report["data"].get(size, {})
        if "error" in meta or not meta:
            continue
        rows = {
            who: run_section(
                runner,
                args,
                report,
                size,
                dim,
                config,
                who,
                f"{size}-d{dim}-{who}",
                cost=who == "ours" and args.cost == "on",
            )
            for who in (("ours", "implicit") if args.implicit != "off" else ("ours",))
        }
        base = implicit_s[size, dim] = rows.get("implicit", {}).get("s_per_epoch")
        for r in rows.values():
            add_row(report, r, base)
    report["forms"] = compare_forms(runner, args, report, plan, implicit_s)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    start = time.monotonic()
    work = pathlib.Path(args.work)
    # sizes, d, epochs and configs first: a bad --ours fails here in one line, before work
    try:
        plan = plan_sections(args, work)
        if DE_SPARSE in args.size_list:
            de_sparse.train_config(args, str(work / DE_SPARSE / "model"))
    except ValueError as e:
        print(f"{MODULE}: error: {error_line(e)}", file=sys.stderr)
        return 2
    work.mkdir(parents=True, exist_ok=True)
    env = device_env(args)
    runner = Runner(MODULE, work, env, start + args.budget_s, args.section_timeout)
    report: dict[str, Any] = {
        "run": {
            "argv": sys.argv[1:] if argv is None else list(argv),
            "host": platform.node(),
            "device_flag": args.device,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
        "device": {},
        "data": {},
        "sections": [],
        "forms": [],
    }
    if set(args.size_list) - {DE_SPARSE}:
        prepare_data(runner, args, report, work)
        run_sizes(runner, args, report, plan)
        print_sections(report["sections"])
        solve_forms.print_forms(report["forms"])
    if DE_SPARSE in args.size_list:
        runner.work, runner.deadline = work / DE_SPARSE, time.monotonic() + args.de_sparse_s
        report[DE_SPARSE] = de_sparse.run(args, runner, work / DE_SPARSE)
    report["run"]["seconds"] = time.monotonic() - start
    # each failed child's last lines of output
    report["failures"] = runner.failures
    path = pathlib.Path(args.json or work / "speed.json")
    path.write_text(json.dumps(report, indent=1, default=float))
    seconds = report["run"]["seconds"]
    print(f"\n{len(report['sections'])} rows in {seconds:.0f} s; figures in {path}")
    return 0


if __name__ == "__main__":
    main_or_child(main, {**sections.CHILDREN, **de_sparse_children.CHILDREN})
