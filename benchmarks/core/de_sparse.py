"""The WebGraph de-sparse size of `benchmarks.speed` (`--sizes de-sparse`): from a matrix made on
the device to Recall@50, implicit beside it, within its own budget `--de_sparse_s`.

`--de_sparse_scale` shrinks every size (rows, columns and links alike) for a try on CPU. Each step
is a child process (`benchmarks.core.de_sparse_children`; a failure, an out-of-memory or a timeout
is one line and the run goes on), every phase timed apart with the peak device memory (JAX's
statistics) and host RSS so far:
1. data: the power-law matrix generated on the device (`benchmarks.core.power_law`), then a
   strong-generalization test split on the device by the pipeline's rule (`core.strong_split`:
   `--test_fraction` of the rows with >= 2 links held out whole, `--holdout_fraction` of each held
   row's links as its ground truth), brought to the host and saved as .npy arrays;
2. ours: loaded, `dataset.in_memory` (its transpose), `train` (tables and planning, then each
   epoch with its compiling seconds, then the final checkpoint), then the test rows through the
   trainer's evaluation: folded in (`model.fold_in`), top K among every column (`--topk`
   approximate or exact), Recall@`--ks` and NDCG@`--ndcg_k`, and the other top K on
   `--sample_rows` rows for the approximate top K's recall against exact. A run that cannot rank
   every test row within its budget says so: its figures are then of the first rows only;
3. implicit (its GPU model where its CUDA extension loads, else its CPU model, said) on the same
   training matrix for `--implicit_epochs` epochs at our objective, with what is left of the
   budget (at least `--implicit_s`; 0: implicit does not run at this size, while the other sizes
   keep it).
The data and ours children's JAX may take `--mem_fraction` of the GPU (they run one at a time,
whatever XLA_PYTHON_CLIENT_MEM_FRACTION says; implicit's child allocates nothing for JAX).
"""

from __future__ import annotations

import argparse
import pathlib
import time

import numpy as np

from benchmarks.core import sections
from benchmarks.core.children import Runner
from benchmarks.core.strong_split import HOLDOUT_FRACTION, TEST_FRACTION
from benchmarks.core.tables import fmt, print_table

# the WebGraph de-sparse variant
ROWS, COLS, LINKS = 19_700_000, 19_700_000, 1_190_000_000
DIM, EPOCHS = 128, 8


def add_args(p: argparse.ArgumentParser) -> None:
    """The de-sparse size's own flags, as one group of `p`."""
    g = p.add_argument_group("the de-sparse size (--sizes de-sparse)")
    g.add_argument(
        "--de_sparse_scale",
        type=float,
        default=1.0,
        help="rows, columns and links times this (1: the de-sparse size)",
    )
    g.add_argument(
        "--de_sparse_s", type=float, default=300, help="its seconds, after the other sizes'"
    )
    g.add_argument("--test_fraction", type=float, default=TEST_FRACTION)
    g.add_argument("--holdout_fraction", type=float, default=HOLDOUT_FRACTION)
    g.add_argument(
        "--topk",
        choices=("approx", "exact"),
        default="exact",
        help="the top K of every test row (the other on --sample_rows rows; "
        "approx_max_k is approximate on TPU only, elsewhere XLA sorts each block)",
    )
    g.add_argument("--recall_target", type=float, default=0.95, help="of the approximate top K")
    g.add_argument(
        "--blocks",
        action="store_true",
        help="on CPU too, the accelerators' block loop (default there: the threshold scan)",
    )
    g.add_argument("--ks", default="20,50", help="Recall@K cut-offs")
    g.add_argument("--ndcg_k", type=int, default=100, help="NDCG cut-off (0: none)")
    g.add_argument(
        "--sample_rows",
        type=int,
        default=4096,
        help="test rows ranked both ways, for the approximate top K's recall",
    )
    g.add_argument(
        "--eval_rows", type=int, default=0, help="evaluate the first N test rows (0: all)"
    )
    g.add_argument("--implicit_epochs", type=int, default=2)
    g.add_argument(
        "--implicit_s",
        type=float,
        default=90,
        help="seconds kept for implicit at this size (0: implicit not run here)",
    )
    g.add_argument(
        "--mem_fraction",
        default="0.9",
        help="XLA_PYTHON_CLIENT_MEM_FRACTION of the data and ours children, whatever "
        "the environment says (they run alone on the device)",
    )


def check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The group's flags checked (`p.error` on the first bad one); sets `k_list` and `de_size`."""
    try:
        args.k_list = [int(k) for k in args.ks.split(",") if k.strip()]
    except ValueError:
        p.error(f"--ks: expected comma-separated integers, got {args.ks!r}")
    checks = {
        "--de_sparse_scale": 0 < args.de_sparse_scale <= 1,
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
    args.de_size = tuple(max(16, round(n * args.de_sparse_scale)) for n in (ROWS, COLS, LINKS))


def train_config(args: argparse.Namespace, model_dir: str):
    """Ours: the trainer's defaults at d (the first of `--dims`, else 128), epochs (`--epochs`,
    else 8) and bfloat16 tables; no evaluation, training loss, progress or checkpoint before the
    last epoch's; then `--ours`."""
    values = {
        "data": "de-sparse",
        "model_dir": model_dir,
        "dim": (args.dim_list or [DIM])[0],
        "epochs": args.epochs or EPOCHS,
        "table_dtype": "bfloat16",
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
    data, ours, implicit = (report.get(k, {}) for k in ("data", "ours", "implicit"))
    out = []
    if ours.get("rows") is not None and ours["rows"] < ours["test_rows"]:
        out.append(
            f"INCOMPLETE: ranked {ours['rows']:,} of {ours['test_rows']:,} test rows within the "
            "budget; the evaluation's figures below are of those rows only, not the run's result"
        )
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
        # the trainer's own phases inside it
        if p["phase"] == "tables and plan" and parts:
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


def run(args: argparse.Namespace, runner: Runner, work: pathlib.Path) -> dict:
    """The three children, in order, before `runner.deadline` (its env: the run's children's);
    the section's report (phases, data, ours, implicit, summary), printed."""
    config = train_config(args, str(work / "model"))
    report: dict = {"size": list(args.de_size), "phases": [], "data": {}, "ours": {}}
    ours_env = dict(runner.env, **args.ours_env, XLA_PYTHON_CLIENT_MEM_FRACTION=args.mem_fraction)
    rows, cols, nnz = args.de_size
    data_dir = str(work / "data")
    spec = {"rows": rows, "cols": cols, "nnz": nnz, "seed": args.seed, "data": data_dir}
    spec.update(test_fraction=args.test_fraction, holdout_fraction=args.holdout_fraction)
    runner.section_timeout = runner.deadline - time.monotonic()
    lines, error, child_s = runner("ds-data", "de-sparse-data", spec, ours_env)
    report["data"] = dict(result(lines), error=error, child_s=child_s)
    report["device"] = next((line["device"] for line in lines if "device" in line), {})
    add_phases(report, lines, "data")
    if error or "train_nnz" not in report["data"]:
        report["ours"] = {"error": "not run: no data"}
        report["implicit"] = {"skipped": "not run: no data"}
        return finish(args, report)
    # implicit's reserve is kept only when implicit runs at this size
    runs_implicit = args.implicit != "off" and args.implicit_s > 0
    reserve = args.implicit_s if runs_implicit else 0.0
    runner.section_timeout = max(30.0, runner.deadline - time.monotonic() - reserve)
    ranking = {
        "ks": args.k_list,
        "ndcg_k": args.ndcg_k,
        "approx": args.topk == "approx",
        "recall_target": args.recall_target,
        "sample_rows": args.sample_rows,
        "scan": False if args.blocks else None,
    }
    spec = {"data": data_dir, "config": config.to_dict(), "ranking": ranking}
    lines, error, child_s = runner(
        "ds-ours", "de-sparse-ours", dict(spec, eval_rows=args.eval_rows), ours_env
    )
    report["ours"] = dict(result(lines), error=error, child_s=child_s)
    add_phases(report, lines, "ours")
    if not runs_implicit:
        why = "--implicit off" if args.implicit == "off" else "--implicit_s 0"
        report["implicit"] = {"skipped": f"not run ({why})"}
        return finish(args, report)
    runner.section_timeout = runner.deadline - time.monotonic()
    spec = {
        "data": data_dir,
        "implicit": args.implicit,
        "score": False,
        "config": dict(config.to_dict(), epochs=args.implicit_epochs),
    }
    # implicit's child uses JAX only to score: it must not take the GPU's memory
    env = dict(runner.env, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    lines, error, child_s = runner("implicit", "de-sparse-implicit", spec, env)
    seconds = [line["seconds"] for line in lines if "epoch" in line]
    report["implicit"] = dict({"epochs_s": seconds}, **result(lines), error=error, child_s=child_s)
    return finish(args, report)


def finish(args: argparse.Namespace, report: dict) -> dict:
    """The section's phases as a table and its summary lines, printed; the report."""
    device = report.get("device", {})
    print(
        f"\nde-sparse at scale {args.de_sparse_scale:g} on {device.get('device_kind', '?')} "
        f"({device.get('platform', '?')}), bfloat16 tables"
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
    print("\n".join(report["summary"]), flush=True)
    return report
