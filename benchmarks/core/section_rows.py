"""The rows of `benchmarks.speed`: one trainer's section run in its child and turned
into a row of figures, the row's line as it comes, ours in each solve form compared, and all rows
as one table."""

from __future__ import annotations

import argparse

from benchmarks.core import sections, solve_forms
from benchmarks.core.children import Runner
from benchmarks.core.tables import print_table
from benchmarks.core.work import epoch_work

GOWALLA = "gowalla"


def run_section(
    runner: Runner,
    args: argparse.Namespace,
    report: dict,
    size: str,
    dim: int,
    config,
    who: str,
    name: str,
    cost: bool = False,
    variant: str = "auto",
) -> dict:
    """One trainer's child on one matrix at one d (log and spec files under `name`): its row;
    `cost`: XLA's cost analysis too. Ours' row is labelled with its whole solve-form `variant`
    ('auto': the default config; else `solve_forms.form_overrides`'s name, e.g. 'matvec:65536')."""
    meta, peaks = report["data"][size], report["device"].get("peaks", {})
    spec = {
        "size": size,
        "data": str(runner.work / "data" / size),
        "config": config.to_dict(),
        "implicit": args.implicit,
        "score": size == GOWALLA,
        "cost": cost,
    }
    # implicit's child uses JAX only to score, after the fit: it must not take the GPU's memory
    if who == "implicit":
        env = dict(runner.env, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    else:
        # ours as the command line runs it (huge pages where it would restart with them)
        env = dict(runner.env, **args.ours_env)
    lines, error, child_s = runner(who, name, spec, env)
    table_bytes = sections.merged_result(lines).get("table_bytes", 4)
    work = epoch_work(meta["rows"], meta["cols"], meta["nnz"], dim, config.cg_iters, table_bytes)
    figures = sections.section_figures(lines, error, work, peaks)
    figures["who"] = figures["who"] or ("ours" if who == "ours" else "implicit")
    figures["form"] = variant if who == "ours" else None
    if figures["who"] == "implicit-cpu" and report["device"].get("platform") == "gpu":
        figures["note"] = (
            f"implicit's CUDA model did not load: its CPU model stood in (logs/{name}.log)"
        )
    return dict(
        size=size,
        dim=dim,
        epochs=config.epochs,
        cg_iters=config.cg_iters,
        child_s=child_s,
        **figures,
    )


def add_row(report: dict, r: dict, implicit_s: float | None) -> None:
    """A row into the report with its ratio to implicit's seconds per epoch, and its line."""
    r["ratio"] = r["s_per_epoch"] / implicit_s if r["s_per_epoch"] and implicit_s else None
    report["sections"].append(r)
    print(
        f"{r['size']} d={r['dim']} {r['who']}"
        + (f" ({r['form']})" if r.get("form") else "")
        + ": "
        + (f"{r['s_per_epoch']:.4f} s/epoch" if r["s_per_epoch"] else "-")
        + (f", ratio {r['ratio']:.2f}" if r["ratio"] else "")
        + (f", Recall@20 {r['recall_gt@20']:.4f}" if r["recall_gt@20"] is not None else "")
        + (
            f", XLA {r['xla_bytes_per_epoch'] / 1e9:.3g} GB/epoch "
            f"({r['xla_bytes_ratio']:.2f}x the minimum)"
            if r["xla_bytes_ratio"]
            else ""
        )
        + (f"; {r['xla_note']}" if r["xla_note"] else "")
        + (f"; {r['error']}" if r["error"] else ""),
        flush=True,
    )


def compare_forms(
    runner: Runner,
    args: argparse.Namespace,
    report: dict,
    plan: list,
    implicit_s: dict[tuple[str, int], float | None],
) -> list[dict]:
    """Ours in each `--forms` solve form at the `--forms_at` points, after every section (so the
    comparison takes what is left of `--budget_s`), set against the default ('auto') row of the
    same point. Gowalla's points first: a form that loses recall there is no candidate at the
    other sizes either. Every row keeps its whole variant as its label."""
    points = sorted((p for p in plan if p[3]), key=lambda p: p[0] != GOWALLA)
    out, lost = [], set()
    for size, dim, _, forms in points:
        meta = report["data"].get(size, {})
        if "error" in meta or not meta:
            continue
        key = (size, dim, "ours", "auto")
        rows = [r for r in report["sections"] if (r["size"], r["dim"], r["who"], r["form"]) == key]
        for form, config in forms.items():
            name = f"{size}-d{dim}-ours-{form.replace(':', '-')}"
            r = run_section(runner, args, report, size, dim, config, "ours", name, variant=form)
            add_row(report, r, implicit_s.get((size, dim)))
            rows.append(r)
        choice = solve_forms.choose_form(rows, excluded=() if size == GOWALLA else sorted(lost))
        if size == GOWALLA:
            lost.update(f for f, why in choice["why_not"].items() if why.startswith("Recall@20"))
        auto_s = rows[0]["s_per_epoch"] if rows and rows[0]["form"] == "auto" else None
        choice.update(
            size=size,
            dim=dim,
            auto_s=auto_s,
            forms={
                r["form"]: {k: r[k] for k in ("s_per_epoch", "recall_gt@20", "error")} for r in rows
            },
        )
        out.append(choice)
        print("forms " + solve_forms.verdict(choice), flush=True)
    return out


def print_sections(rows: list[dict]) -> None:
    """The sections as one table, ours' rows labelled by their whole solve-form variant."""
    shown = [
        dict(
            r,
            who=r["who"] or "?",
            note=r["error"] or r["note"] or "",
            xla_gb=r["xla_bytes_per_epoch"] / 1e9 if r.get("xla_bytes_per_epoch") else None,
        )
        for r in rows
    ]
    print_table(
        [
            ("size", "size", "", -10),
            ("d", "dim", "", 5),
            ("who", "who", "", -12),
            ("form", "form", "", -16),
            ("s/epoch", "s_per_epoch", ".4f", 8),
            ("ratio", "ratio", ".2f", 6),
            ("dev GiB", "peak_device_gib", ".2f", 7),
            ("GFLOP/s", "gflop_s", ".0f", 8),
            ("%f32", "pct_f32_peak", ".1f", 5),
            ("%bf16", "pct_bf16_peak", ".1f", 5),
            ("GB/s", "gb_s", ".0f", 6),
            ("%copy", "pct_copy_bw", ".1f", 5),
            ("XLA GB", "xla_gb", ".3g", 6),
            ("xmin", "xla_bytes_ratio", ".2f", 5),
            ("%copyX", "pct_copy_bw_xla", ".1f", 6),
            ("R@20", "recall_gt@20", ".4f", 6),
            ("note", "note", "", -4),
        ],
        shown,
    )
    print(
        "GFLOP/s, %f32, %bf16, GB/s, %copy: the counted minimum work per epoch against the "
        "measured peaks; XLA GB: bytes accessed per epoch by XLA's cost analysis, xmin its ratio "
        "to the minimum, %copyX its share of the copy bandwidth (over 100: more than the chip "
        "can move in that time, so XLA's model, which charges whole tables to each gather and "
        "in-place scatter, not traffic)"
    )
