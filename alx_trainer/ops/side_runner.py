"""One half-epoch on the devices: `plan_side` plans a side, `SideRunner.run` solves every row of
it with the other table fixed.

The planning step (`plan_side`) reads the side once (`batch_sources.scan`), plans its batches
(`batching.make_plan`, once) and makes its batch source as the `ExecutionPlan` says
(`batch_sources`). A half-epoch (`SideRunner.run`) then takes the gramian of the fixed table,
replicates that table where the layout wants it whole, runs the source's compiled calls of K dense
batches (`kernels`), and solves the rows longer than a batch (`long_rows`); it returns a
`HalfEpoch`. The training loop (`alx_trainer.train`) and fold-in (`alx_trainer.model`) both solve
through it.

The 'owner' layout (one process) takes the fixed table's replica and gramian through host memory,
with no collective: CPU devices alias one host copy of the fixed table (`replicate_via_host`,
into a `ReplicaBuffer` kept between half-epochs), and the gramian is summed by a thread per core
from the shards read in place (`gramian_via_host`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from threadpoolctl import ThreadpoolController

from alx_trainer import execution, phase_times
from alx_trainer.config import TrainConfig
from alx_trainer.data import batching
from alx_trainer.execution import (
    ExecutionPlan,
    Fixed,
    StepSpec,
    aligned_empty,
    device_parts,
    host_float32,
    host_threads,
    hyper_params,
    local_rows,
    padded_rows,
    replicated,
)
from alx_trainer.ops import batch_sources, kernels, long_rows, table_storage
from alx_trainer.ops.table_storage import bits_dtype, gather_form

# Called with (steps, rows) after each compiled call (from the device threads, under a lock).
ProgressFn = Callable[[int, int], None]
# Accelerator path: long rows are solved LONG_STATS_BYTES of d x d statistics per device at
# a time.
LONG_STATS_BYTES = 256 << 20

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class LossTerms:
    """A half-epoch's loss terms, summed over its rows."""

    # sum over the observed pairs of (1 - h.x)^2 (0 unless asked for)
    observed: float
    # sum of lambda_r |x_r|^2 over the solved rows
    reg: float
    # rows solved
    rows: int

    @classmethod
    def of(cls, sums: np.ndarray) -> LossTerms:
        """From the kernels' [observed, reg, rows] sums."""
        return cls(float(sums[0]), float(sums[1]), int(sums[2]))


@dataclasses.dataclass(frozen=True)
class HalfEpoch:
    """The result of `SideRunner.run`: the solved table, its loss terms, and its gramian when the
    half-epoch computed it (the one-call path), else None."""

    table: jax.Array
    terms: LossTerms
    gramian: jax.Array | None = None


def plan_side(
    config: TrainConfig,
    exe: ExecutionPlan,
    mesh,
    spec: StepSpec,
    make_chunks: batch_sources.MakeChunks,
    num_rows: int,
    replica: ReplicaBuffer | None = None,
    name: str = "",
) -> SideRunner:
    """The planning step of one side: read it once, plan its batches, make its batch source.

    `num_rows` is the size of the table being solved: with the 'owner' layout each row goes to the
    device holding its shard of that table. Runners given one `replica` buffer copy their fixed
    tables into its kept memory (float32 tables; see `SideRunner.replicated`): one half-epoch at a
    time. `name` ('row', 'col') times the phases of the training runners.
    """
    shard = padded_rows(num_rows, mesh) // mesh.size
    local = mesh.local_devices
    owner_stream = exe.batches == "owner_stream"
    # rows long at some candidate shape: kept by the pass, those of the chosen shape packed
    smallest = min(L * B for L, B in batching.candidate_shapes(config, exe.batch_ids))
    timed = functools.partial(phase_times.timed, what=f"{name} side") if name else _untimed
    # resident batches pack from the rows this pass keeps (the accelerator path's too, unless
    # they are off: one read of the files instead of two; dropped if the batches do not fit)
    keep = exe.batches == "owner_resident" or (
        exe.batches == "device" and exe.resident_batches != "off"
    )
    with timed("read"):
        read = batch_sources.scan(
            make_chunks(), keep_chunks=keep, long_above=None if keep else smallest
        )
    # the mesh spans processes
    combine = batching.over_hosts if len(local) < mesh.size else batching.one_host
    with timed("plan"):
        side = batching.make_plan(
            config,
            spec.owner,
            read.lengths,
            read.row_ids,
            len(local),
            shard,
            combine,
            exe.batch_ids,
            # the accelerator path: resident batches run a half-epoch in one compiled call
            1 if exe.accelerator else 0,
            mesh.size if exe.accelerator else 0,
        )
    one_call = exe.accelerator and _resident(exe, side, mesh, name, config.calls_per_half_epoch)
    if exe.accelerator and not one_call:
        side = side.with_calls(config.calls_per_half_epoch)
    with timed("pack"):
        if exe.batches == "device":
            long_rows_per_call = max(
                1, min(side.batch_rows, LONG_STATS_BYTES // (4 * config.dim**2))
            )
            if one_call:
                source = batch_sources.DeviceResident.pack(
                    mesh, side, batch_sources.drained(read.chunks), long_rows_per_call, combine
                )
            else:
                # streamed sources take their long rows from the pass, not a second read
                long = read.long_rows
                if read.chunks is not None:
                    long = batch_sources.longer_than(read.chunks, smallest)
                source = batch_sources.DeviceStream(
                    mesh, side, make_chunks, long, long_rows_per_call, combine
                )
        elif owner_stream:
            source = batch_sources.OwnerStream.pack(
                mesh, side, make_chunks, read.long_rows, shard, exe.per_device
            )
        elif exe.batches == "owner_resident":
            source = batch_sources.OwnerResident.pack(
                mesh, side, read.chunks, shard, exe.per_device
            )
        elif exe.batches == "host_cache":
            source = batch_sources.HostCache.pack(mesh, side, make_chunks, read.long_rows)
        else:
            source = batch_sources.FileStream(mesh, side, make_chunks, read.long_rows)
    return SideRunner(config, exe, mesh, spec, side, source, shard, one_call, replica)


def _resident(exe: ExecutionPlan, side: batching.SidePlan, mesh, name: str, calls: int) -> bool:
    """Whether the accelerator path keeps this side's batches on the devices (said in the log)."""
    need = batch_sources.resident_bytes(side)
    free = execution.free_bytes(mesh.local_devices[0])
    keep = execution.keeps_resident(exe, need, free)
    log.info(
        "%s side: packed batches %.1f MiB per device, %.1f MiB free: %s (resident_batches %s); "
        "%s per half-epoch",
        name or "one",
        need / 2**20,
        free / 2**20,
        "kept on the devices" if keep else "copied double-buffered each half-epoch",
        exe.resident_batches,
        "one compiled call" if keep else f"at most {calls} compiled calls",
    )
    return keep


class SideRunner:
    """Compiled kernels, batch plan and batch source of one side (`plan_side` makes one); `run`
    does one half-epoch."""

    def __init__(
        self,
        config: TrainConfig,
        exe: ExecutionPlan,
        mesh,
        spec: StepSpec,
        side: batching.SidePlan,
        source: batch_sources.BatchSource,
        shard: int,
        one_call: bool,
        replica: ReplicaBuffer | None = None,
    ):
        self.config, self.exe, self.mesh, self.spec = config, exe, mesh, spec
        self.plan, self.source, self.shard, self.one_call = side, source, shard, one_call
        self.replica = replica
        self.per_device = exe.per_device
        self.hyper = hyper_params(config.alpha, config.reg, config.reg_exponent)
        self.hyper_on_devices = jax.device_put(self.hyper, replicated(mesh))

    def _step(self, spec: StepSpec):
        """The compiled step of `spec` (one program per spec: `kernels` caches them)."""
        if self.per_device:
            return kernels.make_device_step(spec)
        return kernels.make_step(self.mesh, spec)

    @property
    def total_steps(self) -> int:
        """Steps a `run` reports through its `progress` (device j's own calls only with
        `per_device`)."""
        return self.source.total_steps

    def gramian(self, table: jax.Array) -> jax.Array:
        """`T^T T`, replicated (through the host for the collective-free 'owner' layout)."""
        if self.spec.owner:
            return gramian_via_host(self.mesh, table)
        return kernels.make_gramian(self.mesh)(table)

    def fixed(self, src: jax.Array, gram: jax.Array | None = None) -> Fixed:
        """The steps' `fixed` argument: the gramian of `src` (`gram` when known) and (alpha, lambda,
        nu), replicated."""
        return Fixed(self.gramian(src) if gram is None else gram, self.hyper_on_devices)

    def replicated(self, table: jax.Array) -> jax.Array:
        """The fixed table as the steps take it: whole on every device unless 'sharded', in
        `gather_form`."""
        if not self.spec.replicated_src:
            return table_storage.gather_form(table)
        if self.spec.owner:
            # A bfloat16 replica is freed each half-epoch: kept, it would add to the shard of
            # temporary that the next half-epoch's `solving_form` takes.
            keep = self.replica if table.dtype != jnp.bfloat16 else None
            return replicate_via_host(self.mesh, table, keep)
        return table_storage.gather_form(kernels.make_replicate(self.mesh)(table))

    def run(
        self,
        src: jax.Array,
        dst: jax.Array,
        progress: ProgressFn | None = None,
        src_gram: jax.Array | None = None,
        observed_loss: bool | None = None,
    ) -> HalfEpoch:
        """Solve every row of this side into `dst` (donated) with `src` fixed.

        `progress(steps, rows)` is called after each compiled call of the normal rows; `src_gram`,
        when given, is `gramian(src)` (the training loop keeps each table's); `observed_loss`
        (None: the spec's) whether the observed loss is computed (each setting compiles once).
        """
        spec = self.spec
        if observed_loss is not None and observed_loss != spec.observed_loss:
            spec = dataclasses.replace(spec, observed_loss=observed_loss)
        # before the fixed-table replica: their peaks do not add up
        dst = table_storage.solving_form(dst)
        fixed = self.fixed(src, src_gram)
        if self.one_call:
            program, normal, longs = self.one_call_program(spec)
            dst, terms, gram = program(table_storage.gather_form(src), dst, fixed, normal, longs)
            self.report_one_call(progress)
            return HalfEpoch(table_storage.stored_form(dst), LossTerms.of(_host_terms(terms)), gram)
        step_src = self.replicated(src)
        lock = threading.Lock()

        def done(rows: int) -> None:
            if progress is not None:
                with lock:
                    progress(self.plan.per_call, rows)

        dst, terms = self.run_normal(spec, step_src, dst, fixed, done)
        if self.plan.long_steps:
            dst, long_terms = self.run_long(spec, step_src, dst, fixed)
            terms.extend(long_terms)
        total = np.sum([_host_terms(t) for t in terms], axis=0) if terms else np.zeros(3)
        # the replica goes before `stored_form` takes its shard of temporary
        del step_src
        return HalfEpoch(table_storage.stored_form(dst), LossTerms.of(total))

    def report_one_call(self, progress: ProgressFn | None) -> None:
        """Report a one-call half-epoch's steps and rows to `progress` (when given)."""
        if progress is not None:
            progress(self.plan.steps, sum(rows for _, rows in self.source.calls))

    def resident_batches(self) -> tuple[tuple | None, tuple]:
        """The one-call half-epoch's batch arguments: its normal rows' 4 arrays (None when there
        are none) and each long-row call's 4 arrays."""
        calls, longs = self.source.calls, tuple(tuple(c) for c in self.source.long_calls())
        return (tuple(calls[0][0]) if calls else None), longs

    def one_call_program(self, spec: StepSpec):
        """The compiled one-call half-epoch of this side (`kernels.make_half_epoch`) and its batch
        arguments."""
        normal, longs = self.resident_batches()
        return (
            kernels.make_half_epoch(self.mesh, spec, normal is not None, len(longs)),
            normal,
            longs,
        )

    def run_normal(
        self, spec: StepSpec, src, dst, fixed: Fixed, done: Callable[[int], None]
    ) -> tuple[jax.Array, list]:
        """The rows that fit one batch: every call of the batch source, on `src` as `replicated`
        gave it."""
        streams = self.source.streams()
        step = self._step(spec)
        if self.per_device:
            return self._run_per_device(step, src, dst, fixed, streams, done)
        return self._run_calls(step, src, dst, fixed, streams[0], done)

    @staticmethod
    def _run_calls(
        step, src, dst, fixed: Fixed, calls: Iterable[batch_sources.Call], done
    ) -> tuple[jax.Array, list]:
        """Run `calls` in order on `dst` (one table, or one device's part of it)."""
        terms = []
        try:
            for arrays, rows in calls:
                dst, t = step(src, dst, fixed, *arrays)
                terms.append(t)
                done(rows)
        finally:
            # a stream: stop its reader too
            if hasattr(calls, "close"):
                calls.close()
        return dst, terms

    def _run_per_device(
        self, step, src, dst, fixed: Fixed, streams, done
    ) -> tuple[jax.Array, list]:
        """Each device's calls in its own thread on its own arrays; `dst` reassembled from the
        parts."""
        srcs, parts, hypers = device_parts(src), device_parts(dst), device_parts(fixed.hyper)
        fixeds = {d: Fixed(g, hypers[d]) for d, g in device_parts(fixed.gramian).items()}
        devices = self.mesh.local_devices
        results = execution.run_per_core(
            [
                functools.partial(self._run_calls, step, srcs[d], parts[d], fixeds[d], calls, done)
                for d, calls in zip(devices, streams)
            ]
        )
        dst = jax.make_array_from_single_device_arrays(
            dst.shape, dst.sharding, [table for table, _ in results]
        )
        return dst, [t for _, terms in results for t in terms]

    def run_long(self, spec: StepSpec, src, dst, fixed: Fixed) -> tuple[jax.Array, list]:
        """Solve the rows longer than one device batch as the plan's `long_rows` says."""
        if self.exe.long_rows == "device":
            terms = []
            long_solve = kernels.make_long_solve(self.mesh, spec)
            for arrays in self.source.long_calls():
                dst, t = long_solve(src, dst, fixed, *arrays)
                terms.append(t)
            return dst, terms
        batches = self.source.long_calls()
        if self.exe.long_rows == "matvec_cg":
            return long_rows.solve_cg(
                self.mesh, spec, self.shard, self.per_device, self.hyper, batches, src, dst, fixed
            )
        return long_rows.solve_explicit(
            self.mesh, spec, self.plan, self.shard, batches, src, dst, fixed
        )


@dataclasses.dataclass(frozen=True)
class Epoch:
    """The result of `run_epoch`, still on the devices (nothing copied to the host)."""

    # (row, col), or (table,) when tied
    tables: tuple[jax.Array, ...]
    # [2, 3]: each half-epoch's [observed, reg, rows]
    terms: jax.Array
    # the gramians of the solved rows and of the solved columns (with tied tables: of the table
    # after each half-epoch)
    gramians: tuple[jax.Array, jax.Array]


def one_call_epoch(row: SideRunner, col: SideRunner) -> bool:
    """Whether an epoch runs as one compiled call (`run_epoch`): both sides' batches resident."""
    return row.one_call and col.one_call


def run_epoch(
    row: SideRunner,
    col: SideRunner,
    tables: tuple[jax.Array, ...],
    other_gram: jax.Array,
    observed_loss: bool,
) -> Epoch:
    """A whole epoch in one compiled call (`kernels.make_epoch`; `one_call_epoch` runners): the
    row half-epoch, then the column half-epoch with its observed loss when `observed_loss`.
    `tables` (donated) is (row, col), or (table,) with tied tables; `other_gram` is the gramian of
    the table the row side reads (`tables[-1]`), as the training loop keeps it. It returns as
    soon as the call is dispatched: the caller copies what it needs of the result to the host,
    once."""
    row_spec = dataclasses.replace(row.spec, observed_loss=False)
    col_spec = dataclasses.replace(col.spec, observed_loss=observed_loss)
    row_batches, col_batches = row.resident_batches(), col.resident_batches()

    def calls(batches: tuple[tuple | None, tuple]) -> tuple[bool, int]:
        return batches[0] is not None, len(batches[1])

    program = kernels.make_epoch(
        row.mesh, row_spec, col_spec, len(tables) == 1, calls(row_batches), calls(col_batches)
    )
    solving = tuple(table_storage.solving_form(t) for t in tables)
    fixed = Fixed(other_gram, row.hyper_on_devices)
    out, terms, grams = program(solving, fixed, row_batches, col_batches)
    return Epoch(tuple(table_storage.stored_form(t) for t in out), terms, grams)


def _untimed(phase: str) -> contextlib.AbstractContextManager:
    return contextlib.nullcontext()


def _host_terms(terms: jax.Array) -> np.ndarray:
    """[observed, reg, rows] in float64 from a step's terms ([3] summed, or [devices, 3] per
    device)."""
    return (
        np.asarray(local_rows(terms) if terms.ndim == 2 else terms, np.float64)
        .reshape(-1, 3)
        .sum(axis=0)
    )


# The fixed table through host memory ('owner' layout, one process)


def replicate_via_host(
    mesh: Mesh, table: jax.Array, buffer: ReplicaBuffer | None = None
) -> jax.Array:
    """The whole table on every device through host memory (no collective; one process), in
    `gather_form`.

    One host copy: CPU devices alias it (`may_alias`, 64-byte aligned), so per-core devices share
    one fixed table instead of holding one each; one device just keeps the table it has. With
    `buffer`, the copy goes into its memory (see `ReplicaBuffer`), else into a fresh allocation.
    """
    if mesh.size == 1:
        return gather_form(table)
    bits = bits_dtype(table)
    host = aligned_empty(table.shape, bits) if buffer is None else buffer.view(table.shape, bits)

    # NumPy releases the GIL: the shards' copies (and first-touch faults) in parallel
    def copy(shard) -> None:
        host[shard.index] = np.asarray(shard.data).view(host.dtype)

    with ThreadPoolExecutor(host_threads(), thread_name_prefix="alx-replica") as pool:
        list(pool.map(copy, table.addressable_shards))
    return jax.device_put(host, NamedSharding(mesh, P()), may_alias=True)


class ReplicaBuffer:
    """Host memory for the fixed-table replica, kept from one half-epoch to the next.

    A fresh allocation per half-epoch is touched for the first time by the copy: a page fault per
    page, which costs many times the copy itself. Grown to the largest table it has held. A
    replica made in it is valid until the next one is: hold one at a time.
    """

    def __init__(self) -> None:
        self._raw: np.ndarray | None = None

    def view(self, shape: tuple[int, ...], dtype) -> np.ndarray:
        """An uninitialized, 64-byte aligned array of `shape` and `dtype` in the kept memory."""
        size = int(np.prod(shape)) * np.dtype(dtype).itemsize
        if self._raw is None or self._raw.nbytes < size:
            self._raw = None  # the old memory goes before the new is taken
            self._raw = aligned_empty((size,), np.uint8)
        return self._raw[:size].view(dtype).reshape(shape)


GRAM_CHUNK = 65536  # rows cast to float32 at a time by `gramian_via_host`


@functools.cache
def _blas() -> ThreadpoolController:
    """threadpoolctl's handle on the loaded BLAS libraries, found once: `threadpool_limits` scans
    every loaded library at each call, tens of milliseconds an epoch at ML-1M's shape."""
    return ThreadpoolController()


def gramian_via_host(mesh: Mesh, table: jax.Array) -> jax.Array:
    """`T^T T` [d, d] float32, replicated, summed in host memory (no collective; one process).

    Each shard is read in place (a NumPy view of its CPU buffer) and cast to float32 a chunk of
    rows at a time, so a bfloat16 table never gets a float32 copy; parts are summed in float64.
    The chunks are shared among a thread per core, each with its own sum and scratch.
    """
    d = table.shape[1]
    chunks = [
        (rows, lo)
        for rows in (np.asarray(s.data) for s in table.addressable_shards)
        for lo in range(0, len(rows), GRAM_CHUNK)
    ]
    workers = max(1, min(host_threads(), len(chunks)))

    def part(w: int) -> np.ndarray:
        total = np.zeros((d, d))
        bits = np.empty((min(GRAM_CHUNK, table.shape[0]), d), np.uint32)
        for rows, lo in chunks[w::workers]:
            t = host_float32(rows[lo : lo + GRAM_CHUNK], bits)
            total += t.T @ t
        return total

    # BLAS at one thread per caller: its spinning pool threads slow this down severely on a
    # per-core host whose cores are all busy
    with _blas().limit(limits=1, user_api="blas"):
        if workers == 1:
            total = part(0)
        else:
            with ThreadPoolExecutor(workers, thread_name_prefix="alx-gram") as pool:
                total = sum(pool.map(part, range(workers)))
    return jax.device_put(total.astype(np.float32), NamedSharding(mesh, P()))
