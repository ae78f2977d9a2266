"""WebGraph de-sparse on one GPU, from a matrix made on the device to Recall@50; implicit beside it.

Made for the lent GPU machine (`../shared/gpu/README.md`), runnable alone within 8 minutes on one
H100 (`--budget_s`); `--scale` shrinks every size (rows, columns and links alike) for a try on CPU:

    python3 -m benchmarks.de_sparse    # 19.7M x 19.7M, 1.19B links, d=128, bfloat16, 8 epochs
    python3 -m benchmarks.de_sparse --scale 0.0001 --dim 8 --epochs 2 --implicit cpu   # a toy

Each step is a child process (`benchmarks.core.de_sparse_children`; a failure, an out-of-memory
or a timeout is one line and the run goes on), every phase timed apart with the peak device
memory (JAX's statistics) and host RSS so far:
1. data: the power-law matrix generated on the device (`benchmarks.core.power_law`), then a
   strong-generalization test split on the device by the pipeline's rule (`core.strong_split`:
   `--test_fraction` of the rows with >= 2 links held out whole, `--holdout_fraction` of each held
   row's links as its ground truth), brought to the host and saved as .npy arrays;
2. ours: loaded, `dataset.in_memory` (its transpose), `train` (tables and planning, then each
   epoch with its compiling seconds, then the final checkpoint), then the test rows through the
   trainer's evaluation: folded in (`model.fold_in`), top K among every column
   (`evaluation.topk.top_k_rows`, `--topk` approximate or exact), `evaluation.metrics`
   (Recall@`--ks`, NDCG@`--ndcg_k`), and the other top K on `--sample_rows` rows for the
   approximate top K's recall against exact;
3. implicit (its GPU model where its CUDA extension loads, else its CPU model, said) on the same
   training matrix for `--implicit_epochs` epochs at our objective, with what is left of the
   budget (at least `--implicit_s`): its seconds per epoch, or its failure in one line (its float32
   factors alone are 20 GB at this size).
One table of the phases, the outcome lines, and `--json` (default WORK/de_sparse.json).
The data and ours children's JAX may take `--mem_fraction` of the GPU (they run one at a time,
whatever XLA_PYTHON_CLIENT_MEM_FRACTION says; implicit's child allocates nothing for JAX); the GPU
README's environment (wheels into `--site`, the `nvidia` libraries) is set up as in
`benchmarks.gpu_vs_implicit`.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import platform
import sys
import time
from typing import Any, Sequence

import numpy as np

from benchmarks.core import de_sparse_children, paths, sections
from benchmarks.core.children import Runner, add_wheel_args, children_env, main_or_child, one_line
from benchmarks.core.strong_split import HOLDOUT_FRACTION, TEST_FRACTION
from benchmarks.core.tables import fmt, print_table

MODULE = "benchmarks.de_sparse"
ROWS, COLS, LINKS = 19_700_000, 19_700_000, 1_190_000_000  # the WebGraph de-sparse variant


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__.split("\n")[0])
    p.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="rows, columns and links times this (1: the de-sparse size)",
    )
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--table_dtype", default="bfloat16", choices=("bfloat16", "float32"))
    p.add_argument(
        "--ours", action="append", default=[], metavar="KEY=VALUE", help="a TrainConfig field"
    )
    p.add_argument("--test_fraction", type=float, default=TEST_FRACTION)
    p.add_argument("--holdout_fraction", type=float, default=HOLDOUT_FRACTION)
    p.add_argument(
        "--topk",
        choices=("approx", "exact"),
        default="exact",
        help="the top K of every test row (the other on --sample_rows rows; "
        "approx_max_k is approximate on TPU only, elsewhere XLA sorts each block)",
    )
    p.add_argument("--recall_target", type=float, default=0.95, help="of the approximate top K")
    p.add_argument(
        "--blocks",
        action="store_true",
        help="on CPU too, the accelerators' block loop (default there: the threshold scan)",
    )
    p.add_argument("--ks", default="20,50", help="Recall@K cut-offs")
    p.add_argument("--ndcg_k", type=int, default=100, help="NDCG cut-off (0: none)")
    p.add_argument(
        "--sample_rows",
        type=int,
        default=4096,
        help="test rows ranked both ways, for the approximate top K's recall",
    )
    p.add_argument(
        "--eval_rows", type=int, default=0, help="evaluate the first N test rows (0: all)"
    )
    p.add_argument("--implicit", choices=("auto", "gpu", "cpu", "off"), default="auto")
    p.add_argument("--implicit_epochs", type=int, default=2)
    p.add_argument(
        "--implicit_s", type=float, default=90, help="seconds of the budget kept for implicit"
    )
    p.add_argument("--budget_s", type=float, default=470, help="the whole run's seconds")
    p.add_argument(
        "--mem_fraction",
        default="0.9",
        help="XLA_PYTHON_CLIENT_MEM_FRACTION of the data and ours children, whatever "
        "the environment says (they run alone on the device)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work", default=str(paths.work_dir("de_sparse")))
    p.add_argument("--json", default="", help="every figure (default WORK/de_sparse.json)")
    add_wheel_args(p)
    args = p.parse_args(argv)
    try:
        args.k_list = [int(k) for k in args.ks.split(",") if k.strip()]
    except ValueError:
        p.error(f"--ks: expected comma-separated integers, got {args.ks!r}")
    checks = {
        "--scale": 0 < args.scale <= 1,
        "--dim": args.dim > 0,
        "--epochs": args.epochs > 0,
        "--ks": bool(args.k_list) and min(args.k_list) > 0,
        "--ndcg_k": args.ndcg_k >= 0,
        "--sample_rows": args.sample_rows > 0,
        "--eval_rows": args.eval_rows >= 0,
        "--test_fraction": 0 < args.test_fraction < 1,
        "--holdout_fraction": 0 < args.holdout_fraction < 1,
        "--implicit_epochs": args.implicit_epochs > 0,
    }
    bad = [flag for flag, ok in checks.items() if not ok]
    if bad:
        p.error(f"{bad[0]}: out of range ({getattr(args, bad[0][2:])!r})")
    args.size = tuple(max(16, round(n * args.scale)) for n in (ROWS, COLS, LINKS))
    return args


def train_config(args: argparse.Namespace, model_dir: str):
    """Ours: the trainer's defaults at d, epochs and table dtype; no evaluation, training loss,
    progress or checkpoint before the last epoch's; then `--ours`."""
    values = {
        "data": "de-sparse",
        "model_dir": model_dir,
        "dim": args.dim,
        "epochs": args.epochs,
        "table_dtype": args.table_dtype,
        "eval_every": 0,
        "train_loss_every": 0,
        "checkpoint_every": 0,
        "progress": False,
        "log_level": "warning",
    }
    return sections.typed_config(values, args.ours)


def add_phases(report: dict, lines: list[dict], step: str) -> None:
    """A child's phase lines into the report, each printed as it is added."""
    for line in lines:
        if "phase" in line:
            report["phases"].append(dict(line, step=step))
            print(f"{step}: {line['phase']} {line['seconds']:.2f} s", flush=True)


def result(lines: list[dict]) -> dict:
    return sections.merged_result(lines)


def summary_lines(report: dict) -> list[str]:
    """The run's outcome in a few lines: sizes, ours' epochs, the evaluation, implicit."""
    data, ours, implicit = (report[k] for k in ("data", "ours", "implicit"))
    out = []
    if data.get("train_nnz") is not None:
        out.append(
            f"matrix {data['rows']:,} x {data['cols']:,}, {data['nnz']:,} links: training "
            f"{data['train_nnz']:,}; test rows {data['test_rows']:,} (fold-in links "
            f"{data['fold_in_links']:,}, held out {data['held_links']:,})"
        )
    epochs = ours.get("epochs_s") or []
    if epochs:
        later = float(np.median(epochs[1:])) if len(epochs) > 1 else None
        out.append(
            f"ours ({ours.get('form')}, {ours.get('table_dtype')} tables): epoch 1 "
            f"{epochs[0]:.2f} s (compiling {fmt(ours['compile_s'][0], '.2f')} s), later "
            f"epochs {fmt(later, '.3f')} s (median), {len(epochs)} epochs "
            f"{sum(epochs):.1f} s"
        )
    if ours.get("rows") is not None:
        k_metrics = ", ".join(
            f"{name} {ours[name]:.4f}"
            for name in ours
            if name.startswith(("recall@", "recall_gt@", "ndcg@"))
        )
        cut = (
            f" (the first, within the budget, of {ours['test_rows']:,})"
            if ours["rows"] < ours["test_rows"]
            else ""
        )
        out.append(
            f"evaluation of {ours['rows']:,} test rows{cut} (top {ours['k']}, "
            f"{ours['topk']}): {k_metrics}; approximate top {ours['k']} recall against "
            f"exact {ours['approx_recall']:.4f} on {ours['sample_rows']:,} rows "
            f"(target {ours['recall_target']})"
        )
    for p in report.get("phases", []):
        parts = [n[:-2] for n in p if n.endswith("_s") and not n.endswith("cpu_s")]
        if p["phase"] == "tables and plan" and parts:  # the trainer's own phases inside it
            out.append(
                "tables and plan: "
                + ", ".join(
                    f"{n} {p[n + '_s']:.2f} s ({fmt(p.get(n + '_cpu_s'), '.2f')} CPU s)"
                    for n in parts
                )
            )
        if p.get("blocks"):
            out.append(
                f"{p['phase']}: the device scored {p['blocks_scored']:,} of {p['blocks']:,} "
                f"column blocks ({100 * p['blocks_scored'] / p['blocks']:.1f}%; the norm bound "
                f"ruled out the rest)"
            )
    for who, r in (("ours", ours), ("data", data)):
        if r.get("error"):
            out.append(f"{who}: {r['error']}")
    out.append(implicit_outcome(implicit))
    return out


def implicit_outcome(r: dict) -> str:
    """implicit's outcome in one line: seconds per epoch, or its failure with the epochs it did."""
    if r.get("skipped"):
        return f"implicit: {r['skipped']}"
    who = r.get("who") or "implicit"
    seconds = r.get("epochs_s") or []
    done = ", ".join(f"{s:.1f}" for s in seconds)
    timed = f"{len(seconds)} epoch(s) {done} s" if seconds else "no epoch finished"
    memory = (
        f", peak device {r['peak_device_gib']:.1f} GiB ({r['peak_device_source']})"
        if r.get("peak_device_gib")
        else ""
    )
    if r.get("error"):
        return f"{who}: failed: {r['error']} ({timed})"
    return f"{who}: {timed}, set-up {fmt(r.get('setup_s'), '.1f')} s{memory}"


def run(args: argparse.Namespace, config, report: dict, start: float) -> None:
    """The three children, in order, within the budget."""
    work = pathlib.Path(args.work)
    env = children_env(args)
    ours_env = dict(env, XLA_PYTHON_CLIENT_MEM_FRACTION=args.mem_fraction)
    deadline = start + args.budget_s
    runner = Runner(MODULE, work, ours_env, deadline, args.budget_s)
    report["failures"] = runner.failures  # each failed child's last lines of output, as they come
    rows, cols, nnz = args.size
    data_dir = str(work / "data")
    lines, error, child_s = runner(
        "data",
        "data",
        {
            "rows": rows,
            "cols": cols,
            "nnz": nnz,
            "seed": args.seed,
            "data": data_dir,
            "test_fraction": args.test_fraction,
            "holdout_fraction": args.holdout_fraction,
        },
    )
    report["data"] = dict(result(lines), error=error, child_s=child_s)
    report["device"] = next((line["device"] for line in lines if "device" in line), {})
    add_phases(report, lines, "data")
    if error or "train_nnz" not in report["data"]:
        report["ours"] = {"error": "not run: no data"}
        report["implicit"] = {"skipped": "not run: no data"}
        return
    runner.section_timeout = max(30.0, deadline - time.monotonic() - args.implicit_s)
    ranking = {
        "ks": args.k_list,
        "ndcg_k": args.ndcg_k,
        "approx": args.topk == "approx",
        "recall_target": args.recall_target,
        "sample_rows": args.sample_rows,
        "scan": False if args.blocks else None,
    }
    lines, error, child_s = runner(
        "ours",
        "ours",
        {
            "data": data_dir,
            "config": config.to_dict(),
            "ranking": ranking,
            "eval_rows": args.eval_rows,
        },
    )
    report["ours"] = dict(result(lines), error=error, child_s=child_s)
    add_phases(report, lines, "ours")
    if args.implicit == "off":
        report["implicit"] = {"skipped": "not run (--implicit off)"}
        return
    runner.section_timeout = args.budget_s
    spec = {
        "data": data_dir,
        "implicit": args.implicit,
        "score": False,
        "config": dict(config.to_dict(), epochs=args.implicit_epochs),
    }
    # implicit's child uses JAX only to score: it must not take the GPU's memory
    lines, error, child_s = runner(
        "implicit", "implicit", spec, dict(env, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    )
    seconds = [line["seconds"] for line in lines if "epoch" in line]
    report["implicit"] = dict({"epochs_s": seconds}, **result(lines), error=error, child_s=child_s)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    start = time.monotonic()
    work = pathlib.Path(args.work)
    try:  # a bad --ours fails here in one line, before any work
        config = train_config(args, str(work / "model"))
    except ValueError as e:
        print(f"{MODULE}: error: {one_line(e)}", file=sys.stderr)
        return 2
    work.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "run": {
            "argv": sys.argv[1:] if argv is None else list(argv),
            "host": platform.node(),
            "scale": args.scale,
            "size": list(args.size),
            "budget_s": args.budget_s,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
        "phases": [],
        "data": {},
        "ours": {},
        "implicit": {},
    }
    run(args, config, report, start)
    report["run"]["seconds"] = time.monotonic() - start
    device = report.get("device", {})
    print(
        f"\nde-sparse at scale {args.scale:g} on {device.get('device_kind', '?')} "
        f"({device.get('platform', '?')}), d={args.dim}, {args.table_dtype} tables"
    )
    print_table(
        [
            ("step", "step", "", -5),
            ("phase", "phase", "", -34),
            ("seconds", "seconds", ".2f", 9),
            ("dev GiB", "peak_device_gib", ".2f", 8),
            ("host GiB", "peak_host_gib", ".2f", 8),
            ("compile s", "compile_s", ".2f", 9),
        ],
        report["phases"],
    )
    print("dev GiB, host GiB: the child's peak so far (JAX's peak_bytes_in_use; peak RSS)\n")
    report["summary"] = summary_lines(report)
    print("\n".join(report["summary"]))
    path = pathlib.Path(args.json or work / "de_sparse.json")
    path.write_text(json.dumps(report, indent=1, default=float))
    print(f"\n{report['run']['seconds']:.0f} s in all; figures in {path}")
    return 0


if __name__ == "__main__":
    main_or_child(main, de_sparse_children.CHILDREN)
