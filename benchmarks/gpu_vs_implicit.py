"""Ours against implicit's CUDA ALS on one GPU, in one run: s/epoch, memory, rates, recall.

Made for the lent GPU machine (`../shared/gpu/README.md`: Python 3.12, JAX with CUDA, NumPy,
SciPy; no TensorFlow, no Beam, no network). On a machine with internet, first fetch implicit's
GPU wheels into `.whl/` (gitignored) and copy the project with them:

    bash benchmarks/gpu_wheels.sh

then on the GPU machine, from the project root:

    python3 -m benchmarks.gpu_vs_implicit [--sizes gowalla,10m,25m,149m] [--dims 64,1024]
        [--gowalla data/gowalla] [--epochs N] [--ours KEY=VALUE ...] [--json FILE]
        [--forms matvec,matvec:65536,matvec:pallas,explicit:tf32,explicit:bfloat16,explicit:float32]
        [--forms_at gowalla:64,gowalla:1024,25m:128] [--cost on|off]

(The WebGraph de-sparse size, with its test split and evaluation, is `benchmarks.de_sparse`.)

The run installs `.whl/*.whl` into `--site` (default /tmp/site) itself when they are there and
gives every child the GPU README's environment (PYTHONPATH=site; LD_LIBRARY_PATH with the CUDA
libraries of the `nvidia` packages). Without a GPU (or `--implicit cpu`) implicit's CPU model
stands in and the table says so; at `--sizes toy` (and `--gowalla_users`, `--peak_n`,
`--copy_mib` small) it runs end to end on CPU.

What one run does, each step in its own child process (`benchmarks.core.sections`; a failure, an
out-of-memory or a timeout prints one line and the run goes on; no section starts after
`--budget_s`):
1. The device's own peaks: a `--peak_n`^3 matmul in bfloat16 and in float32 (HIGHEST precision,
   and DEFAULT, TF32 where XLA picks it) and a device-to-device copy of `--copy_mib` MiB; then the
   power-law matrices generated on the device (`benchmarks.core.power_law`) and brought to the
   host once as CSR (generation, transfer and saving timed apart).
2. Gowalla (LightGCN's split) read on the host.
3. Per size and d: ours (`alx_trainer.train.train` on `dataset.in_memory`, config from
   `ours_config`; `--ours KEY=VALUE` overrides any TrainConfig field), then implicit GPU (CG with
   our `cg_iters`, float32) at our objective (`benchmarks.core.implicit_als`). Seconds per epoch:
   the median of the epochs after the first. Ours' setup (`in_memory`'s transpose, planning, the
   final checkpoint) is timed apart. Then, in the same child (after the timings), XLA's cost
   analysis of one epoch (`alx_trainer.train.epoch_cost`: bytes accessed, FLOPs and launches of
   its programs compiled with their loops unrolled), skipped in one line when its estimate (the
   planning plus the first epoch's compiling, once per CG step) would outrun the child's time.
4. The solve forms (`--forms`, at the `--forms_at` points, with what is left of the budget): ours
   again in each form the default ('auto') did not run. Per point, the fastest form whose Gowalla
   Recall@20 is within 0.002 of the best form's there (a form that lost it on Gowalla is out at
   the other sizes too), and whether 'auto' ran it (`benchmarks.core.solve_forms`): the table
   behind `alx_trainer.ops.spec.AUTO_CG_FORM`.
5. One table ('auto: ' marks the default run's form), the forms' verdicts, and `--json` (default
   WORK/gpu_vs_implicit.json) with every figure.

Work per epoch is counted (`benchmarks.core.work.epoch_work`: the minimum any implementation must
move and compute), rates set against step 1's peaks; beside it XLA's bytes accessed per epoch, their
ratio to the minimum and their share of the copy bandwidth.
Peak device memory: ours, JAX's `peak_bytes_in_use`; implicit, RMM's statistics plus its two CSR
copies. Host peak RSS of every child is reported too.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import platform
import sys
import time
from typing import Any, Sequence

from benchmarks.core import paths, sections, solve_forms
from benchmarks.core.children import Runner, add_wheel_args, children_env, main_or_child, one_line
from benchmarks.core.gowalla import read_gowalla
from benchmarks.core.section_rows import (
    GOWALLA,
    add_row,
    compare_forms,
    print_sections,
    run_section,
)
from benchmarks.core.tables import fmt


@dataclasses.dataclass(frozen=True)
class Size:
    """A power-law matrix generated on the device: shape, nonzeros, default epochs and d, our
    overrides."""

    rows: int
    cols: int
    nnz: int
    epochs: int
    dims: tuple[int, ...] = (128,)
    ours: tuple[tuple[str, str], ...] = ()


SIZES = {
    "toy": Size(2_000, 500, 6_000, 3, (16,)),
    "10m": Size(400_000, 100_000, 10_000_000, 3),
    "25m": Size(1_000_000, 250_000, 25_000_000, 3),
    "149m": Size(1_500_000, 1_500_000, 149_000_000, 2),  # WebGraph in-sparse
}
GOWALLA_DIMS = (64, 1024)
FORMS = "matvec,matvec:65536,matvec:pallas,explicit:tf32,explicit:bfloat16,explicit:float32"
FORMS_AT = "gowalla:64,gowalla:1024,25m:128"  # 10M and 149M nnz: ours at 'auto' only
MODULE = "benchmarks.gpu_vs_implicit"


def ours_config(
    size: str, dim: int, epochs: int | None, model_dir: str, overrides: Sequence[str] = ()
):
    """Our TrainConfig for one section: Gowalla from configs/gowalla.json, the power-law sizes at
    the trainer's defaults; no evaluation, training loss or progress, and no checkpoint before the
    last epoch's (which the trainer always writes; it falls in `setup_s`); then the size's own
    overrides and `overrides` (`KEY=VALUE`, any TrainConfig field, typed as a config file)."""
    values: dict[str, Any] = {}
    if size == GOWALLA:
        values.update(json.loads(paths.GOWALLA_CONFIG.read_text()))
    if size in SIZES:
        values.update(SIZES[size].ours, epochs=SIZES[size].epochs)
    values.update(
        data=size,
        model_dir=model_dir,
        dim=dim,
        eval_every=0,
        train_loss_every=0,
        checkpoint_every=0,
        progress=False,
        log_level="warning",
        **({"epochs": epochs} if epochs else {}),
    )
    return sections.typed_config(values, overrides)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    names = [GOWALLA, *SIZES]
    p = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="gowalla,10m,25m,149m", help=f"comma-separated, of {names}")
    p.add_argument(
        "--dims", default="", help=f"d for every size (default: Gowalla {GOWALLA_DIMS}, else 128)"
    )
    p.add_argument(
        "--epochs",
        type=int,
        default=0,
        help="epochs per run (0: Gowalla's config, 3 up to 25M nnz, else 2)",
    )
    p.add_argument("--gowalla", default=str(paths.GOWALLA_DIR), help="train.txt/test.txt folder")
    p.add_argument("--gowalla_users", type=int, default=0, help="only users below this id (0: all)")
    p.add_argument(
        "--ours", action="append", default=[], metavar="KEY=VALUE", help="a TrainConfig field"
    )
    p.add_argument(
        "--forms",
        default=FORMS,
        help="solve forms compared for ours at --forms_at ('matvec', 'matvec:65536', "
        "'matvec:pallas', 'explicit:float32|tf32|bfloat16'; '' none)",
    )
    p.add_argument(
        "--forms_at",
        default=FORMS_AT,
        help="where the forms are compared: SIZE:D or SIZE (its "
        "every d), comma-separated; only planned ones run",
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
    p.add_argument("--work", default=str(paths.work_dir("gpu_vs_implicit")))
    p.add_argument(
        "--json", default="", help="the JSON of every figure (default WORK/gpu_vs_implicit.json)"
    )
    p.add_argument(
        "--budget_s", type=float, default=340, help="no section starts after this many seconds"
    )
    p.add_argument(
        "--section_timeout", type=float, default=300, help="seconds one child process may run"
    )
    add_wheel_args(p)
    args = p.parse_args(argv)
    args.size_list = [s for s in args.sizes.split(",") if s]
    bad = [s for s in args.size_list if s not in names]
    if bad or not args.size_list:
        p.error(f"--sizes: unknown {bad or args.sizes!r}; choose from {names}")
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
            solve_forms.forms_point(item.strip(), names)
            for item in args.forms_at.split(",")
            if item.strip()
        }
    except ValueError as e:
        p.error(str(e))
    return args


def plan_sections(args: argparse.Namespace, work: pathlib.Path) -> list:
    """(size, d, config, {form: config}) of every section, configs checked before any work."""
    plan = []
    for size in args.size_list:
        for dim in args.dim_list or (GOWALLA_DIMS if size == GOWALLA else SIZES[size].dims):
            model_dir = str(work / "models" / f"{size}-d{dim}")
            at = (size, dim) in args.forms_at or (size, None) in args.forms_at
            config = ours_config(size, dim, args.epochs, model_dir, args.ours)
            forms = {
                form: ours_config(
                    size,
                    dim,
                    args.epochs,
                    f"{model_dir}-{form.replace(':', '-')}",
                    [*args.ours, *solve_forms.form_overrides(form)],
                )
                for form in (args.form_list if at else [])
            }
            plan.append((size, dim, config, forms))
    return plan


def prepare_data(
    runner: Runner, args: argparse.Namespace, report: dict, work: pathlib.Path
) -> None:
    """The device step (peaks, generated matrices), then Gowalla; one line of each."""
    generate = {
        s: (SIZES[s].rows, SIZES[s].cols, SIZES[s].nnz) for s in args.size_list if s in SIZES
    }
    lines, error, child_s = runner(
        "device",
        "device",
        {"generate": generate, "seed": args.seed, "peak_n": args.peak_n, "copy_mib": args.copy_mib},
    )
    for line in lines:
        report["device"].update(line.get("device", {}))
        report["data"].update(line.get("data", {}))
    report["device"]["child_s"] = child_s
    peaks = report["device"].get("peaks", {})

    def peak(key: str, scale: float) -> str:
        return fmt(peaks[key] / scale if peaks.get(key) else None, ".1f")

    device = report["device"]
    print(
        f"device: {device.get('device_kind', '?')} ({device.get('platform', '?')}); "
        f"matmul bf16 {peak('matmul_bf16_flop_s', 1e12)} TFLOP/s, "
        f"f32 {peak('matmul_f32_flop_s', 1e12)} "
        f"(DEFAULT precision {peak('matmul_f32_default_flop_s', 1e12)}) TFLOP/s, "
        f"copy {peak('copy_bytes_s', 1e9)} GB/s" + (f"; device step: {error}" if error else ""),
        flush=True,
    )
    if GOWALLA in args.size_list:
        try:
            t = time.perf_counter()
            arrays = read_gowalla(args.gowalla, args.gowalla_users)
            facts = {"source": args.gowalla, "read_s": time.perf_counter() - t}
            report["data"][GOWALLA] = sections.save_matrix(work / "data" / GOWALLA, arrays, facts)
        except (OSError, ValueError) as e:
            report["data"][GOWALLA] = {"error": one_line(e)}
    for size in args.size_list:
        meta = report["data"].get(size, {"error": "not generated (the device step failed)"})
        timings = ", ".join(
            f"{k} {meta[k]:.2f} s"
            for k in ("device_s", "to_host_s", "read_s", "save_s")
            if k in meta
        )
        print(
            f"data {size}: "
            + (
                meta["error"]
                if "error" in meta
                else f"{meta['rows']:,} x {meta['cols']:,}, {meta['nnz']:,} nnz; {timings}"
            ),
            flush=True,
        )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    start = time.monotonic()
    work = pathlib.Path(args.work)
    try:  # sizes, d, epochs and configs first: a bad --ours fails here in one line, before work
        plan = plan_sections(args, work)
    except ValueError as e:
        print(f"{MODULE}: error: {one_line(e)}", file=sys.stderr)
        return 2
    work.mkdir(parents=True, exist_ok=True)
    env = children_env(args)
    runner = Runner(MODULE, work, env, start + args.budget_s, args.section_timeout)
    report: dict[str, Any] = {
        "run": {
            "argv": sys.argv[1:] if argv is None else list(argv),
            "host": platform.node(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
        "device": {},
        "data": {},
        "sections": [],
    }
    prepare_data(runner, args, report, work)
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
    report["run"]["seconds"] = time.monotonic() - start
    report["failures"] = runner.failures  # each failed child's last lines of output
    print_sections(report["sections"])
    solve_forms.print_forms(report["forms"])
    path = pathlib.Path(args.json or work / "gpu_vs_implicit.json")
    path.write_text(json.dumps(report, indent=1, default=float))
    seconds = report["run"]["seconds"]
    print(f"\n{len(report['sections'])} rows in {seconds:.0f} s; figures in {path}")
    return 0


if __name__ == "__main__":
    main_or_child(main, sections.CHILDREN)
