"""The model: its tables (init, trim to size), loading a trained one, and fold-in of new rows.

- `Model` (row_table, col_table, config, epoch, metrics): float32 NumPy tables trimmed to size.
- `init_tables(config, num_rows, num_cols, mesh)`: the initial sharded tables.
- `load_model(model_dir, row_table=True) -> Model`: the latest checkpoint of a model directory
  (and its plan), its row table only where asked.
- `fold_in(col_table, rows, config, plan=None) -> np.ndarray [n, d] float32`: solves Eq. 4 for new
  rows (lists of column ids, or `RaggedRows`) against a fixed column table with the configured
  solver, through the same dense batching and step kernels as training.

Initial tables (`init_table`): N(0, stddev) rows independent of the mesh, generated on the host
by a thread per core (CPU devices, small tables) or by the devices' own generator in their shards
(larger tables on GPU, TPU: `device_draws`). Both depend on the seed and the row only, by chunks
of rows each drawn from its own stream, but from different generators: NumPy's PCG64 on the host,
JAX's threefry on the devices; a seed's tables are the same on any number of devices of one kind,
not on a CPU and a GPU, nor for a table of at most `INIT_CHUNK` rows and a larger one. On CPU
devices the host is the faster (2M x 64 float32 on a 2-core host at load 5: one device 2.96-3.35
s, 1.90-2.07 CPU s, on the host against 3.80-4.94 s, 2.46-3.02 CPU s, by threefry; two devices
2.52-3.28 s against 4.36-5.56 s); on an accelerator the devices draw their shards where they
live, with no host generation and no copy.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
import os
import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from alx_trainer import checkpoint, execution
from alx_trainer.config import TrainConfig
from alx_trainer.execution import (
    AXIS,
    ExecutionPlan,
    host_threads,
    make_mesh,
    padded_rows,
    row_sharding,
    widened,
)
from alx_trainer.ops.side_runner import plan_side
from alx_trainer.ops.table_storage import BF16_BITS, bitcast
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


# Initial tables

# rows per generator stream and per block: initialization holds a shard and a few blocks
INIT_CHUNK = 16384
# float32 values per chunk of the devices' generator (`device_chunk_rows`): 64 MiB a block
DEVICE_CHUNK_VALUES = 1 << 24


# each init thread's float32 chunk, reused (freed blocks stayed in glibc's thread arenas)
_SCRATCH = threading.local()


def init_rows(seed: int, lo: int, n: int, stddev: float, out: np.ndarray) -> None:
    """Fill `out` ([rows, d], any float dtype) with rows lo.. of the initial table: N(0, stddev),
    zero from row n.

    Rows are generated in global chunks of `INIT_CHUNK`: chunk c is NumPy's PCG64 stream seeded by
    (seed, c), so row r depends on the seed and r only (not on the mesh, the shards or the threads).
    """
    hi, dim = lo + len(out), out.shape[1]
    scratch = getattr(_SCRATCH, "rows", None)
    if scratch is None or scratch.shape != (INIT_CHUNK, dim):
        scratch = _SCRATCH.rows = np.empty((INIT_CHUNK, dim), np.float32)
    out[max(n, lo) - lo :] = 0
    for c in range(lo // INIT_CHUNK, -(-min(hi, n) // INIT_CHUNK)):
        first = c * INIT_CHUNK
        a, b = max(lo, first), min(hi, first + INIT_CHUNK, n)
        if a >= b:  # rows lo.. are all padding
            continue
        values = scratch[: b - first]  # a prefix of the chunk's stream
        np.random.default_rng([seed, c]).standard_normal(out=values, dtype=np.float32)
        np.multiply(values[a - first :], np.float32(stddev), out=values[a - first :])
        out[a - lo : b - lo] = values[a - first :]


@functools.partial(jax.jit, donate_argnums=(0,))
def _write_block(out: jax.Array, block: jax.Array, at) -> jax.Array:
    return jax.lax.dynamic_update_slice(out, block, (at, 0))


def init_table(
    mesh: Mesh, seed: int, n: int, dim: int, stddev: float, dtype, on_device: bool | None = None
) -> jax.Array:
    """Normal(0, stddev) rows for the `n` real rows, zeros for the padding; independent of the mesh.

    `on_device` (None: `device_draws`): drawn by the devices (`_device_table`).
    Otherwise, on the host: shards of at most `INIT_CHUNK` rows are generated and put on their
    devices whole.
    Larger ones: blocks of `INIT_CHUNK` rows are generated on the host by a thread per core
    (`init_rows`; NumPy's generators release the GIL) into a few reused buffers, copied to the
    device and written into its shard in place: time in proportion to the bytes, memory a shard plus
    a block per thread (not a `jax.random` key per row, one device after the other: see
    docs/benchmarks.md, "Figures behind code choices").
    """
    n_pad = padded_rows(n, mesh)
    shard = n_pad // mesh.size
    block = min(INIT_CHUNK, shard)
    dtype = jnp.dtype(dtype)
    if on_device is None:
        on_device = device_draws(mesh.devices.flat[0].platform, n)
    if on_device:
        return _device_table(mesh, shard, n, dim, dtype)(jax.random.key(seed), np.float32(stddev))
    # bfloat16 shards are written as their uint16 bits: XLA:CPU's bfloat16 dynamic-update-slice
    # converted the whole shard to float32 and back for every block (quadratic in the shard)
    bits = BF16_BITS if dtype == jnp.bfloat16 else dtype
    sharding = row_sharding(mesh)
    workers = host_threads()
    if shard <= INIT_CHUNK:
        return _small_table(sharding, seed, n, n_pad, shard, dim, stddev, dtype, workers)
    free: queue.Queue = queue.Queue()
    for _ in range(workers + 1):
        free.put(np.empty((block, dim), dtype))

    def make(lo: int) -> np.ndarray:
        buf = free.get()
        init_rows(seed, lo, n, stddev, buf)
        return buf

    parts = []
    with ThreadPoolExecutor(workers, thread_name_prefix="alx-init") as pool:
        for device, index in sharding.addressable_devices_indices_map((n_pad, dim)).items():
            start = index[0].start or 0
            # blocks on global chunk boundaries (one stream each); the first and last clamped into
            # the shard
            chunks = range(start // INIT_CHUNK, -(-(start + shard) // INIT_CHUNK))
            offsets = sorted({min(max(c * INIT_CHUNK - start, 0), shard - block) for c in chunks})
            with jax.default_device(device):
                out = jnp.zeros((shard, dim), bits)
            pending: collections.deque = collections.deque()
            for k, at in enumerate(offsets):
                pending.append((at, pool.submit(make, start + at)))
                while len(pending) > workers or (pending and k == len(offsets) - 1):
                    done_at, future = pending.popleft()
                    buf = future.result()
                    placed = jax.device_put(buf.view(bits), device, may_alias=False)
                    out = _write_block(out, placed, np.int32(done_at))
                    # `buf` goes back to the generator threads once the write has read it: a CPU
                    # device_put of an aligned buffer may alias it, whatever `may_alias` says
                    out.block_until_ready()
                    free.put(buf)
            parts.append(out if bits == dtype else bitcast(dtype)(out))
    return jax.make_array_from_single_device_arrays((n_pad, dim), sharding, parts)


def _small_table(
    sharding, seed: int, n: int, n_pad: int, shard: int, dim: int, stddev: float, dtype, workers
) -> jax.Array:
    """`init_table` of shards of at most one block: each generated into a buffer of its own and
    put on its device as it is (no program to trace, compile or load; the buffer is not reused,
    so a put that aliases it is no matter)."""

    def make(item) -> jax.Array:
        device, index = item
        buf = np.empty((shard, dim), dtype)
        init_rows(seed, index[0].start or 0, n, stddev, buf)
        return jax.device_put(buf, device)

    items = sharding.addressable_devices_indices_map((n_pad, dim)).items()
    with ThreadPoolExecutor(workers, thread_name_prefix="alx-init") as pool:
        parts = list(pool.map(make, items))
    return jax.make_array_from_single_device_arrays((n_pad, dim), sharding, parts)


def device_draws(platform: str, n: int) -> bool:
    """Whether a table of `n` rows is drawn by the devices of `platform`: off CPU, above one host
    block (`INIT_CHUNK` rows; by `n`, not the shard, so a table's rows are the same on any number
    of devices); a smaller one is generated on the host and put whole (no program to load)."""
    return platform != "cpu" and n > INIT_CHUNK


def device_chunk_rows(dim: int) -> int:
    """Rows per chunk of the devices' generator: a power of two of at most `DEVICE_CHUNK_VALUES`
    values (one row at least), by `dim` only, so a row's values depend on the seed, `dim` and the
    row."""
    return 1 << max(0, (DEVICE_CHUNK_VALUES // dim).bit_length() - 1)


@functools.lru_cache(maxsize=None)
def _device_table(mesh: Mesh, shard: int, n: int, dim: int, dtype):
    """`table(key, stddev)`: the table drawn by the devices, each its own shard of `shard` rows.

    Chunk c (rows c * C to (c + 1) * C, C = `device_chunk_rows(dim)`) is threefry's normal
    float32 values of `fold_in(key, c)`: a device draws the chunks its shard overlaps, one at a
    time (a block in memory besides the shard), and writes their rows inside its shard and below
    `n`."""
    rows = device_chunk_rows(dim)
    # the chunks a shard can overlap
    chunks = -(-shard // rows) + 1

    def local(key, stddev):
        start = jax.lax.axis_index(AXIS) * shard
        first = start // rows

        def draw(j, out):
            c = first + j
            values = jax.random.normal(jax.random.fold_in(key, c), (rows, dim), jnp.float32)
            at = c * rows + jnp.arange(rows)
            # rows outside the shard or past `n` dropped (an index past the shard)
            at = jnp.where((at >= start) & (at < n), at - start, shard)
            return out.at[at].set((values * stddev).astype(dtype), mode="drop")

        return jax.lax.fori_loop(0, chunks, draw, jnp.zeros((shard, dim), dtype))

    fn = jax.shard_map(local, mesh=mesh, in_specs=(P(), P()), out_specs=P(AXIS), check_vma=False)
    return jax.jit(fn)


def table_from_numpy(mesh: Mesh, values: np.ndarray, dtype) -> jax.Array:
    """A sharded, padded table from host values (the same on every process)."""
    n_pad = padded_rows(values.shape[0], mesh)
    padded = np.zeros((n_pad, values.shape[1]), np.float32)
    padded[: values.shape[0]] = values
    sharding = row_sharding(mesh)
    return jax.make_array_from_callback(
        padded.shape, sharding, lambda idx: padded[idx].astype(dtype)
    )
