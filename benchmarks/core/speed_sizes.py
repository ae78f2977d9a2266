"""The sizes of `benchmarks.speed` and what one run prepares before its sections: the power-law
matrices generated on the device (with the device's peaks), Gowalla read on the host, and ours'
TrainConfig per size, d and solve form."""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import time
from typing import Any, Sequence

from benchmarks.core import paths, sections, solve_forms
from benchmarks.core.children import Runner, error_line
from benchmarks.core.gowalla import read_gowalla
from benchmarks.core.section_rows import GOWALLA
from benchmarks.core.tables import fmt

DE_SPARSE = "de-sparse"


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
    # MovieLens-1M's shape: the CPU's small size
    "ml1m": Size(6_040, 3_706, 1_000_000, 3, (64,)),
    "10m": Size(400_000, 100_000, 10_000_000, 3),
    "25m": Size(1_000_000, 250_000, 25_000_000, 3),
    # WebGraph in-sparse
    "149m": Size(1_500_000, 1_500_000, 149_000_000, 2),
}
GOWALLA_DIMS = (64, 1024)
NAMES = (GOWALLA, *SIZES, DE_SPARSE)


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


def plan_sections(args: argparse.Namespace, work: pathlib.Path) -> list:
    """(size, d, config, {form: config}) of every power-law and Gowalla section, configs checked
    before any work; a form's model directory is named by its whole variant."""
    plan = []
    for size in args.size_list:
        if size == DE_SPARSE:
            continue
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
            report["data"][GOWALLA] = {"error": error_line(e)}
    for size in args.size_list:
        if size == DE_SPARSE:
            continue
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
