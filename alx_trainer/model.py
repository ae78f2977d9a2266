"""The model: its tables (init, trim to size), loading a trained one, and fold-in of new rows.

- `Model` (row_table, col_table, config, epoch, metrics): float32 NumPy tables trimmed to size.
- `init_tables(config, num_rows, num_cols, mesh)`: the initial sharded tables.
- `load_model(model_dir, row_table=True) -> Model`: the latest checkpoint of a model directory
  (and its plan), its row table only where asked.
- `fold_in(col_table, rows, config, plan=None) -> np.ndarray [n, d] float32`: solves Eq. 4 for new
  rows (lists of column ids, or `RaggedRows`) against a fixed column table with the configured
  solver, through the same dense batching and step kernels as training.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils

from alx_trainer import checkpoint, execution
from alx_trainer.config import TrainConfig
from alx_trainer.data.host_cores import widened
from alx_trainer.execution import ExecutionPlan
from alx_trainer.ops.mesh import make_mesh
from alx_trainer.ops.side_runner import plan_side
from alx_trainer.ops.table_init import init_table, table_from_numpy
from webgraph_contract import fileio
from webgraph_contract.ragged import RaggedRows

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
    # of the training data, as its checkpoint recorded it
    dataset_fingerprint: str | None = None
    # by the `train` call that returned it (0: it was at --epochs already)
    epochs_trained: int = 0
    # how it was trained (`alx_trainer.execution`; None: a model saved before plans were)
    plan: ExecutionPlan | None = None


def table_dtype(config: TrainConfig):
    """The dtype of `config`'s tables on this backend (`ExecutionPlan.table_dtype`)."""
    return jnp.dtype(execution.resolve_table_dtype(config.table_dtype, jax.default_backend()))


def read_metrics(path: str) -> list[dict]:
    """The per-epoch records of a `metrics.jsonl` (none when it does not exist); a last line cut
    short (no newline: an append that a power loss interrupted) is not a record."""
    if not fileio.exists(path):
        return []
    with fileio.open_file(path, "r") as f:
        lines = f.read().split("\n")[:-1]
    return [json.loads(line) for line in lines if line.strip()]


def trim(table: jax.Array, n: int) -> np.ndarray:
    """The first `n` rows of a sharded table as float32 NumPy (gathered from every process).

    In one process the table comes to the host a shard at a time, in its own dtype (a bfloat16
    shard is half the bytes of float32), each widened straight into the result in a thread per
    core: no whole-table host copy beside the result.
    """
    if jax.process_count() > 1:
        return widened(np.asarray(multihost_utils.process_allgather(table, tiled=True))[:n])
    out = np.empty((n, *table.shape[1:]), np.float32)
    done: set[int] = set()
    for shard in table.addressable_shards:
        lo, hi, _ = shard.index[0].indices(table.shape[0])
        # a replicated table has the same rows on every device: taken once
        if lo in done or lo >= n:
            continue
        done.add(lo)
        widened(np.asarray(shard.data)[: min(hi, n) - lo], out[lo : min(hi, n)])
    return out


def init_tables(
    config: TrainConfig, num_rows: int, num_cols: int, mesh, dtype=None
) -> dict[str, jax.Array]:
    """The initial sharded tables (a function of the seed and shapes only, not of the mesh) in
    `dtype` (None: `table_dtype(config)`)."""
    dtype = table_dtype(config) if dtype is None else dtype
    tables = {
        "row": init_table(mesh, config.seed, num_rows, config.dim, config.start_stddev(), dtype)
    }
    if not config.tied:
        tables["col"] = init_table(
            mesh, config.seed + 1, num_cols, config.dim, config.start_stddev(), dtype
        )
    return tables


def load_model(model_dir: str, row_table: bool = True) -> Model:
    """The latest checkpoint of `model_dir` as float32 tables trimmed to the real sizes, with the
    execution plan it was trained with. `row_table=False`: the row table is not read (None in the
    Model) unless it is also the column table (a tied model)."""
    names = None if row_table else ("col",)
    tables, meta, epoch = checkpoint.restore_numpy(model_dir, names=names)
    # a tied model saved no "col": its row table is its column table
    if not tables:
        tables, meta, epoch = checkpoint.restore_numpy(model_dir, epoch, names=("row",))
    config = TrainConfig(**meta["config"])
    row = tables["row"][: meta["num_rows"]] if "row" in tables else None
    col = row if "col" not in tables else tables["col"][: meta["num_cols"]]
    history = [
        r for r in read_metrics(os.path.join(model_dir, METRICS_FILE)) if r.get("epoch", 0) <= epoch
    ]
    plan = ExecutionPlan.from_dict(meta["plan"]) if "plan" in meta else None
    return Model(row, col, config, epoch, history, meta.get("dataset_fingerprint"), plan=plan)


def fold_in(
    col_table: np.ndarray,
    rows: Sequence[np.ndarray] | RaggedRows,
    config: TrainConfig,
    plan: ExecutionPlan | None = None,
) -> np.ndarray:
    """Embeddings [len(rows), d] float32 solving Eq. 4 for each row against the fixed `col_table`.

    `rows`: each row's column ids, a sequence of arrays or one `RaggedRows` (the fast form for
    millions of rows; its row ids are ignored: row k of the result is its row k).

    Uses the configured solver (CG and the block sweep start from zero: one block sweep is only an
    approximation for b < d) and the training step kernels; single process. `plan`: the fold-in
    plan (`ExecutionPlan.for_fold_in`; None: this machine's for `config`), whose evaluation
    devices it runs on (`ExecutionPlan.eval_devices`: the first local device on CPU, every local
    device elsewhere).
    """
    if not isinstance(rows, RaggedRows):
        rows = RaggedRows.from_lists(rows)
    n, num_cols = len(rows), col_table.shape[0]
    # row k of the result is row k of `rows`: row ids 0..n-1, `indptr` from 0
    chunk = dataclasses.replace(rows.take(0, n), row_ids=np.arange(n, dtype=np.int64))
    outside = np.flatnonzero((chunk.ids < 0) | (chunk.ids >= num_cols))
    if len(outside):
        row = int(np.searchsorted(chunk.indptr, outside[0], side="right")) - 1
        raise ValueError(f"fold_in: row {row} has a column id outside [0, {num_cols})")
    if n == 0:
        return np.zeros((0, col_table.shape[1]), np.float32)
    if plan is None:
        whole = execution.current(config, n, num_cols, make_mesh(jax.local_devices()))
        plan = whole.for_fold_in(config)
    mesh = make_mesh(plan.eval_device_list())
    dtype = execution.table_dtype(plan)
    src = table_from_numpy(mesh, np.asarray(col_table, np.float32), dtype)
    dst = table_from_numpy(mesh, np.zeros((n, col_table.shape[1]), np.float32), dtype)
    config = dataclasses.replace(config, progress=False, cache_batches=False)
    spec = plan.step_spec(config, num_cols, observed_loss=False)
    runner = plan_side(config, plan, mesh, spec, lambda: iter([chunk]), n)
    return np.asarray(jnp.asarray(runner.run(src, dst).table, jnp.float32))[:n]
