"""One section of a trainer-against-implicit run, each in its own child process (`children.Runner`):
the device's peaks and the matrices generated on it, ours on a saved CSR matrix, implicit on it.

A child reads its spec (JSON) and appends JSON lines to the spec's `out` as it goes (epoch seconds,
then a `result`), so that a failure, an out-of-memory kill or a timeout keeps what came before.
Matrices are saved as .npy arrays (`train_indptr`, `train_cols`, and for scoring `test_indptr`,
`test_cols`) beside a meta.json of their shape and facts.
"""

from __future__ import annotations

import glob
import json
import os
import pathlib
import shutil
import tempfile
import time
from typing import Any, Sequence

import numpy as np

from benchmarks.core import implicit_als, machine, power_law
from benchmarks.core.children import error_line, write_line
from benchmarks.core.gowalla import score_trained_rows, test_rows

# seconds kept free around the cost analysis's estimate
COST_MARGIN_S = 10.0


def typed_config(values: dict[str, Any], overrides: Sequence[str] = ()):
    """A checked TrainConfig from `values` and then `overrides` (`KEY=VALUE`, any field), typed as
    a config file is."""
    from alx_trainer.cli.common import parse_dataclass_args
    from alx_trainer.config import TrainConfig

    values = dict(values)
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--ours: expected KEY=VALUE, got {item!r}")
        values[key.strip()] = value.strip()
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(values, f)
        f.flush()
        return parse_dataclass_args(TrainConfig, ["--config", f.name]).validate()


def save_matrix(folder: pathlib.Path, arrays: dict[str, np.ndarray | int], facts: dict) -> dict:
    """Arrays as .npy files and facts (with the shape) as meta.json; the meta, with the seconds to
    save."""
    t = time.perf_counter()
    folder.mkdir(parents=True, exist_ok=True)
    for name, value in arrays.items():
        if isinstance(value, np.ndarray):
            np.save(folder / f"{name}.npy", value)
    meta = dict(
        facts,
        rows=int(arrays["num_rows"]),
        cols=int(arrays["num_cols"]),
        nnz=int(len(arrays["train_cols"])),
        save_s=time.perf_counter() - t,
    )
    (folder / "meta.json").write_text(json.dumps(meta))
    return meta


def load_matrix(folder: str) -> dict[str, Any]:
    """A saved matrix: its meta and its arrays by name."""
    out: dict[str, Any] = json.loads((pathlib.Path(folder) / "meta.json").read_text())
    for path in glob.glob(os.path.join(folder, "*.npy")):
        out[pathlib.Path(path).stem] = np.load(path)
    return out


def device_child(spec: dict, out: str) -> None:
    """The device's peaks, then each power-law size of `spec['generate']` (name -> rows, cols, nnz)
    generated on it and saved (one failure each, not all)."""
    import jax

    device = jax.devices()[0]
    report: dict[str, Any] = {
        "platform": device.platform,
        "device_kind": device.device_kind,
        "devices": jax.device_count(),
        "jax": jax.__version__,
        "peaks": {},
    }
    n = spec["peak_n"]
    for name, measure in (
        ("matmul_bf16_flop_s", lambda: machine.matmul_rate(n, "bfloat16", "DEFAULT")),
        ("matmul_f32_flop_s", lambda: machine.matmul_rate(n, "float32")),
        ("matmul_f32_default_flop_s", lambda: machine.matmul_rate(n, "float32", "DEFAULT")),
        ("copy_bytes_s", lambda: machine.copy_rate(spec["copy_mib"])),
    ):
        try:
            report["peaks"][name] = measure()
        # one line, and the run goes on
        except Exception as e:
            report["peaks"][name] = None
            report["peaks"][f"{name}_error"] = error_line(e)
    write_line(out, {"device": report})
    for size, (rows, cols, nnz) in spec["generate"].items():
        try:
            indptr, col_ids, facts = power_law.power_law_csr(
                spec["seed"], rows, cols, nnz, on="device"
            )
            arrays = {
                "num_rows": rows,
                "num_cols": cols,
                "train_indptr": indptr,
                "train_cols": col_ids,
            }
            folder = pathlib.Path(spec["work"]) / "data" / size
            meta = save_matrix(folder, arrays, dict(facts, source="jax.random"))
        except Exception as e:
            meta = {"error": error_line(e)}
        write_line(out, {"data": {size: meta}})


def ours_child(spec: dict, out: str) -> None:
    """Ours on one saved matrix: per-epoch seconds as they come, then timings, memory, and scores
    where the matrix has a test split (`spec['score']`)."""
    from alx_trainer import execution
    from alx_trainer.callbacks import Callback
    from alx_trainer.config import TrainConfig
    from alx_trainer.data.dataset import in_memory
    from alx_trainer.model import table_dtype
    from alx_trainer.train import train

    class EpochLine(Callback):
        def on_epoch_end(self, run, epoch: int, record: dict) -> None:
            write_line(out, {"epoch": epoch, "seconds": record["seconds"]})

    t = time.perf_counter()
    m = load_matrix(spec["data"])
    load_s = time.perf_counter() - t
    t = time.perf_counter()
    dataset = in_memory(spec["size"], m["train_indptr"], m["train_cols"], m["cols"])
    dataset_s = time.perf_counter() - t
    config = TrainConfig(**spec["config"])
    # on CPU, the devices the command line would split the host into (one per core for the
    # per-core path), before JAX starts; JAX's own elsewhere
    execution.start_cpu_devices(config, execution.dataset_links(dataset.stats))
    # a fresh run, never a resumed one
    shutil.rmtree(config.model_dir, ignore_errors=True)
    t = time.perf_counter()
    model = train(config, dataset=dataset, callbacks=[EpochLine()], tables=spec["score"])
    train_s = time.perf_counter() - t
    seconds = [r["seconds"] for r in model.metrics]
    dtype = np.dtype(table_dtype(config))
    result = dict(
        machine.device_memory(),
        load_s=load_s,
        dataset_s=dataset_s,
        setup_s=train_s - sum(seconds),
        epochs_s=seconds,
        table_bytes=int(dtype.itemsize),
        table_dtype=str(dtype),
    )
    write_line(out, {"result": result})
    if spec["score"]:
        write_line(
            out, {"result": score_trained_rows(model.row_table, model.col_table, test_rows(m))}
        )
    # last: its compiles must not disturb the timings
    if spec.get("cost"):
        compile_s = model.metrics[0].get("compile_seconds", 0.0) if model.metrics else 0.0
        estimate = result["setup_s"] + (config.cg_iters + 1) * compile_s + COST_MARGIN_S
        left = spec.get("timeout_s", float("inf")) - (time.monotonic() - spec["started"])
        write_line(out, {"result": xla_cost(config, dataset, estimate, left - COST_MARGIN_S)})


def xla_cost(config, dataset, estimate_s: float, left_s: float) -> dict:
    """XLA's cost analysis of one epoch (`alx_trainer.train.epoch_cost`: its programs compiled
    with their loops unrolled) as `xla_*` figures, or a one-line `xla_note` when it would take
    longer (`estimate_s`) than the `left_s` seconds the child has, or fails."""
    from alx_trainer.train import epoch_cost

    if estimate_s > left_s:
        return {
            "xla_note": f"XLA cost analysis skipped: about {estimate_s:.0f} s needed, "
            f"{max(left_s, 0):.0f} s left"
        }
    t = time.perf_counter()
    try:
        cost = epoch_cost(config, dataset)
    # one line, and the figures already written stand
    except Exception as e:
        return {"xla_note": f"XLA cost analysis failed: {error_line(e)}"}
    return {
        "xla_bytes_per_epoch": cost["bytes_per_epoch"],
        "xla_flops_per_epoch": cost["flops_per_epoch"],
        "xla_launches_per_epoch": cost["launches_per_epoch"],
        "xla_programs": cost["programs"],
        "xla_cost_s": time.perf_counter() - t,
    }


def implicit_child(spec: dict, out: str) -> None:
    """implicit at our objective: its GPU model (or its CPU model standing in), the same epochs and
    CG steps; scores where the matrix has a test split."""
    import implicit.gpu

    c = spec["config"]
    gpu = spec["implicit"] == "gpu" or (spec["implicit"] == "auto" and implicit.gpu.HAS_CUDA)
    t = time.perf_counter()
    m = load_matrix(spec["data"])
    matrix, regularization = implicit_als.implicit_problem(
        m["train_indptr"], m["train_cols"], m["cols"], c["alpha"], c["reg"], c["reg_exponent"]
    )
    load_s = time.perf_counter() - t
    if gpu:
        import rmm.statistics

        rmm.statistics.enable_statistics()
    model = implicit_als.implicit_model(
        c["dim"], regularization, c["epochs"], c["cg_iters"], gpu=gpu, seed=c["seed"]
    )
    seconds, setup_s = implicit_als.timed_fit(
        model, matrix, lambda epoch, s: write_line(out, {"epoch": epoch, "seconds": s})
    )
    result: dict[str, Any] = {
        "who": "implicit-gpu" if gpu else "implicit-cpu",
        "load_s": load_s,
        "epochs_s": seconds,
        "setup_s": setup_s,
        "table_bytes": 4,
        "table_dtype": "float32",
        "peak_device_gib": None,
        "regularization": regularization,
        "confidence": float(matrix.data[0]) if matrix.nnz else None,
    }
    if gpu:
        result.update(
            implicit_als.implicit_memory(rmm.statistics.get_statistics(), matrix, c["dim"])
        )
        model = model.to_cpu()
    # the timings stand even if scoring fails
    write_line(out, {"result": result})
    if spec["score"]:
        users, items = np.asarray(model.user_factors), np.asarray(model.item_factors)
        write_line(out, {"result": score_trained_rows(users, items, test_rows(m))})


CHILDREN = {"device": device_child, "ours": ours_child, "implicit": implicit_child}


def merged_result(lines: list[dict]) -> dict:
    """A child's result lines merged in order (timings first, then scores where they were made)."""
    result: dict = {}
    for line in lines:
        result.update(line.get("result", {}))
    return result


def section_figures(
    lines: list[dict], error: str | None, work: tuple[float, float], peaks: dict
) -> dict:
    """One trainer's figures from its child's lines: s/epoch (median after the first), rates,
    memory."""
    result = merged_result(lines)
    seconds = result.get("epochs_s") or [line["seconds"] for line in lines if "epoch" in line]
    timed = seconds[1:] or seconds
    s = float(np.median(timed)) if timed else None
    flops, byte_count = work
    f32, bf16, bw = (
        peaks.get(k) for k in ("matmul_f32_flop_s", "matmul_bf16_flop_s", "copy_bytes_s")
    )
    figures = {
        "s_per_epoch": s,
        "epochs_s": seconds,
        "error": error,
        "note": None,
        "flops_per_epoch": flops,
        "bytes_per_epoch": byte_count,
        "gflop_s": flops / s / 1e9 if s else None,
        "gb_s": byte_count / s / 1e9 if s else None,
        "pct_f32_peak": 100 * flops / s / f32 if s and f32 else None,
        "pct_bf16_peak": 100 * flops / s / bf16 if s and bf16 else None,
        "pct_copy_bw": 100 * byte_count / s / bw if s and bw else None,
    }
    xla_bytes, xla_flops = result.get("xla_bytes_per_epoch"), result.get("xla_flops_per_epoch")
    figures.update(
        xla_bytes_per_epoch=xla_bytes,
        xla_flops_per_epoch=xla_flops,
        xla_launches_per_epoch=result.get("xla_launches_per_epoch"),
        xla_cost_s=result.get("xla_cost_s"),
        xla_note=result.get("xla_note"),
        xla_bytes_ratio=xla_bytes / byte_count if xla_bytes is not None and byte_count else None,
        pct_copy_bw_xla=100 * xla_bytes / s / bw if xla_bytes is not None and s and bw else None,
        pct_f32_peak_xla=100 * xla_flops / s / f32 if xla_flops is not None and s and f32 else None,
        pct_bf16_peak_xla=(
            100 * xla_flops / s / bf16 if xla_flops is not None and s and bf16 else None
        ),
    )
    for key in (
        "who",
        "peak_device_gib",
        "peak_device_source",
        "device_limit_gib",
        "peak_host_gib",
        "table_dtype",
        "setup_s",
        "load_s",
        "dataset_s",
        "eval_s",
        "recall_gt@20",
        "recall@20",
        "ndcg@20",
        "regularization",
        "confidence",
    ):
        figures[key] = result.get(key)
    return figures
