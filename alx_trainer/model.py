"""The model: its tables (init, trim to size), loading a trained one, and fold-in of new rows.

- `Model` (row_table, col_table, config, epoch, metrics): float32 NumPy tables trimmed to size.
- `init_tables(config, num_rows, num_cols, mesh)`: the initial sharded tables.
- `load_model(model_dir) -> Model`: the latest checkpoint of a model directory.
- `fold_in(col_table, rows, config, mesh=None) -> np.ndarray [n, d] float32`: solves Eq. 4 for new
  rows (lists of column ids, or CSR arrays) against a fixed column table with the configured
  solver, through the same dense batching and step kernels as training.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Protocol, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils

from alx_trainer import checkpoint
from alx_trainer.config import TrainConfig
from alx_trainer.data.host_cores import host_threads, thread_map
from alx_trainer.data.row_chunk import RowChunk
from alx_trainer.ops.mesh import make_mesh
from alx_trainer.ops.side_runner import SideRunner
from alx_trainer.ops.spec import step_spec
from alx_trainer.ops.table_init import init_table, table_from_numpy
from webgraph_contract import fileio

METRICS_FILE = "metrics.jsonl"


@dataclasses.dataclass
class Model:
    """A trained model: float32 tables trimmed to the real sizes (None: not asked for), its config
    and epochs done."""

    row_table: np.ndarray | None
    col_table: np.ndarray | None
    config: TrainConfig
    epoch: int
    metrics: list[dict] = dataclasses.field(default_factory=list)
    dataset_fingerprint: str | None = None  # of the training data, as its checkpoint recorded it
    epochs_trained: int = 0  # by the `train` call that returned it (0: it was at --epochs already)


def table_dtype(config: TrainConfig):
    if config.table_dtype == "auto":
        return jnp.float32 if jax.default_backend() == "cpu" else jnp.bfloat16
    return jnp.bfloat16 if config.table_dtype == "bfloat16" else jnp.float32


def read_metrics(path: str) -> list[dict]:
    """The per-epoch records of a `metrics.jsonl` (none when it does not exist); a last line cut
    short (no newline: an append that a power loss interrupted) is not a record."""
    if not fileio.exists(path):
        return []
    with fileio.open_file(path, "r") as f:
        lines = f.read().split("\n")[:-1]
    return [json.loads(line) for line in lines if line.strip()]


def trim(table: jax.Array, n: int) -> np.ndarray:
    """The first `n` rows of a sharded table as float32 NumPy (gathered from every process). A
    bfloat16 table crosses to the host as itself (half the bytes of float32) and widens there, in
    a thread per core."""
    full = (
        multihost_utils.process_allgather(table, tiled=True) if jax.process_count() > 1 else table
    )
    host = np.asarray(full)[:n]
    if host.dtype == np.float32:
        return host
    out = np.empty(host.shape, np.float32)
    step = max(1, -(-n // host_threads()))

    def widen(lo: int) -> None:
        out[lo : lo + step] = host[lo : lo + step]

    thread_map(widen, range(0, n, step))
    return out


def init_tables(config: TrainConfig, num_rows: int, num_cols: int, mesh) -> dict[str, jax.Array]:
    """The initial sharded tables (a function of the seed and shapes only, not of the mesh)."""
    dtype = table_dtype(config)
    tables = {
        "row": init_table(mesh, config.seed, num_rows, config.dim, config.start_stddev(), dtype)
    }
    if not config.tied:
        tables["col"] = init_table(
            mesh, config.seed + 1, num_cols, config.dim, config.start_stddev(), dtype
        )
    return tables


def load_model(model_dir: str) -> Model:
    """The latest checkpoint of `model_dir` as float32 tables trimmed to the real sizes."""
    tables, meta, epoch = checkpoint.restore_numpy(model_dir)
    config = TrainConfig(**meta["config"])
    row = tables["row"][: meta["num_rows"]]
    col = row if "col" not in tables else tables["col"][: meta["num_cols"]]
    history = [
        r for r in read_metrics(os.path.join(model_dir, METRICS_FILE)) if r.get("epoch", 0) <= epoch
    ]
    return Model(row, col, config, epoch, history, meta.get("dataset_fingerprint"))


class CsrRows(Protocol):
    """Rows as CSR arrays: row i holds `indices[indptr[i]:indptr[i + 1]]`."""

    indptr: np.ndarray
    indices: np.ndarray


def _row_chunk(rows: Sequence[np.ndarray] | CsrRows) -> RowChunk:
    """Rows given as id arrays, or as CSR arrays (`indptr`, `indices`: no array per row), as one
    chunk of row ids 0..n-1."""
    if hasattr(rows, "indptr") and hasattr(rows, "indices"):
        indptr = np.asarray(rows.indptr, np.int64)
        cols = np.asarray(rows.indices, np.int64)[indptr[0] : indptr[-1]]
        return RowChunk(np.arange(len(indptr) - 1, dtype=np.int64), indptr - indptr[0], cols)
    return RowChunk.from_rows(np.arange(len(rows)), rows)


def fold_in(
    col_table: np.ndarray, rows: Sequence[np.ndarray] | CsrRows, config: TrainConfig, mesh=None
) -> np.ndarray:
    """Embeddings [len(rows), d] float32 solving Eq. 4 for each row against the fixed `col_table`.

    `rows`: each row's column ids, a sequence of arrays or one CSR (an object with `indptr` and
    `indices`, such as `evaluation.topk.Csr`: the fast form for millions of rows).

    Uses the configured solver (CG and the block sweep start from zero: one block sweep is only an
    approximation for b < d) and the training step kernels; single process.
    The default mesh is every local device, but one device on CPU (see
    `alx_trainer.cli.train.split_cpu`).
    """
    if mesh is None:
        cpu = jax.default_backend() == "cpu"
        mesh = make_mesh(jax.local_devices()[:1] if cpu else jax.local_devices())
    chunk = _row_chunk(rows)
    n, num_cols = len(chunk), col_table.shape[0]
    outside = np.flatnonzero((chunk.cols < 0) | (chunk.cols >= num_cols))
    if len(outside):
        row = int(np.searchsorted(chunk.indptr, outside[0], side="right")) - 1
        raise ValueError(f"fold_in: row {row} has a column id outside [0, {num_cols})")
    if n == 0:
        return np.zeros((0, col_table.shape[1]), np.float32)
    dtype = table_dtype(config)
    src = table_from_numpy(mesh, np.asarray(col_table, np.float32), dtype)
    dst = table_from_numpy(mesh, np.zeros((n, col_table.shape[1]), np.float32), dtype)
    runner_config = dataclasses.replace(config, progress=False, cache_batches=False)
    spec = step_spec(config, num_cols, observed_loss=False)
    runner = SideRunner(runner_config, mesh, spec, lambda: iter([chunk]), n)
    dst, _ = runner.run(src, dst)
    return np.asarray(jnp.asarray(dst, jnp.float32))[:n]
