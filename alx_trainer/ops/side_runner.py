"""One half-epoch on the devices: `SideRunner` solves every row of one side with the other table
fixed.

At construction a runner reads its side once (`batch_sources.scan`), plans it (`plan.make_plan`)
and picks its batch source (`batch_sources`). A half-epoch (`run`) then takes the gramian of the
fixed table, replicates that table where the layout wants it whole, runs the source's compiled
calls of K dense batches (`kernels`), and solves the rows longer than a batch (`long_rows`).
The training loop (`alx_trainer.train`) and fold-in (`alx_trainer.model`) both solve through it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import threading
from typing import Callable, Iterable, Iterator

import jax
import jax.numpy as jnp
import numpy as np

from alx_trainer import phase_times
from alx_trainer.config import TrainConfig
from alx_trainer.data import batching
from alx_trainer.data.row_chunk import RowChunk
from alx_trainer.ops import (
    batch_sources,
    host_fixed_table,
    kernels,
    long_rows,
    per_core,
    plan,
    table_storage,
)
from alx_trainer.ops.mesh import device_parts, local_rows, padded_rows, replicated
from alx_trainer.ops.spec import Fixed, StepSpec, accelerator, device_layout, hyper_params

# Called with (steps, rows) after each compiled call (from the device threads, under a lock).
ProgressFn = Callable[[int, int], None]
# Accelerator path: a side's batches stay on the devices when they take at most this share of the
# free memory (each side decides in turn, the other side's already counted); long rows are
# solved LONG_STATS_BYTES of d x d statistics per device at a time.
RESIDENT_SHARE = 0.5
LONG_STATS_BYTES = 256 << 20

log = logging.getLogger(__name__)


def free_bytes(device) -> int:
    """Free memory of `device`: its allocator's limit less what is in use, or the host's available
    memory."""
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    if stats and "bytes_limit" in stats:
        return int(stats["bytes_limit"] - stats.get("bytes_in_use", 0))
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


class SideRunner:
    """Compiled kernels, plan and batch source of one side; `run` does one half-epoch.

    `num_rows` is the size of the table being solved: with the 'owner' layout each row goes to
    the device holding its shard of that table. Runners given one `replica` buffer copy their
    fixed tables into its kept memory (float32 tables; see `replicated`): one half-epoch at a time.
    """

    def __init__(
        self,
        config: TrainConfig,
        mesh,
        spec: StepSpec,
        make_chunks: Callable[[], Iterator[RowChunk]],
        num_rows: int,
        replica: host_fixed_table.ReplicaBuffer | None = None,
        name: str = "",
    ):
        spec = dataclasses.replace(
            spec, layout=device_layout(spec.layout, spec.local_stats, mesh.size)
        )
        self.config, self.mesh, self.spec, self.replica = config, mesh, spec, replica
        self.hyper = hyper_params(config.alpha, config.reg, config.reg_exponent)
        self.hyper_on_devices = jax.device_put(self.hyper, replicated(mesh))
        self.shard = padded_rows(num_rows, mesh) // mesh.size
        local = mesh.local_devices
        self.accelerator = accelerator(config)
        # 'owner' on per-core CPU devices: a program and a pinned thread per device (per_core)
        self.per_device = spec.owner and per_core.applies(local)
        streamed = spec.owner and config.stream_batches and (self.per_device or len(local) == 1)
        # (streamed: the per-core path only) rows long at some candidate shape are kept; those of
        # the chosen one are packed
        smallest = min(L * B for L, B in plan.candidate_shapes(config, batching.BATCH_IDS))
        keep = spec.owner and not streamed  # 'owner' packs from the chunks of this pass
        # the training runners' phases (a fold-in's count as the evaluation's)
        timed = functools.partial(phase_times.timed, what=f"{name} side") if name else _untimed
        with timed("read"):
            read = batch_sources.scan(
                make_chunks(), keep_chunks=keep, long_above=smallest if streamed else None
            )
        combine = (
            plan.over_hosts if len(local) < mesh.size else plan.one_host
        )  # the mesh spans processes
        batch_ids = batching.BATCH_IDS
        if self.accelerator:
            batch_ids = plan.accelerator_batch_ids(config.dim, spec.row_stats, local[0].platform)

        def make_plan(max_calls: int) -> plan.SidePlan:
            with timed("plan"):
                return plan.make_plan(
                    config,
                    spec.owner,
                    read.lengths,
                    read.row_ids,
                    len(local),
                    self.shard,
                    combine,
                    batch_ids,
                    max_calls,
                    mesh.size if self.accelerator else 0,
                )

        # the accelerator path: resident batches run a half-epoch in one call
        # (`kernels.make_half_epoch`),
        # streamed ones in at most `calls_per_half_epoch`
        self.plan = make_plan(1 if self.accelerator else 0)
        self.one_call = self.accelerator and self._resident(name)
        if self.accelerator and not self.one_call:
            self.plan = make_plan(config.calls_per_half_epoch)
        with timed("pack"):
            self.source = self._source(make_chunks, read, combine, streamed)
        self.step = self._compiled(spec)
        self.solved_gramian: jax.Array | None = (
            None  # the one-call half-epoch's gramian of its result
        )

    def _source(self, make_chunks, read: batch_sources.Scan, combine: plan.Combine, streamed: bool):
        """The batch source of this side's mode (see `batch_sources`)."""
        mesh, config = self.mesh, self.config
        if self.accelerator:
            long_rows_per_call = max(
                1, min(self.plan.batch_rows, LONG_STATS_BYTES // (4 * config.dim**2))
            )
            source = batch_sources.DeviceResident if self.one_call else batch_sources.DeviceStream
            return source(mesh, self.plan, make_chunks, long_rows_per_call, combine)
        if streamed:
            return batch_sources.OwnerStream(
                mesh, self.plan, make_chunks, read.long_rows, self.shard, self.per_device
            )
        if read.chunks is not None:  # 'owner', held in memory
            return batch_sources.OwnerResident(
                mesh, self.plan, read.chunks, self.shard, self.per_device
            )
        if config.cache_batches:
            return batch_sources.HostCache(mesh, self.plan, make_chunks)
        return batch_sources.FileStream(mesh, self.plan, make_chunks)

    def _resident(self, name: str) -> bool:
        """Whether the accelerator path keeps this side's batches on the devices (said in the
        log)."""
        need = batch_sources.resident_bytes(self.plan)  # per device
        free = free_bytes(self.mesh.local_devices[0])
        choice = self.config.resident_batches
        keep = choice == "on" or (choice == "auto" and need <= RESIDENT_SHARE * free)
        calls = (
            "one compiled call"
            if keep
            else f"at most {self.config.calls_per_half_epoch} compiled calls"
        )
        log.info(
            "%s side: packed batches %.1f MiB per device, %.1f MiB free: %s (resident_batches %s); "
            "%s per half-epoch",
            name or "one",
            need / 2**20,
            free / 2**20,
            "kept on the devices" if keep else "copied double-buffered each half-epoch",
            choice,
            calls,
        )
        return keep

    def _compiled(self, spec: StepSpec):
        return (
            kernels.make_device_step(spec)
            if self.per_device
            else kernels.make_step(self.mesh, spec)
        )

    def observe_loss(self, on: bool) -> None:
        """Whether the next `run`s compute the observed loss of their rows (the kernels'
        `observed_loss`;
        each setting compiles once)."""
        if on != self.spec.observed_loss:
            self.spec = dataclasses.replace(self.spec, observed_loss=on)
            self.step = self._compiled(self.spec)

    @property
    def total_steps(self) -> int:
        """Steps a `run` reports through its `progress` (device j's own calls only with
        `per_device`)."""
        return self.source.total_steps

    def gramian(self, table: jax.Array) -> jax.Array:
        """`T^T T`, replicated (through the host for the collective-free 'owner' layout)."""
        if self.spec.owner:
            return host_fixed_table.gramian_via_host(self.mesh, table)
        return kernels.make_gramian(self.mesh)(table)

    def fixed(self, src: jax.Array, gram: jax.Array | None = None) -> Fixed:
        """The steps' `fixed` argument: the gramian of `src` (`gram` when known) and (alpha, lambda,
        nu), replicated."""
        return self.gramian(src) if gram is None else gram, self.hyper_on_devices

    def replicated(self, table: jax.Array) -> jax.Array:
        """The fixed table as the steps take it: whole on every device unless 'sharded', in
        `gather_form`."""
        if not self.spec.replicated_src:
            return table_storage.gather_form(table)
        if self.spec.owner:
            # A bfloat16 replica is freed each half-epoch: kept, it would add to the shard of
            # temporary that the next half-epoch's `solving_form` takes.
            keep = self.replica if table.dtype != jnp.bfloat16 else None
            return host_fixed_table.replicate_via_host(self.mesh, table, keep)
        return table_storage.gather_form(kernels.make_replicate(self.mesh)(table))

    def run(
        self,
        src: jax.Array,
        dst: jax.Array,
        progress: ProgressFn | None = None,
        src_gram: jax.Array | None = None,
    ) -> tuple[jax.Array, np.ndarray]:
        """Solve every row of this side into `dst` (donated) with `src` fixed; loss terms summed.

        `progress(steps, rows)` is called after each compiled call of the normal rows; `src_gram`,
        when given, is `gramian(src)` (the training loop keeps each table's).
        """
        dst = table_storage.solving_form(
            dst
        )  # before the fixed-table replica: their peaks do not add up
        fixed = self.fixed(src, src_gram)
        if self.one_call:
            dst, terms, self.solved_gramian = self.run_one_call(
                table_storage.gather_form(src), dst, fixed
            )
            if progress is not None:
                progress(self.plan.steps, sum(rows for _, rows in self.source.calls))
            return table_storage.stored_form(dst), _host_terms(terms)
        step_src = self.replicated(src)
        lock = threading.Lock()

        def done(rows: int) -> None:
            if progress is not None:
                with lock:
                    progress(self.plan.per_call, rows)

        dst, terms = self.run_normal(step_src, dst, fixed, done)
        if self.plan.long_steps:
            dst, long_terms = self.run_long(step_src, dst, fixed)
            terms.extend(long_terms)
        total = np.sum([_host_terms(t) for t in terms], axis=0) if terms else np.zeros(3)
        del step_src  # the replica goes before `stored_form` takes its shard of temporary
        return table_storage.stored_form(dst), total

    def one_call_program(self):
        """The compiled one-call half-epoch of this side (`kernels.make_half_epoch`) and its batch
        arguments."""
        calls, longs = self.source.calls, tuple(tuple(c) for c in self.source.device_long_calls())
        normal = tuple(calls[0][0]) if calls else None
        return (
            kernels.make_half_epoch(self.mesh, self.spec, normal is not None, len(longs)),
            normal,
            longs,
        )

    def run_one_call(self, src, dst, fixed: Fixed) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Every row of this side in one compiled call (resident batches); `src` sharded as
        stored."""
        program, normal, longs = self.one_call_program()
        return program(src, dst, fixed, normal, longs)

    def run_normal(
        self, src, dst, fixed: Fixed, done: Callable[[int], None] = lambda rows: None
    ) -> tuple[jax.Array, list]:
        """The rows that fit one batch: every call of the batch source, on `src` as `replicated`
        gave it."""
        streams = self.source.streams()
        if self.per_device:
            return self._run_per_device(src, dst, fixed, streams, done)
        return self._run_calls(src, dst, fixed, streams[0], done)

    def _run_calls(
        self, src, dst, fixed: Fixed, calls: Iterable[batch_sources.Call], done
    ) -> tuple[jax.Array, list]:
        """Run `calls` in order on `dst` (one table, or one device's part of it)."""
        terms = []
        try:
            for arrays, rows in calls:
                dst, t = self.step(src, dst, fixed, *arrays)
                terms.append(t)
                done(rows)
        finally:
            if hasattr(calls, "close"):  # a stream: stop its reader too
                calls.close()
        return dst, terms

    def _run_per_device(self, src, dst, fixed: Fixed, streams, done) -> tuple[jax.Array, list]:
        """Each device's calls in its own thread on its own arrays; `dst` reassembled from the
        parts."""
        srcs, parts, hypers = device_parts(src), device_parts(dst), device_parts(fixed[1])
        grams = {d: (g, hypers[d]) for d, g in device_parts(fixed[0]).items()}
        devices = self.mesh.local_devices
        results = per_core.run(
            [
                functools.partial(self._run_calls, srcs[d], parts[d], grams[d], calls, done)
                for d, calls in zip(devices, streams)
            ]
        )
        dst = jax.make_array_from_single_device_arrays(
            dst.shape, dst.sharding, [table for table, _ in results]
        )
        return dst, [t for _, terms in results for t in terms]

    def run_long(self, src, dst, fixed: Fixed) -> tuple[jax.Array, list]:
        """Solve the rows longer than one device batch (matrix-free where the layout allows)."""
        if self.accelerator:  # every part on the devices
            terms = []
            long_solve = kernels.make_long_solve(self.mesh, self.spec)
            for arrays in self.source.device_long_calls():
                dst, t = long_solve(src, dst, fixed, *arrays)
                terms.append(t)
            return dst, terms
        batches = self.source.long_batches()
        if self.spec.owner and self.spec.cg_matvec:
            return long_rows.solve_cg(
                self.mesh,
                self.spec,
                self.shard,
                self.per_device,
                self.hyper,
                batches,
                src,
                dst,
                fixed,
            )
        return long_rows.solve_explicit(
            self.mesh, self.spec, self.plan, self.shard, batches, src, dst, fixed
        )


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
