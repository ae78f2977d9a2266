"""One half-epoch on the devices: `SideRunner` solves every row of one side with the other table fixed.

A half-epoch computes the gramian of the fixed table, then runs compiled steps of K dense batches
each (gather, solve, scatter; see `sharding` for the layouts: 'sharded', 'replicated', and 'owner',
where each device solves the rows of its own shard). Rows longer than a whole batch get their
statistics summed over several batches, then one solve. `step_spec` turns a `TrainConfig` into the
kernels' `StepSpec`. The training loop (`alx_trainer.train`) and fold-in (`alx_trainer.model`) both
run their solves through a `SideRunner`.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from typing import Callable, Iterator

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils

from alx_trainer.config import TrainConfig
from alx_trainer.data import batching, records
from alx_trainer.ops import long_groups, owner_stream, per_core, sharding

# Called with (steps, rows) after each compiled call (from the device threads, under a lock).
ProgressFn = Callable[[int, int], None]

# Long rows (`long_groups`): a chunk's float32 block fits LONG_CACHE_BYTES (a core's share of the
# 32 MiB L3, beside the other core's chunk); a device holds no group block above LONG_BLOCK_BYTES.
# `benchmarks/long_rows.py` (two pinned devices, 1.5M x 128 table, d=128; ns per entry, whole
# solve): a one-chunk group 157-178, blocks of 8/32 batches 279-296/301-338, streamed 335-458.
LONG_CACHE_BYTES = 8 << 20
LONG_BLOCK_BYTES = 64 << 20


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
    rows: int = 0  # records read by the planning pass, over all hosts (checked against stats.json)


class SideRunner:
    """Compiled kernels and the batch stream of one side; `run` does one half-epoch.

    `num_rows` is the size of the table being solved: with the 'owner' layout each row goes to
    the device holding its shard of that table, and the packed batches stay in memory. Runners
    given one `replica` buffer copy their fixed tables into its kept memory (float32 tables; see
    `_replicated`): one half-epoch at a time.
    """

    def __init__(
        self,
        config: TrainConfig,
        mesh,
        spec: sharding.StepSpec,
        make_chunks: Callable[[], Iterator[records.RowChunk]],
        num_rows: int,
        replica: sharding.ReplicaBuffer | None = None,
    ):
        self.config, self.mesh, self.spec = config, mesh, spec
        self.replica = replica
        self.hyper = sharding.hyper_params(config.alpha, config.reg, config.reg_exponent)
        self.make_chunks = make_chunks
        self.per_step = len(mesh.local_devices)
        self.shard = sharding.padded_rows(num_rows, mesh) // mesh.size
        # 'owner' on per-core CPU devices: a program and a pinned thread per device (per_core)
        self.per_device = spec.owner and per_core.applies(mesh.local_devices)
        self.step = self._compiled(spec)
        self.long_stats = sharding.make_long_stats(mesh, spec)
        self.solve_scatter = sharding.make_solve_scatter(mesh, spec)
        self.cached_calls: list | None = None  # `cache_batches`: this host's packed calls
        self.cached_long: list | None = None  # `cache_batches` or 'owner': the long-row batches
        self.device_calls: list | None = None  # 'owner' layout: the calls already on the devices
        # (with `per_device`: device j's own calls, all-padding ones left out, at [j])
        self.plan = self._plan()

    def _compiled(self, spec: sharding.StepSpec):
        return sharding.make_device_step(spec) if self.per_device else sharding.make_step(self.mesh, spec)

    def observe_loss(self, on: bool) -> None:
        """Whether the next `run`s compute the observed loss of their rows (the kernels' `observed_loss`;
        each setting compiles once)."""
        if on != self.spec.observed_loss:
            self.spec = dataclasses.replace(self.spec, observed_loss=on)
            self.step = self._compiled(self.spec)

    def gramian(self, table: jax.Array) -> jax.Array:
        """`T^T T`, replicated (through the host for the collective-free 'owner' layout)."""
        if self.spec.owner:
            return sharding.gramian_via_host(self.mesh, table)
        return sharding.make_gramian(self.mesh)(table)

    def fixed(self, src: jax.Array, gram: jax.Array | None = None) -> sharding.Fixed:
        """The steps' `fixed` argument: the gramian of `src` (`gram` when known) and (alpha, lambda, nu), replicated."""
        hyper = jax.device_put(self.hyper, sharding.NamedSharding(self.mesh, sharding.P()))
        return self.gramian(src) if gram is None else gram, hyper

    def _replicated(self, table: jax.Array) -> jax.Array:
        """The fixed table as the steps take it: whole on every device unless 'sharded', in `gather_form`."""
        if not self.spec.replicated_src:
            return sharding.gather_form(table)
        if self.spec.owner:
            # A bfloat16 replica is freed each half-epoch: kept, it would add to the shard of
            # temporary that the next half-epoch's `solving_form` takes.
            keep = self.replica if table.dtype != jnp.bfloat16 else None
            return sharding.replicate_via_host(self.mesh, table, keep)
        return sharding.gather_form(sharding.make_replicate(self.mesh)(table))

    def _shape(self) -> tuple[int, int, int]:
        return self.piece_len, self.batch_pieces, self.rows

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
        return batching.pack_long(self.make_chunks(), self.piece_len, self.batch_pieces)

    def _plan(self) -> SidePlan:
        """Count this host's batches (one streaming pass), then agree on the max over hosts.

        Next-fit packing depends on the row lengths only. Row slots per batch (`batch_rows` 0) are
        set from the mean pieces per row over all hosts, so slots are rarely the binding limit.
        With the 'owner' layout each device's rows are packed apart and kept in memory.
        """
        config = self.config
        shapes = [batching.batch_shape(L, config.batch_pieces) for L in (
            (config.piece_len,) if config.piece_len else batching.PIECE_LENS)]
        self.streaming = self.spec.owner and config.stream_batches and (self.per_device or self.per_step == 1)
        chunks = list(self.make_chunks()) if self.spec.owner and not self.streaming else None
        seen, long_rows = [], []  # streamed: the long rows are kept from this pass (a file pass fewer per run)
        for c in chunks if chunks is not None else self.make_chunks():
            seen.append((c.lengths, c.row_ids))
            # (streamed) rows long at some candidate shape; those of the chosen one are kept below
            if self.streaming and (long := c.lengths > min(L * B for L, B in shapes)).any():
                long_rows.append(batching.select_rows(c, long))
        lengths = np.concatenate([s[0] for s in seen]) if seen else np.zeros(0, np.int64)
        row_ids = np.concatenate([s[1] for s in seen]) if seen else np.zeros(0, np.int64)
        del seen
        multihost = len(self.mesh.local_devices) < self.mesh.size  # the mesh spans processes
        if len(shapes) > 1:  # automatic piece length: from the padding of every host's rows
            counts = np.array([batching.padded_slots(lengths, L, B) for L, B in shapes], np.int64)
            if multihost:
                counts = over_hosts(counts.ravel()).sum(axis=0).reshape(counts.shape)
            chosen = batching.choose_piece_len({L: tuple(c) for (L, _), c in zip(shapes, counts)})
            shapes = [s for s in shapes if s[0] == chosen]
        L, B = self.piece_len, self.batch_pieces = shapes[0]
        if self.streaming:
            long_rows = [batching.select_rows(c, c.lengths > L * B) for c in long_rows]
        pieces = batching.num_pieces(lengths, L)
        normal = pieces[pieces <= B]
        totals = np.array([normal.sum(), len(normal), len(row_ids)], np.int64)
        if multihost:
            totals = over_hosts(totals).sum(axis=0)
        mean_pieces = totals[0] / max(totals[1], 1)
        self.rows = config.batch_rows or int(min(B, max(1, np.ceil(1.25 * B / max(mean_pieces, 1)))))
        R, k = self.rows, self.per_step
        n_long = int(np.sum(-(-lengths[pieces > B] // (B * L))))
        if self.spec.owner:
            if chunks is not None:
                by_device = self._pack_by_owner(chunks)
                steps = max((len(b) for b in by_device), default=0)
            else:  # streamed: only the counts now
                self.stream_counts = owner_stream.owner_counts(lengths, row_ids, self.shard, k, L, B, R)
                steps = max(self.stream_counts, default=0)
            per_device = np.bincount((row_ids[pieces > B] // self.shard).astype(np.int64), minlength=k)
            long_solves = int(-(-per_device.max(initial=0) // R))
        else:
            steps = -(-len(batching.batch_starts(normal, B, R, final=True)[0]) // k)
            long_solves = -(-int(np.sum(pieces > B)) // (k * R))
        counts = np.array([steps, -(-n_long // k), long_solves], np.int64)
        if multihost:
            counts = over_hosts(counts).max(axis=0)
        steps, long_steps, long_solves = (int(c) for c in counts)
        calls = -(-steps // self.config.steps_per_call)
        per_call = max(1, -(-steps // max(calls, 1)))  # as few padding steps as `calls` calls allow
        plan = SidePlan(calls * per_call, per_call, long_steps, long_solves, int(totals[2]))
        if self.streaming:
            self.plan = plan
            self.device_calls = None
            self.cached_long = list(batching.pack_long(long_rows, L, B))
        elif chunks is not None:
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

    def _stream_calls(self) -> list[Iterator[tuple[list[jax.Array], int]]]:
        """Per device: its calls built from the files as they are consumed (see `owner_stream`)."""
        parts = owner_stream.split_by_owner(self.make_chunks(), self.shard, self.per_step)
        if self.per_device:  # device j's calls are [1, ...] arrays of its own
            put = [functools.partial(_on_device, d) for d in self.mesh.local_devices]
        else:
            put = [self._device_call]
        return [owner_stream.device_calls(p, *self._shape(), self.plan.per_call, f) for p, f in zip(parts, put)]

    def _pack_by_owner(self, chunks: list[records.RowChunk]) -> list[batching.DeviceBatch]:
        """Device j's rows (those of its table shard, ids counted from the shard's start) in its own batches."""
        packed = []
        for j in range(self.per_step):
            mine = [batching.select_rows(c, c.row_ids // self.shard == j) for c in chunks]
            mine = [dataclasses.replace(c, row_ids=c.row_ids - j * self.shard) for c in mine]
            batches = list(batching.pack_normal(mine, *self._shape()))
            packed.append(batching.merge(batches) if batches else self._empty(0))
        return packed

    @property
    def total_steps(self) -> int:
        """Steps a `run` reports through its `progress` (device j's own calls only with `per_device`)."""
        if self.per_device and self.streaming:
            return self.plan.per_call * sum(-(-n // self.plan.per_call) for n in self.stream_counts)
        if self.per_device:
            return self.plan.per_call * sum(len(c) for c in self.device_calls)
        return self.plan.steps

    def run(
        self, src: jax.Array, dst: jax.Array, progress: ProgressFn | None = None, src_gram: jax.Array | None = None
    ) -> tuple[jax.Array, np.ndarray]:
        """Solve every row of this side into `dst` (donated) with `src` fixed; loss terms summed.

        `progress(steps, rows)` is called after each compiled call of the normal rows; `src_gram`,
        when given, is `gramian(src)` (the training loop keeps each table's).
        """
        dst = sharding.solving_form(dst)  # before the fixed-table replica: their peaks do not add up
        gram = self.fixed(src, src_gram)
        step_src = self._replicated(src)
        terms = []
        lock = threading.Lock()

        def done(rows: int) -> None:
            if progress is not None:
                with lock:
                    progress(self.plan.per_call, rows)

        if self.per_device:
            dst, terms = self._run_per_device(step_src, dst, gram, done)
        else:
            if self.streaming:  # one device: its calls built from the files as they run
                calls = self._stream_calls()[0]
            elif self.device_calls is not None:  # 'owner': one process, the batches stay on its devices
                calls = iter(self.device_calls)
            else:  # packing and host-to-device copies run in the prefetch thread, overlapping the steps
                calls = records.prefetch(lambda: map(self._device_call, self._calls()))
            for arrays, rows in calls:
                dst, t = self.step(step_src, dst, gram, *arrays)
                terms.append(t)
                done(rows)
        if self.plan.long_steps:
            dst, long_terms = self.run_long(step_src, dst, gram)
            terms.extend(long_terms)
        total = np.sum([_host_terms(t) for t in terms], axis=0) if terms else np.zeros(3)
        del step_src  # the replica goes before `stored_form` takes its shard of temporary
        return sharding.stored_form(dst), total

    def _run_per_device(self, src, dst, gram, done: Callable[[int], None]) -> tuple[jax.Array, list]:
        """Each device's calls in its own thread on its own arrays; `dst` reassembled from the parts."""
        srcs, parts = sharding.device_parts(src), sharding.device_parts(dst)
        hypers = sharding.device_parts(gram[1])
        grams = {d: (g, hypers[d]) for d, g in sharding.device_parts(gram[0]).items()}

        def task(device, calls) -> tuple[jax.Array, list]:
            table, terms = parts[device], []
            try:
                for arrays, rows in calls:
                    table, t = self.step(srcs[device], table, grams[device], *arrays)
                    terms.append(t)
                    done(rows)
            finally:
                if hasattr(calls, "close"):  # a stream: stop its reader too
                    calls.close()
            return table, terms

        devices = self.mesh.local_devices
        per_device_calls = self._stream_calls() if self.streaming else self.device_calls
        results = per_core.run([functools.partial(task, d, c) for d, c in zip(devices, per_device_calls)])
        dst = jax.make_array_from_single_device_arrays(dst.shape, dst.sharding, [table for table, _ in results])
        return dst, [t for _, terms in results for t in terms]

    def run_long(self, src, dst, gram) -> tuple[jax.Array, list]:
        """Solve the rows longer than one device batch (matrix-free where the layout allows)."""
        if self.spec.owner and self.spec.matvec and self.spec.solver == "cg":
            return self._run_long_cg(src, dst, gram)
        return self._run_long(src, dst, gram)

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

    def _run_long_cg(self, src, dst, gram) -> tuple[jax.Array, list]:
        """Rows longer than one device batch by matrix-free CG ('owner' layout, one process).

        The rows go in groups (`long_groups.plan_groups`) split over the device threads; each group
        is one call of `sharding.long_cg`, which gathers the group's fixed-table rows once and runs
        r0, the CG steps and the loss on the devices in float32, as a normal row's solve. The new
        rows go back to their owners' shards (`sharding.write_rows`).
        """
        batches = batching.merge(list(self._long()))
        owners, slot = np.unique(batches.owner, return_inverse=True)
        lengths = np.zeros(len(owners), np.int64)
        lengths[slot] = batches.owner_len
        per_row = np.bincount(slot, minlength=len(owners))
        first = np.concatenate([[0], np.cumsum(per_row)[:-1]])
        order = np.argsort(slot, kind="stable")  # each row's batches, together
        d = src.shape[1]
        batch_bytes = batches.ids[0].size * d * 4  # one batch's float32 block
        devices = self.mesh.local_devices if self.per_device else self.mesh.local_devices[:1]
        chunk, plan = long_groups.plan_groups(
            per_row, LONG_CACHE_BYTES // batch_bytes, LONG_BLOCK_BYTES // batch_bytes, len(devices)
        )

        parts = sharding.device_parts(dst)
        local = self.mesh.local_devices
        owner_device, local_ids = owners // self.shard, (owners % self.shard).astype(np.int32)
        x0 = np.zeros((len(owners), d), np.float32)
        for j, device in enumerate(local):
            here = owner_device == j
            x0[here] = sharding.host_float32(np.asarray(parts[device])[local_ids[here]])
        hyper = np.asarray(self.hyper, np.float64)
        lam = sharding.row_reg(self.spec.num_other, hyper, lengths, np)  # float64
        srcs, grams = sharding.device_parts(src), sharding.device_parts(gram[0])
        alpha = np.float32(hyper[0])
        x, sq = np.zeros_like(x0), np.zeros(len(owners))

        def task(w: int) -> None:
            device = devices[w]
            for group in plan[w]:
                rows = np.asarray(group.rows)
                pick = np.concatenate([order[first[r] : first[r] + per_row[r]] for r in group.rows])
                ids = np.full((group.size,) + batches.ids.shape[1:], batching.PAD_ID, np.int32)
                ids[: len(pick)] = batches.ids[pick]
                at = np.zeros(group.size, np.int32)
                at[: len(pick)] = np.repeat(np.arange(len(rows)), per_row[rows])
                start, reg = np.zeros((group.size, d), np.float32), np.zeros(group.size, np.float32)
                start[: len(rows)], reg[: len(rows)] = x0[rows], lam[rows]
                ids, at, start, reg = (jax.device_put(a, device) for a in (ids, at, start, reg))
                got, loss = sharding.long_cg(srcs[device], ids, at, start, reg, grams[device], alpha,
                                             self.spec.cg_iters, chunk, group.resident, self.spec.observed_loss)
                x[rows], sq[rows] = np.asarray(got)[: len(rows)], np.asarray(loss)[: len(rows)]

        tasks = [functools.partial(task, w) for w in range(len(devices))]
        if self.per_device:
            per_core.run(tasks)
        else:
            tasks[0]()
        for j, device in enumerate(local):
            here = owner_device == j
            if here.any():
                parts[device] = sharding.write_rows(parts[device], local_ids[here], x[here])
        dst = jax.make_array_from_single_device_arrays(dst.shape, dst.sharding, [parts[dv] for dv in local])
        x64 = x.astype(np.float64)
        return dst, [np.array([sq.sum(), np.sum(lam * np.sum(x64 * x64, axis=1)), len(owners)])]


def _on_device(device, call: batching.DeviceBatch) -> tuple[list[jax.Array], int]:
    """A one-device call's arrays on `device`, and how many rows it solves."""
    arrays = (call.ids, call.seg, call.row_ids, call.row_len)
    return [jax.device_put(a, device) for a in arrays], int((call.row_ids >= 0).sum())


def _host_terms(terms: jax.Array) -> np.ndarray:
    """[observed, reg, rows] in float64 from a step's terms ([3] summed, or [devices, 3] per device)."""
    return np.asarray(sharding.local_rows(terms) if terms.ndim == 2 else terms, np.float64).reshape(-1, 3).sum(axis=0)


def over_hosts(values: np.ndarray) -> np.ndarray:
    """[processes, len(values)]: every process's `values` (a collective: all processes call it)."""
    return np.asarray(multihost_utils.process_allgather(values)).reshape(-1, len(values))
