"""The solve forms of our CG compared on an accelerator: what each runs, and which is fastest
without losing recall (the figures that set `cg_form` 'auto', `alx_trainer/ops/spec.py`)."""

from __future__ import annotations

from typing import Sequence

from benchmarks.core.tables import fmt

# TrainConfig.matmul_precision's, less 'auto'
EXPLICIT_PRECISIONS = ("float32", "tf32", "bfloat16")
# a form whose Gowalla Recall@20 is lower than the best's by more is out
RECALL_TOLERANCE = 0.002
# 65,536 ids a batch: the accelerator path's earlier size
SMALL_BATCHES = ["piece_len=16", "batch_pieces=4096"]


def form_overrides(form: str) -> list[str]:
    """The `--ours` overrides of one solve form (XLA's forms): 'matvec' (matrix-free CG by XLA's
    fusions), 'matvec:65536' (the same in batches of 65,536 ids, the accelerator path's size before
    it took batches as large as the data needs) or 'explicit:PRECISION' (d x d normal matrices
    whose h h^T products run at PRECISION)."""
    kind, _, variant = form.partition(":")
    if kind == "matvec" and variant in ("", "65536"):
        return ["cg_form=matvec", *(SMALL_BATCHES if variant else [])]
    if kind == "explicit" and variant in EXPLICIT_PRECISIONS:
        return ["cg_form=explicit", f"matmul_precision={variant}"]
    raise ValueError(
        f"--forms: expected 'matvec', 'matvec:65536' or 'explicit:' with one of "
        f"{EXPLICIT_PRECISIONS}, got {form!r}"
    )


def forms_point(item: str, sizes: Sequence[str]) -> tuple[str, int | None]:
    """One `--forms_at` entry: 'SIZE:D' as (size, d), 'SIZE' as (size, None) (its every d)."""
    size, sep, dim = item.partition(":")
    if size not in sizes or sep and not dim.isdigit():
        raise ValueError(
            f"--forms_at: expected SIZE or SIZE:D with SIZE of {list(sizes)}, got {item!r}"
        )
    return size, int(dim) if sep else None


def choose_form(
    rows: Sequence[dict], tolerance: float = RECALL_TOLERANCE, excluded: Sequence[str] = ()
) -> dict:
    """The fastest solve form among `rows` (ours at one size and d, one row per form).

    A form is a candidate when it was timed, is not in `excluded` (forms that lost recall elsewhere
    in the run), and, where recall was scored, its Recall@20 is at most `tolerance` below the best
    form's there. Returns `fastest` (None when no form qualifies), its `s_per_epoch` and recall,
    and `why_not`: the reason each other form was passed over.
    """
    best = max((r["recall_gt@20"] for r in rows if r.get("recall_gt@20") is not None), default=None)
    why_not: dict[str, str] = {}
    candidates = []
    for r in rows:
        recall = r.get("recall_gt@20")
        if not r.get("s_per_epoch"):
            why_not[r["form"]] = r.get("error") or "not timed"
        elif r["form"] in excluded:
            why_not[r["form"]] = f"lost more than {tolerance} Recall@20 on Gowalla"
        elif best is not None and (recall is None or recall < best - tolerance):
            why_not[r["form"]] = f"Recall@20 {fmt(recall, '.4f')} < best {best:.4f} - {tolerance}"
        else:
            candidates.append(r)
    fastest = min(candidates, key=lambda r: r["s_per_epoch"], default=None)
    for r in candidates:
        if r is not fastest:
            why_not[r["form"]] = f"slower: {r['s_per_epoch'] / fastest['s_per_epoch']:.2f}x"
    return {
        "fastest": fastest and fastest["form"],
        "s_per_epoch": fastest and fastest["s_per_epoch"],
        "recall_gt@20": fastest and fastest.get("recall_gt@20"),
        "why_not": why_not,
    }


def verdict(c: dict) -> str:
    """One compared point in a line: the fastest candidate by its whole variant, the default
    ('auto') row's seconds against it, why each other form lost."""
    fastest = f"{c['fastest']} {c['s_per_epoch']:.4f} s/epoch" if c["fastest"] else "none"
    if c["auto_s"] and c["s_per_epoch"]:
        auto = f"auto {c['auto_s']:.4f} s/epoch, {c['auto_s'] / c['s_per_epoch']:.2f}x the fastest"
    else:
        auto = "auto not timed"
    lost = "; ".join(f"{form}: {why}" for form, why in c["why_not"].items())
    return f"{c['size']} d={c['dim']}: fastest {fastest} ({auto})" + (f"; {lost}" if lost else "")


def print_forms(choices: list[dict]) -> None:
    """Per compared (size, d): `verdict`."""
    if choices:
        print(
            f"\nsolve forms (fastest of those within {RECALL_TOLERANCE} of the best Gowalla "
            "Recall@20):"
        )
    for c in choices:
        print("  " + verdict(c))
