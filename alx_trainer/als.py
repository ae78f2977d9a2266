"""Sharded implicit ALS (paper Eq. 3, Algorithm 2): model state, half-epoch, training loop, fold-in.

Public API (used by evaluation, the CLI and the benchmark):
- `train(config, callback=None, mesh=None) -> Model`: trains (resuming from the latest checkpoint
  in `config.model_dir`), calling `callback(epoch, model)` after every epoch.
- `load_model(model_dir) -> Model`: the latest checkpoint as float32 NumPy tables trimmed to size.
- `fold_in(col_table, rows, config, mesh=None) -> np.ndarray [n, d] float32`: solves Eq. 4 for new
  rows (lists of column ids) against a fixed column table with the configured solver, through the
  same dense batching and step kernels as training.
- `Model` (row_table, col_table, config, epoch, metrics), `TrainingCollapse`.

A half-epoch solves every row of one side with the other table fixed: gramian of the fixed table,
then compiled steps of K dense batches each (gather, solve, scatter; see `sharding` for the
layouts: 'sharded', 'replicated', and 'owner', where each device solves the rows of its own shard). Rows longer than a
whole batch get their statistics summed over several batches, then one solve. Rows that never occur
in a split keep their initial embedding. With tied tables the row and column half-epochs both
update the one table, each reading a snapshot of it taken at the start of the half-epoch.

Per-epoch metrics (`Model.metrics`, `metrics.jsonl`, TensorBoard): `loss_observed` (sum over
training pairs of (1 - w.h)^2, from the column half-epoch, i.e. with the final tables when untied),
`loss_unobserved` (alpha * sum over all pairs of (w.h)^2 = alpha <W^T W, H^T H>), `loss_reg_row`,
`loss_reg_col` (lambda_r |x_r|^2 over the solved rows), `loss`, `seconds`, `row_seconds`,
`col_seconds`, `rows_solved`, `cols_solved`, and `recall@K` (+ `ndcg@100`, popularity baseline) from
`alx_trainer.evaluate.evaluate` when the dataset has a test split.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import sys
import threading
import time
from typing import Callable, Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from alx_trainer import batching, checkpoint, data, per_core, sharding
from alx_trainer.config import TrainConfig
from webgraph_pipeline import contract


class TrainingCollapse(RuntimeError):
    """The tables became non-finite (paper 4.4); the message names the epoch and the side."""


@dataclasses.dataclass
class Model:
    """A trained model: float32 tables trimmed to the real sizes, its config and epochs done."""

    row_table: np.ndarray
    col_table: np.ndarray
    config: TrainConfig
    epoch: int
    metrics: list[dict] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Dataset:
    """Where a dataset's shards are and the matrix shape (from stats.json or the TFDS info)."""

    name: str
    num_rows: int
    num_cols: int
    files: dict[str, list[str]]  # split -> sorted shard paths (every host's)
    data_dir: str
    tfds: bool = False  # files named by TFDS rather than by the contract


def open_dataset(config: TrainConfig) -> Dataset:
    """A contract directory, or a TFDS name resolved by `alx_trainer.tfds_input`."""
    import tensorflow as tf

    if tf.io.gfile.isdir(config.data):  # local or remote (gs://) contract directory
        stats = contract.read_stats(config.data)
        num_rows, num_cols = contract.matrix_shape(stats)
        files = {}
        for split in contract.SPLIT_PREFIXES:
            try:
                files[split] = list(contract.iter_split_files(config.data, split))
            except FileNotFoundError:
                if split != "test":
                    raise
        return Dataset(config.data, num_rows, num_cols, files, config.data)
    if "/" in config.data and "://" not in config.data and not config.data.startswith(("/", ".")):
        from alx_trainer import tfds_input

        return tfds_input.open_tfds(config.data, config.tfds_data_dir or None)
    raise FileNotFoundError(f"{config.data}: no such dataset directory (nor a TFDS name like web_graph/de-dense)")


@dataclasses.dataclass(frozen=True)
class Side:
    """One half-epoch: solve table `table` from split `split` with table `other` fixed."""

    name: str
    split: str
    table: str
    other: str


def sides(tied: bool) -> tuple[Side, Side]:
    if tied:
        return Side("row", "train", "row", "row"), Side("col", "train_t", "row", "row")
    return Side("row", "train", "row", "col"), Side("col", "train_t", "col", "row")


def table_dtype(config: TrainConfig):
    if config.table_dtype == "auto":
        return jnp.float32 if jax.default_backend() == "cpu" else jnp.bfloat16
    return jnp.bfloat16 if config.table_dtype == "bfloat16" else jnp.float32


def resolve_layout(config: TrainConfig) -> str:
    """The step layout of `config` on this backend and process count (see `TrainConfig.layout`)."""
    layout = config.layout
    if layout == "auto":
        single_cpu = jax.default_backend() == "cpu" and jax.process_count() == 1
        layout = "owner" if single_cpu and config.stats == "gather" else "sharded"
    if layout == "owner" and jax.process_count() > 1:
        raise ValueError(f"layout: 'owner' runs in one process, this run has {jax.process_count()}; use 'replicated'")
    return layout


def step_spec(config: TrainConfig, num_other: int, observed_loss: bool = True) -> sharding.StepSpec:
    matvec = config.cg_form == "matvec" or (config.cg_form == "auto" and jax.default_backend() == "cpu")
    return sharding.StepSpec(
        alpha=config.alpha,
        reg=config.reg,
        reg_exponent=config.reg_exponent,
        num_other=num_other,
        solver=config.solver,
        cg_iters=config.cg_iters,
        matvec=matvec and config.stats == "gather",
        local_stats=config.stats == "local",
        observed_loss=observed_loss,
        layout=resolve_layout(config),
        block_size=config.block_size if config.solver == "block" else 0,
    )


@dataclasses.dataclass
class SidePlan:
    """Global counts of one side (the max over hosts, so every host runs the same steps).

    `steps` is a multiple of `per_call` (the batches each device scans per compiled call).
    """

    steps: int
    per_call: int
    long_steps: int
    long_solves: int


class SideRunner:
    """Compiled kernels and the batch stream of one side; `run` does one half-epoch.

    `num_rows` is the size of the table being solved: with the 'owner' layout each row goes to
    the device holding its shard of that table, and the packed batches stay in memory.
    """

    def __init__(
        self,
        config: TrainConfig,
        mesh,
        spec: sharding.StepSpec,
        make_chunks: Callable[[], Iterator[data.RowChunk]],
        num_rows: int,
    ):
        self.config, self.mesh, self.spec = config, mesh, spec
        self.make_chunks = make_chunks
        self.per_step = len(mesh.local_devices)
        self.shard = sharding.padded_rows(num_rows, mesh) // mesh.size
        # 'owner' on per-core CPU devices: a program and a pinned thread per device (per_core)
        self.per_device = spec.owner and per_core.applies(mesh.local_devices)
        self.step = sharding.make_device_step(spec) if self.per_device else sharding.make_step(mesh, spec)
        self.long_stats = sharding.make_long_stats(mesh, spec)
        self.solve_scatter = sharding.make_solve_scatter(mesh, spec)
        self.cached_calls: list | None = None  # `cache_batches`: this host's packed calls
        self.cached_long: list | None = None  # `cache_batches` or 'owner': the long-row batches
        self.device_calls: list | None = None  # 'owner' layout: the calls already on the devices
        # (with `per_device`: device j's own calls, all-padding ones left out, at [j])
        self.plan = self._plan()

    def gramian(self, table: jax.Array) -> jax.Array:
        """`T^T T`, replicated (through the host for the collective-free 'owner' layout)."""
        if self.spec.owner:
            return sharding.gramian_via_host(self.mesh, table)
        return sharding.make_gramian(self.mesh)(table)

    def _replicated(self, table: jax.Array) -> jax.Array:
        if not self.spec.replicated_src:
            return table
        if self.spec.owner:
            return sharding.replicate_via_host(self.mesh, table)
        return sharding.make_replicate(self.mesh)(table)

    def _shape(self) -> tuple[int, int, int]:
        c = self.config
        return c.piece_len, c.batch_pieces, self.rows

    def _empty(self, k: int) -> batching.DeviceBatch:
        return batching.empty_batch(k, *self._shape())

    def _calls(self) -> Iterator[batching.DeviceBatch]:
        """This host's calls: [local devices, per_call, ...] arrays, exactly `steps / per_call` of them."""
        if self.cached_calls is not None:
            return iter(self.cached_calls)
        steps = batching.pack_normal(self.make_chunks(), *self._shape())
        steps = batching.group_steps(steps, self.per_step, self.plan.steps, self._empty)
        return batching.stack_calls(steps, self.plan.per_call)

    def _long(self) -> Iterator[batching.LongBatch]:
        if self.cached_long is not None:
            return iter(self.cached_long)
        return batching.pack_long(self.make_chunks(), self.config.piece_len, self.config.batch_pieces)

    def _plan(self) -> SidePlan:
        """Count this host's batches (one streaming pass), then agree on the max over hosts.

        Next-fit packing depends on the row lengths only. Row slots per batch (`batch_rows` 0) are
        set from the mean pieces per row over all hosts, so slots are rarely the binding limit.
        With the 'owner' layout each device's rows are packed apart and kept in memory.
        """
        L, B = self.config.piece_len, self.config.batch_pieces
        chunks = list(self.make_chunks()) if self.spec.owner else None
        lengths = [c.lengths for c in (chunks if chunks is not None else self.make_chunks())]
        lengths = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
        pieces = batching.num_pieces(lengths, L)
        normal = pieces[pieces <= B]
        multihost = len(self.mesh.local_devices) < self.mesh.size  # the mesh spans processes
        totals = np.array([normal.sum(), len(normal)], np.int64)
        if multihost:
            totals = _over_hosts(totals).sum(axis=0)
        mean_pieces = totals[0] / max(totals[1], 1)
        self.rows = self.config.batch_rows or int(min(B, max(1, np.ceil(1.25 * B / max(mean_pieces, 1)))))
        R, k = self.rows, self.per_step
        n_long = int(np.sum(-(-lengths[pieces > B] // (B * L))))
        if chunks is not None:
            by_device = self._pack_by_owner(chunks)
            steps = max((len(b) for b in by_device), default=0)
            long_ids = np.concatenate([c.row_ids[batching.num_pieces(c.lengths, L) > B] for c in chunks] or [np.zeros(0)])
            per_device = np.bincount((long_ids // self.shard).astype(np.int64), minlength=k)
            long_solves = int(-(-per_device.max(initial=0) // R))
        else:
            steps = -(-len(batching.batch_starts(normal, B, R, final=True)[0]) // k)
            long_solves = -(-int(np.sum(pieces > B)) // (k * R))
        counts = np.array([steps, -(-n_long // k), long_solves], np.int64)
        if multihost:
            counts = _over_hosts(counts).max(axis=0)
        steps, long_steps, long_solves = (int(c) for c in counts)
        calls = -(-steps // self.config.steps_per_call)
        per_call = max(1, -(-steps // max(calls, 1)))  # as few padding steps as `calls` calls allow
        plan = SidePlan(calls * per_call, per_call, long_steps, long_solves)
        if chunks is not None:
            steps_iter = batching.owner_steps(by_device, self._empty(1))
            grouped = batching.group_steps(steps_iter, k, plan.steps, self._empty)
            calls = list(batching.stack_calls(grouped, per_call))
            if self.per_device:
                self.device_calls = [
                    [self._device_call(c, j) for c in calls if (c.row_ids[j] >= 0).any()]
                    for j in range(self.per_step)
                ]
            else:
                self.device_calls = [self._device_call(c) for c in calls]
            self.cached_long = list(batching.pack_long(chunks, L, B))
        elif self.config.cache_batches:
            self.plan = plan
            self.cached_calls, self.cached_long = list(self._calls()), list(self._long())
        return plan

    def _device_call(self, call: batching.DeviceBatch, j: int | None = None) -> tuple[list[jax.Array], int]:
        """A call's arrays on the devices, and how many rows it solves; with `j`, device j's part only."""
        arrays = (call.ids, call.seg, call.row_ids, call.row_len)
        if j is None:
            return [sharding.host_batch(self.mesh, a) for a in arrays], int((call.row_ids >= 0).sum())
        device = self.mesh.local_devices[j]
        return [jax.device_put(a[j : j + 1], device) for a in arrays], int((call.row_ids[j] >= 0).sum())

    def _pack_by_owner(self, chunks: list[data.RowChunk]) -> list[batching.DeviceBatch]:
        """Device j's rows (those of its table shard, ids counted from the shard's start) in its own batches."""
        packed = []
        for j in range(self.per_step):
            mine = [batching.select_rows(c, c.row_ids // self.shard == j) for c in chunks]
            mine = [dataclasses.replace(c, row_ids=c.row_ids - j * self.shard) for c in mine]
            batches = list(batching.pack_normal(mine, *self._shape()))
            packed.append(batching.merge(batches) if batches else self._empty(0))
        return packed

    def run(self, src: jax.Array, dst: jax.Array, desc: str) -> tuple[jax.Array, np.ndarray]:
        """Solve every row of this side into `dst` (donated) with `src` fixed; loss terms summed."""
        from tqdm import tqdm

        gram = self.gramian(src)
        step_src = self._replicated(src)
        terms = []
        show = self.config.progress and jax.process_index() == 0
        bar = tqdm(total=self.plan.steps, desc=desc, unit="step", disable=not show, file=sys.stderr, leave=False)
        start, rows_done = time.perf_counter(), 0

        lock = threading.Lock()

        def done(rows: int) -> None:
            nonlocal rows_done
            with lock:
                rows_done += rows
                bar.update(self.plan.per_call)
                bar.set_postfix(rows_per_s=f"{rows_done / max(time.perf_counter() - start, 1e-9):.0f}", refresh=False)

        if self.per_device:
            bar.total = self.plan.per_call * sum(len(c) for c in self.device_calls)
            dst, terms = self._run_per_device(step_src, dst, gram, done)
        else:
            if self.device_calls is not None:  # 'owner': one process, the batches stay on its devices
                calls = iter(self.device_calls)
            else:  # packing and host-to-device copies run in the prefetch thread, overlapping the steps
                calls = data.prefetch(lambda: map(self._device_call, self._calls()))
            for arrays, rows in calls:
                dst, t = self.step(step_src, dst, gram, *arrays)
                terms.append(t)
                done(rows)
        bar.close()
        if self.plan.long_steps:
            dst, long_terms = self._run_long(step_src, dst, gram)
            terms.extend(long_terms)
        total = np.sum([_host_terms(t) for t in terms], axis=0) if terms else np.zeros(3)
        return dst, total

    def _run_per_device(self, src, dst, gram, done: Callable[[int], None]) -> tuple[jax.Array, list]:
        """Each device's calls in its own thread on its own arrays; `dst` reassembled from the parts."""
        srcs, grams, parts = (sharding.device_parts(x) for x in (src, gram, dst))

        def task(device, calls) -> tuple[jax.Array, list]:
            table, terms = parts[device], []
            for arrays, rows in calls:
                table, t = self.step(srcs[device], table, grams[device], *arrays)
                terms.append(t)
                done(rows)
            return table, terms

        devices = self.mesh.local_devices
        results = per_core.run([functools.partial(task, d, c) for d, c in zip(devices, self.device_calls)])
        dst = jax.make_array_from_single_device_arrays(dst.shape, dst.sharding, [table for table, _ in results])
        return dst, [t for _, terms in results for t in terms]

    def _run_long(self, src, dst, gram):
        """Rows longer than one device batch: sum their statistics over parts, then solve."""
        L, B, R = self._shape()
        d = src.shape[1]
        acc: dict[int, list] = {}  # row id -> [A_obs (float64), b, length]
        make_empty = lambda k: batching.empty_long(k, L, B)  # noqa: E731
        for batch in batching.group_steps(self._long(), self.per_step, self.plan.long_steps, make_empty):
            a, b = self.long_stats(src, sharding.host_batch(self.mesh, batch.ids))
            a, b = sharding.local_rows(a), sharding.local_rows(b)
            for k, owner in enumerate(batch.owner.tolist()):
                if owner == batching.PAD_ID:
                    continue
                slot = acc.setdefault(owner, [np.zeros((d, d)), np.zeros(d), int(batch.owner_len[k])])
                slot[0] += a[k]
                slot[1] += b[k]
        owners = sorted(acc)
        if self.spec.owner:  # slot j of every solve holds rows of device j's shard
            queues = [[o for o in owners if o // self.shard == j] for j in range(self.per_step)]
        else:
            queues = [owners[j::self.per_step] for j in range(self.per_step)]
        terms = []
        for s in range(self.plan.long_solves):
            a = np.zeros((self.per_step, R, d, d), np.float32)
            b = np.zeros((self.per_step, R, d), np.float32)
            ids = np.full((self.per_step, R), batching.PAD_ID, np.int32)
            lens = np.zeros((self.per_step, R), np.int32)
            for j, queue in enumerate(queues):
                for i, owner in enumerate(queue[s * R : (s + 1) * R]):
                    a[j, i], b[j, i], lens[j, i] = acc[owner]
                    ids[j, i] = owner - j * self.shard if self.spec.owner else owner  # 'owner': shard-local
            dst, t = self.solve_scatter(dst, gram, *[sharding.host_batch(self.mesh, x) for x in (a, b, ids, lens)])
            terms.append(t)
        return dst, terms


def _host_terms(terms: jax.Array) -> np.ndarray:
    """[observed, reg, rows] in float64 from a step's terms ([3] summed, or [devices, 3] per device)."""
    return np.asarray(sharding.local_rows(terms) if terms.ndim == 2 else terms, np.float64).reshape(-1, 3).sum(axis=0)


def _over_hosts(values: np.ndarray) -> np.ndarray:
    """[processes, len(values)]: every process's `values` (a collective: all processes call it)."""
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(values)).reshape(-1, len(values))


def _chunk_reader(dataset: Dataset, split: str, config: TrainConfig, num_rows: int, num_cols: int):
    files = data.host_files(dataset.files[split], jax.process_index(), jax.process_count())
    return lambda: data.read_chunks(files, config.chunk_rows, num_rows, num_cols)


def _check_finite(mesh, table: jax.Array, epoch: int, side: str) -> None:
    finite = sharding.local_all_finite(mesh, table)
    if jax.process_count() > 1:
        finite = bool(_over_hosts(np.array([finite], np.int64)).all())
    if not finite:
        raise TrainingCollapse(
            f"epoch {epoch}, {side} half-epoch: the {side} table has NaN/Inf values (numerical collapse); "
            "raise --reg or use --table_dtype float32"
        )


def _meta(config: TrainConfig, dataset: Dataset, tables: dict[str, jax.Array], epoch: int) -> dict:
    return {
        "epoch": epoch,
        "config": config.to_dict(),
        "num_rows": dataset.num_rows,
        "num_cols": dataset.num_cols,
        "table_shapes": {k: list(v.shape) for k, v in tables.items()},
        "table_dtype": str(jnp.dtype(next(iter(tables.values())).dtype)),
    }


def _trim(table: jax.Array, n: int) -> np.ndarray:
    from jax.experimental import multihost_utils

    full = multihost_utils.process_allgather(table, tiled=True) if jax.process_count() > 1 else table
    return np.asarray(jnp.asarray(full, jnp.float32))[:n]


def init_tables(config: TrainConfig, num_rows: int, num_cols: int, mesh) -> dict[str, jax.Array]:
    """The initial sharded tables (a function of the seed and shapes only, not of the mesh)."""
    dtype = table_dtype(config)
    tables = {"row": sharding.init_table(mesh, config.seed, num_rows, config.dim, config.init_stddev, dtype)}
    if not config.tied:
        tables["col"] = sharding.init_table(mesh, config.seed + 1, num_cols, config.dim, config.init_stddev, dtype)
    return tables


class _Recorder:
    """Per-epoch metrics to `<model_dir>/metrics.jsonl` and TensorBoard (process 0 only).

    On resume, records of epochs after the restored checkpoint are dropped (they are recomputed).
    The file is rewritten whole each epoch, which also works on object stores such as gs://.
    """

    def __init__(self, model_dir: str, start_epoch: int):
        import tensorflow as tf

        self.enabled = jax.process_index() == 0
        self.path = os.path.join(model_dir, "metrics.jsonl")
        self.records = [r for r in _read_metrics(self.path) if r.get("epoch", 0) <= start_epoch]
        self.writer = None
        self._gfile = tf.io.gfile
        if self.enabled:
            from tensorboardX import SummaryWriter

            self.writer = SummaryWriter(os.path.join(model_dir, "tensorboard"))

    def write(self, record: dict) -> None:
        self.records.append(record)
        if not self.enabled:
            return
        with self._gfile.GFile(self.path, "w") as f:
            f.write("".join(json.dumps(r) + "\n" for r in self.records))
        for key, value in record.items():
            if key != "epoch" and isinstance(value, (int, float)):
                self.writer.add_scalar(key, value, record["epoch"])
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _read_metrics(path: str) -> list[dict]:
    import tensorflow as tf

    if not tf.io.gfile.exists(path):
        return []
    with tf.io.gfile.GFile(path, "r") as f:
        return [json.loads(line) for line in f.read().splitlines() if line.strip()]


def train(config: TrainConfig, callback: Callable[[int, Model], None] | None = None, mesh=None) -> Model:
    """Train (or resume) per `config`; returns the final `Model`."""
    config.validate()
    mesh = mesh if mesh is not None else sharding.make_mesh()
    dataset = open_dataset(config)
    if config.tied and dataset.num_rows != dataset.num_cols:
        raise ValueError(f"tied: needs a square matrix, {config.data} is {dataset.num_rows} x {dataset.num_cols}")
    import tensorflow as tf

    tf.io.gfile.makedirs(config.model_dir)
    if jax.process_index() == 0:
        with tf.io.gfile.GFile(os.path.join(config.model_dir, "config.json"), "w") as f:
            f.write(json.dumps(config.to_dict(), indent=2, sort_keys=True) + "\n")

    tables = init_tables(config, dataset.num_rows, dataset.num_cols, mesh)
    mgr = checkpoint.manager(config.model_dir, keep=config.keep_checkpoints)
    start = checkpoint.latest_epoch(mgr) or 0
    if start:
        saved = mgr.restore(start, args=checkpoint.ocp.args.Composite(meta=checkpoint.ocp.args.JsonRestore()))["meta"]
        if saved["table_shapes"] != {k: list(v.shape) for k, v in tables.items()}:
            raise ValueError(
                f"{config.model_dir}: checkpoint tables {saved['table_shapes']} do not match this run "
                f"({ {k: list(v.shape) for k, v in tables.items()} }); "
                "same dataset, dim, tied and device count needed to resume"
            )
        tables, _ = checkpoint.restore(mgr, start, tables)

    size = {"row": dataset.num_rows, "col": dataset.num_cols}
    runners = {}
    for side in sides(config.tied):
        num_other = size["col"] if side.name == "row" else size["row"]
        n_this, n_other = (size["row"], size["col"]) if side.name == "row" else (size["col"], size["row"])
        reader = _chunk_reader(dataset, side.split, config, n_this, n_other)
        # The observed loss is reported from the last half-epoch (the column side) only.
        spec = step_spec(config, num_other, observed_loss=side.name == "col")
        runners[side.name] = SideRunner(config, mesh, spec, reader, n_this)

    recorder = _Recorder(config.model_dir, start)
    history = recorder.records
    model = None
    try:
        for epoch in range(start + 1, config.epochs + 1):
            t0 = time.perf_counter()
            record: dict = {"epoch": epoch}
            for side in sides(config.tied):
                ts = time.perf_counter()
                src = jnp.copy(tables[side.other]) if config.tied else tables[side.other]
                tables[side.table], terms = runners[side.name].run(src, tables[side.table], f"epoch {epoch} {side.name}s")
                _check_finite(mesh, tables[side.table], epoch, side.name)
                record[f"{side.name}_seconds"] = time.perf_counter() - ts
                if side.name == "col":
                    record["loss_observed"] = float(terms[0])
                record[f"loss_reg_{side.name}"] = float(terms[1])
                record[f"{side.name}s_solved"] = int(terms[2])
            gram = runners["row"].gramian
            g_row = np.asarray(gram(tables["row"]), np.float64)
            g_col = g_row if config.tied else np.asarray(gram(tables["col"]), np.float64)
            record["loss_unobserved"] = float(config.alpha * np.sum(g_row * g_col))
            record["loss"] = record["loss_observed"] + record["loss_unobserved"] + sum(
                record.get(f"loss_reg_{s}", 0.0) for s in ("row", "col")
            )
            record["seconds"] = time.perf_counter() - t0
            last = epoch == config.epochs
            model = None
            evaluate_now = bool(config.eval_every and "test" in dataset.files and (epoch % config.eval_every == 0 or last))
            if callback is not None or evaluate_now:
                model = _model(config, dataset, tables, epoch, history)
            if evaluate_now:
                record.update(_evaluate(model, dataset, config))
            recorder.write(record)
            if model is not None:
                model.metrics = list(history)  # now including this epoch's record
            if (config.checkpoint_every and epoch % config.checkpoint_every == 0) or last:
                checkpoint.save(mgr, epoch, tables, _meta(config, dataset, tables, epoch))
            if callback is not None:
                callback(epoch, model)
    finally:
        recorder.close()
        mgr.close()
    final_epoch = max(start, config.epochs)
    if model is None or model.epoch != final_epoch:
        model = _model(config, dataset, tables, final_epoch, history)
    return model


def _model(config: TrainConfig, dataset: Dataset, tables: dict, epoch: int, history: list[dict]) -> Model:
    row = _trim(tables["row"], dataset.num_rows)
    col = row if config.tied else _trim(tables["col"], dataset.num_cols)
    return Model(row, col, config, epoch, list(history))


def _evaluate(model: Model, dataset: Dataset, config: TrainConfig) -> dict:
    """Recall@K (and NDCG@100 when there are enough columns) on the test split, through T2's evaluation."""
    from alx_trainer import evaluate

    ndcg_k = 100 if dataset.num_cols >= 100 else None
    mesh = evaluate.one_device_mesh() if jax.default_backend() == "cpu" else None
    if dataset.tfds:
        from alx_trainer import tfds_input

        rows = tfds_input.read_test_rows(dataset.files["test"])
        shared = dataset.num_rows == dataset.num_cols
        return evaluate.evaluate(model, rows, ks=config.recall_ks(), ndcg_k=ndcg_k, exclude_self=shared, mesh=mesh)
    return evaluate.evaluate(model, dataset.data_dir, ks=config.recall_ks(), ndcg_k=ndcg_k, mesh=mesh)


def load_model(model_dir: str) -> Model:
    """The latest checkpoint of `model_dir` as float32 tables trimmed to the real sizes."""
    tables, meta, epoch = checkpoint.restore_numpy(model_dir)
    config = TrainConfig(**meta["config"])
    row = tables["row"][: meta["num_rows"]]
    col = row if "col" not in tables else tables["col"][: meta["num_cols"]]
    history = [r for r in _read_metrics(os.path.join(model_dir, "metrics.jsonl")) if r.get("epoch", 0) <= epoch]
    return Model(row, col, config, epoch, history)


def fold_in(col_table: np.ndarray, rows: Sequence[np.ndarray], config: TrainConfig, mesh=None) -> np.ndarray:
    """Embeddings [len(rows), d] float32 solving Eq. 4 for each row against the fixed `col_table`.

    Uses the configured solver (CG and the block sweep start from zero: one block sweep is only an
    approximation for b < d) and the training step kernels; single process.
    The default mesh is every local device, but one device on CPU (see `cli_train.split_cpu`).
    """
    if mesh is None:
        cpu = jax.default_backend() == "cpu"
        mesh = sharding.make_mesh(jax.local_devices()[:1] if cpu else jax.local_devices())
    n = len(rows)
    num_cols = col_table.shape[0]
    for i, r in enumerate(rows):
        r = np.asarray(r)
        if len(r) and (r.min() < 0 or r.max() >= num_cols):
            raise ValueError(f"fold_in: row {i} has a column id outside [0, {num_cols})")
    if n == 0:
        return np.zeros((0, col_table.shape[1]), np.float32)
    dtype = table_dtype(config)
    src = sharding.table_from_numpy(mesh, np.asarray(col_table, np.float32), dtype)
    dst = sharding.table_from_numpy(mesh, np.zeros((n, col_table.shape[1]), np.float32), dtype)
    runner_config = dataclasses.replace(config, progress=False, cache_batches=False)
    spec = step_spec(config, num_cols, observed_loss=False)
    runner = SideRunner(runner_config, mesh, spec, lambda: data.chunks_from_rows(np.arange(n), rows), n)
    dst, _ = runner.run(src, dst, "fold-in")
    return np.asarray(jnp.asarray(dst, jnp.float32))[:n]
