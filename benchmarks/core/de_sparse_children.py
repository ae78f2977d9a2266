"""The children of the de-sparse size (`benchmarks.core.de_sparse`), each its own process
(`children.Runner`): the matrix and its strong-generalization test split made on the device and
saved; ours trained on it and its test rows evaluated. (implicit on the same training matrix is
`sections.implicit_child`.)

A child appends JSON lines to its spec's `out` as it goes: `{"phase": NAME, "seconds": S, ...}`
per phase with the peak device memory (JAX's `peak_bytes_in_use`, where the backend keeps it) and
the peak host RSS so far, then `{"result": ...}`, so that a failure or a timeout keeps what came
before.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import time
from typing import Any, Callable

import numpy as np

from benchmarks.core import machine
from benchmarks.core.children import own_peak_gib, write_line

Phase = Callable[..., None]
# test rows ranked between two looks at the clock
EVAL_CHUNK = 1 << 18
# share of a child's time kept for the metrics and the sample after ranking
EVAL_RESERVE = 0.15


def phase_writer(out: str) -> Phase:
    """`phase(name, seconds, **figures)`: one phase's line, with the peak memories so far."""

    def phase(name: str, seconds: float, **figures: Any) -> None:
        host = own_peak_gib()
        device = machine.device_memory()["peak_device_gib"]
        write_line(
            out,
            {
                "phase": name,
                "seconds": seconds,
                "peak_device_gib": device,
                "peak_host_gib": host,
                **figures,
            },
        )

    return phase


def data_child(spec: dict, out: str) -> None:
    """The power-law matrix (`power_law.device_matrix`) and its split (`strong_split`) made on the
    device, brought to the host and saved as .npy arrays beside a meta.json."""
    import jax

    from benchmarks.core import power_law, strong_split

    phase = phase_writer(out)
    rows, cols, nnz = spec["rows"], spec["cols"], spec["nnz"]
    device = jax.devices()[0]
    write_line(
        out,
        {
            "device": {
                "platform": device.platform,
                "device_kind": device.device_kind,
                "jax": jax.__version__,
            }
        },
    )
    t = time.perf_counter()
    indptr, col_ids, facts = power_law.device_matrix(spec["seed"], rows, cols, nnz)
    phase("generate", time.perf_counter() - t, draws=facts["draws"])
    t = time.perf_counter()
    parts = strong_split.device_split(
        indptr,
        col_ids,
        jax.random.key(spec["seed"] + 1),
        spec["test_fraction"],
        spec["holdout_fraction"],
    )
    jax.block_until_ready(parts)
    phase("split", time.perf_counter() - t)
    del indptr, col_ids
    t = time.perf_counter()
    host = {name: np.asarray(value) for name, value in parts.items()}
    del parts
    phase("to host", time.perf_counter() - t)
    t = time.perf_counter()
    folder = pathlib.Path(spec["data"])
    folder.mkdir(parents=True, exist_ok=True)
    for name, value in host.items():
        np.save(folder / f"{name}.npy", value)
    meta = {
        "rows": rows,
        "cols": cols,
        "nnz": nnz,
        "train_nnz": len(host["train_cols"]),
        "test_rows": len(host["test_rows"]),
        "fold_in_links": len(host["fold_cols"]),
        "held_links": len(host["gt_cols"]),
    }
    (folder / "meta.json").write_text(json.dumps(meta))
    phase("save", time.perf_counter() - t)
    write_line(out, {"result": meta})


def ours_child(spec: dict, out: str) -> None:
    """Ours on the saved training matrix (`dataset.in_memory`, `train`), every phase timed apart,
    then its test rows evaluated (`evaluate_test`)."""
    from alx_trainer import phase_times
    from alx_trainer.callbacks import Callback
    from alx_trainer.config import TrainConfig
    from alx_trainer.data.dataset import in_memory
    from alx_trainer.train import train
    from webgraph_contract.ragged import RaggedRows

    phase = phase_writer(out)
    folder = pathlib.Path(spec["data"])
    t = time.perf_counter()
    meta = json.loads((folder / "meta.json").read_text())
    m = {
        name: np.load(folder / f"{name}.npy")
        for name in (
            "train_indptr",
            "train_cols",
            "fold_indptr",
            "fold_cols",
            "gt_indptr",
            "gt_cols",
        )
    }
    phase("load", time.perf_counter() - t)
    t = time.perf_counter()
    dataset = in_memory("de-sparse", m.pop("train_indptr"), m.pop("train_cols"), meta["cols"])
    phase("transpose (in_memory)", time.perf_counter() - t)
    config = TrainConfig(**spec["config"])
    # a fresh run, never a resumed one
    shutil.rmtree(config.model_dir, ignore_errors=True)
    marks = {"start": time.perf_counter()}

    class Phases(Callback):
        def on_train_begin(self, run) -> None:
            # the trainer's own phases so far: init, read, plan, pack
            parts = {
                f"{name}_{kind}": round(v, 2)
                for name, both in phase_times.totals().items()
                for kind, v in zip(("s", "cpu_s"), both)
                if v is not None
            }
            phase("tables and plan", time.perf_counter() - marks["start"], **parts)

        def on_epoch_end(self, run, epoch: int, record: dict) -> None:
            marks["end"] = time.perf_counter()
            phase(f"epoch {epoch}", record["seconds"], compile_s=record.get("compile_seconds"))

    model = train(config, dataset=dataset, callbacks=[Phases()])
    # the last epoch's save ran before the epoch's hooks marked its end; the tables came after it
    phase("checkpoint", phase_times.totals().get("checkpoint", (0.0,))[0])
    phase("tables to host", time.perf_counter() - marks["end"])
    del dataset
    # the test rows are folded in: only the column table is needed
    model.row_table = None
    epochs = [r["seconds"] for r in model.metrics]
    write_line(
        out,
        {
            "result": {
                "form": config.cg_form,
                "epochs_s": epochs,
                "compile_s": [r.get("compile_seconds") for r in model.metrics],
                "table_dtype": config.table_dtype,
            }
        },
    )
    n = min(spec["eval_rows"] or meta["test_rows"], meta["test_rows"])
    fold, gt = (
        RaggedRows(
            np.arange(meta["test_rows"]), m[f"{name}_indptr"].astype(np.int64), m[f"{name}_cols"]
        ).take(0, n)
        for name in ("fold", "gt")
    )
    left = spec["timeout_s"] - (time.monotonic() - spec["started"])
    deadline = time.monotonic() + left - EVAL_RESERVE * spec["timeout_s"]
    write_line(
        out, {"result": evaluate_test(model, fold, gt.lists(), spec["ranking"], phase, deadline)}
    )


def evaluate_test(
    model, fold, gts: list[np.ndarray], ranking: dict, phase: Phase, deadline: float = float("inf")
) -> dict:
    """Recall@K and NDCG of test rows (`fold`: `RaggedRows` of their kept links, `gts` their held
    links) through the trainer's evaluation: each row folded in from its kept links
    (`model.fold_in`, all rows in one call), its top K among all columns with those links excluded
    (`topk.make_engine`, exact or approximate, the column table put on the device once; see
    `top_k`), the metrics against its held links (`evaluation.metrics.ranking_metrics`); then the
    other top K (approximate or exact) on `sample_rows` evenly spaced rows, and the approximate
    top K's recall against the exact one there (`topk.approx_recall`). Rows are ranked in chunks
    of `EVAL_CHUNK`, in order, while another chunk would end before `deadline`
    (`time.monotonic()`): the figures are then of the first `rows` of `test_rows`."""
    from alx_trainer.evaluation import block_loop, metrics, topk
    from alx_trainer.evaluation.ranking import Ranker

    ks, ndcg_k, approx = ranking["ks"], ranking["ndcg_k"] or None, ranking["approx"]
    k = max(list(ks) + ([ndcg_k] if ndcg_k else []))
    n = len(fold)
    t = time.perf_counter()
    queries = Ranker(model.col_table, model.config).fold_in(fold)
    phase("fold-in", time.perf_counter() - t, rows=n)
    t = time.perf_counter()
    scorer = topk.make_engine(model.col_table, scan=ranking.get("scan"))
    scorer.place()
    # the approximate top K on the exact block loop's layout, else on its own
    approx_engine = (
        scorer.approximate(ranking["recall_target"])
        if isinstance(scorer, block_loop.BlockLoop)
        else topk.make_engine(model.col_table, approx=True, recall_target=ranking["recall_target"])
    )
    engines = {False: scorer, True: approx_engine}
    phase("column table to the device", time.perf_counter() - t)
    kind, other = ("approximate", "exact") if approx else ("exact", "approximate")
    t = time.perf_counter()
    ids, done = np.full((n, k), -1, np.int64), 0
    # in chunks of rows, while another chunk would end before the deadline
    while done < n:
        rows = np.arange(done, min(n, done + EVAL_CHUNK))
        began = time.monotonic()
        ids[rows] = top_k(engines[approx], queries, fold, rows, k)
        done = int(rows[-1]) + 1
        if time.monotonic() + (time.monotonic() - began) > deadline:
            break
    ids, gts, n = ids[:done], gts[:done], done
    scored, blocks = engines[approx].blocks
    phase(f"top {k} ({kind})", time.perf_counter() - t, rows=n, blocks_scored=scored, blocks=blocks)
    t = time.perf_counter()
    scores = metrics.ranking_metrics(ids, gts, ks, ndcg_k)
    phase("metrics", time.perf_counter() - t, rows=n)
    sample = np.unique(np.linspace(0, n - 1, min(n, ranking["sample_rows"])).astype(np.int64))
    t = time.perf_counter()
    ids_other = top_k(engines[not approx], queries, fold, sample, k)
    phase(f"top {k} ({other}, sample)", time.perf_counter() - t, rows=len(sample))
    approx_ids, exact_ids = (ids[sample], ids_other) if approx else (ids_other, ids[sample])
    return dict(
        scores,
        rows=n,
        test_rows=len(fold),
        k=k,
        topk=kind,
        sample_rows=len(sample),
        approx_recall=topk.approx_recall(approx_ids, exact_ids),
        recall_target=ranking["recall_target"],
    )


def top_k(scorer, queries: np.ndarray, fold, rows: np.ndarray, k: int) -> np.ndarray:
    """The top-`k` ids [len(rows), k] of the rows `rows` of `queries`, their links in `fold`
    excluded (one call: the engine batches rows by their exclusion lists)."""
    return scorer.top_k(queries[rows], fold.select(rows), k).ids


CHILDREN = {"ds-data": data_child, "ds-ours": ours_child}
