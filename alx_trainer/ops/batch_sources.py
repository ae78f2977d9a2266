"""Where a half-epoch's packed batches come from: one `BatchSource` per mode.

Every source gives `streams()`: one iterable of calls per thread that runs them (one stream for
a global mesh program; one per device with `per_device`), each call being a compiled step's
batch arrays on the devices and the rows it solves; `long_calls()`, the rows longer than one
batch; and `total_steps`, the steps a half-epoch reports. Modes (`side_runner.plan_side` picks
one by the `ExecutionPlan`'s `batches`; constructors do no I/O, the `.pack` classmethods read and
pack the sources kept between half-epochs):
- `FileStream`: packed from the files every half-epoch in a prefetch thread, each call copied to
  the devices ahead of the steps (the default of the 'sharded' and 'replicated' layouts).
- `HostCache`: packed once, kept in host memory, copied every half-epoch (`cache_batches`).
- `OwnerResident`: 'owner' layout; each device's batches packed apart and kept on the devices.
- `OwnerStream`: 'owner' with `stream_batches`: built per device from the files as they run.
- `DeviceResident`, `DeviceStream`: the accelerator path (`TrainConfig.accelerator`), every call on
  the devices once, or copied double-buffered ahead of the steps when they do not fit; their long
  rows are device calls of `kernels.make_long_solve`, the others' host `batching.LongBatch`es.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Iterable, Iterator, Protocol, Sequence, runtime_checkable

import jax
import numpy as np

from alx_trainer.data import batching
from alx_trainer.data.batching import Combine, SidePlan
from alx_trainer.data.dataset import prefetch
from alx_trainer.execution import aligned_empty, host_batch
from alx_trainer.ops import owner_file_stream
from webgraph_contract.ragged import RaggedRows

# A compiled call's batch arrays (ids, seg, row_ids, row_len) on the devices, and the rows it
# solves.
Call = tuple[list[jax.Array], int]
MakeChunks = Callable[[], Iterator[RaggedRows]]
# The long rows as a source gives them: host batches (`long_rows.solve_cg`/`solve_explicit`) or,
# on the accelerator path, each call's arrays on the devices (`kernels.make_long_solve`).
LongCalls = Iterable[batching.LongBatch] | Iterable[list[jax.Array]]


@runtime_checkable
class BatchSource(Protocol):
    """The packed batches of one side, as `SideRunner.run` takes them."""

    # one stream per local device, each run in its own thread (`execution.run_per_core`)
    per_device: bool

    @property
    def total_steps(self) -> int:
        """Steps a half-epoch reports through its progress (device j's own only with
        `per_device`)."""
        ...

    def streams(self) -> list[Iterable[Call]]:
        """The calls of a half-epoch's normal rows: one iterable per thread that runs them."""
        ...

    def long_calls(self) -> LongCalls:
        """The rows longer than one batch (see `LongCalls`)."""
        ...


@dataclasses.dataclass(frozen=True)
class Scan:
    """What the planning pass read: every row's length and id, and the rows a source keeps."""

    lengths: np.ndarray
    row_ids: np.ndarray
    chunks: list[RaggedRows] | None  # every chunk (sources that pack from memory)
    long_rows: list[RaggedRows]  # rows longer than the smallest candidate batch (`OwnerStream`)


def scan(chunks: Iterable[RaggedRows], keep_chunks: bool, long_above: int | None) -> Scan:
    """One pass over a side's rows; keeps the chunks (their ids as int32 where they fit, in
    `Slabs`: no int64 copy of the side's links is held), or the rows longer than `long_above`
    ids."""
    seen, kept, long_rows = [], [], []
    slabs = Slabs()
    for c in chunks:
        seen.append((c.lengths, c.row_ids))
        if keep_chunks:
            kept.append(slabs.narrowed(c))
        if long_above is not None:
            long_rows += longer_than([c], long_above)
    lengths = np.concatenate([s[0] for s in seen]) if seen else np.zeros(0, np.int64)
    row_ids = np.concatenate([s[1] for s in seen]) if seen else np.zeros(0, np.int64)
    return Scan(lengths, row_ids, kept if keep_chunks else None, long_rows)


def longer_than(chunks: Iterable[RaggedRows], above: int) -> list[RaggedRows]:
    """The rows of `chunks` with more than `above` ids (a copy), a chunk each where any."""
    return [c.select(long) for c in chunks if (long := c.lengths > above).any()]


def drained(chunks: list[RaggedRows]) -> MakeChunks:
    """`chunks` (a scan's kept rows) as a source of chunks read once, each released as it is
    handed over: packing them frees the side's rows as it goes."""

    def make() -> Iterator[RaggedRows]:
        chunks.reverse()
        while chunks:
            yield chunks.pop()

    return make


class Slabs:
    """Kept chunks' ids, narrowed to int32 into large shared arrays (`SLAB_IDS` ids each).

    One allocation per chunk would leave the allocator's heap holed once the chunks are packed
    and freed (memory it keeps); a slab is above glibc's mmap threshold, so it goes back to the
    system once the last chunk viewing it is dropped.
    """

    # int32 ids per slab (64 MiB)
    SLAB_IDS = 16 << 20

    def __init__(self) -> None:
        self.slab, self.used = np.zeros(0, np.int32), 0

    def narrowed(self, chunk: RaggedRows) -> RaggedRows:
        """`chunk` with its ids copied as int32 (a view of a slab), or as it is when they are
        int32 already or do not fit."""
        ids = chunk.ids
        if ids.dtype == np.int32 or (len(ids) and int(ids.max()) >= 2**31):
            return chunk
        n = len(ids)
        if n > self.SLAB_IDS:
            return dataclasses.replace(chunk, ids=ids.astype(np.int32))
        if self.used + n > len(self.slab):
            self.slab, self.used = np.empty(self.SLAB_IDS, np.int32), 0
        out = self.slab[self.used : self.used + n]
        out[:] = ids
        self.used += n
        return dataclasses.replace(chunk, ids=out)


def _empty(plan: SidePlan, k: int) -> batching.DeviceBatch:
    return batching.empty_batch(k, *plan.shape)


def host_calls(
    chunks: Iterable[RaggedRows], plan: SidePlan, per_step: int, threads: int = 1
) -> Iterator[batching.DeviceBatch]:
    """This host's calls ([local devices, per_call, ...] arrays), exactly `plan.calls` of them,
    packed in `threads` threads (0: one per host core)."""
    return batching.pack_calls(chunks, *plan.shape, per_step, plan.per_call, plan.steps, threads)


def global_call(mesh, call: batching.DeviceBatch) -> Call:
    """A call's arrays on the mesh (sharded by device), and how many rows it solves."""
    arrays = (call.ids, call.seg, call.row_ids, call.row_len)
    return [host_batch(mesh, a) for a in arrays], int((call.row_ids >= 0).sum())


def device_call(device, call: batching.DeviceBatch) -> Call:
    """A one-device call's arrays on `device`, and how many rows it solves."""
    arrays = (call.ids, call.seg, call.row_ids, call.row_len)
    return [jax.device_put(a, device) for a in arrays], int((call.row_ids >= 0).sum())


class FileStream:
    """Packed from the files every half-epoch; packing and copies run in a prefetch thread. Its
    long rows come from `long` (kept by the planning pass: no second read of the files)."""

    per_device = False
    # packing shares the host with the CPU devices' steps
    pack_threads = 1

    def __init__(self, mesh, plan: SidePlan, make_chunks: MakeChunks, long: list[RaggedRows]):
        self.mesh, self.plan, self.make_chunks, self.long = mesh, plan, make_chunks, long
        self.per_step = len(mesh.local_devices)

    def host_calls(self) -> Iterator[batching.DeviceBatch]:
        return host_calls(self.make_chunks(), self.plan, self.per_step, self.pack_threads)

    def streams(self) -> list[Iterable[Call]]:
        return [prefetch(lambda: map(functools.partial(global_call, self.mesh), self.host_calls()))]

    def long_calls(self) -> LongCalls:
        return batching.pack_long(self.long, self.plan.piece_len, self.plan.batch_pieces)

    @property
    def total_steps(self) -> int:
        return self.plan.steps


class HostCache:
    """Packed once (`pack`: the first half-epoch's calls), kept in host memory, copied every
    half-epoch in a prefetch thread."""

    per_device = False

    def __init__(
        self,
        mesh,
        plan: SidePlan,
        calls: list[batching.DeviceBatch],
        long: list[batching.LongBatch],
    ):
        self.mesh, self.plan, self.calls, self.long = mesh, plan, calls, long

    @classmethod
    def pack(
        cls, mesh, plan: SidePlan, make_chunks: MakeChunks, long: list[RaggedRows]
    ) -> HostCache:
        """Read and pack the side once, before the steps: on every host core; the long rows from
        `long` (the planning pass's)."""
        per_step = len(mesh.local_devices)
        calls = list(host_calls(make_chunks(), plan, per_step, threads=0))
        return cls(
            mesh, plan, calls, list(batching.pack_long(long, plan.piece_len, plan.batch_pieces))
        )

    def streams(self) -> list[Iterable[Call]]:
        put = functools.partial(global_call, self.mesh)
        return [prefetch(lambda: map(put, iter(self.calls)))]

    def long_calls(self) -> LongCalls:
        return self.long

    @property
    def total_steps(self) -> int:
        return self.plan.steps


def owner_rows(chunks: Sequence[RaggedRows], shard: int, j: int) -> list[RaggedRows]:
    """Device j's rows (those of its table shard, ids counted from the shard's start); a chunk
    wholly of its shard is taken as it is (files written in row order hold few mixed chunks)."""
    mine = []
    for c in chunks:
        keep = c.row_ids // shard == j
        part = c if keep.all() else c.select(keep)
        if len(part):
            mine.append(dataclasses.replace(part, row_ids=part.row_ids - j * shard))
    return mine


def pack_by_owner(
    chunks: Sequence[RaggedRows], plan: SidePlan, shard: int, devices: int
) -> list[batching.DeviceBatch]:
    """Device j's rows (`owner_rows`) in its own batches."""
    packed = []
    for j in range(devices):
        batches = list(batching.pack_normal(owner_rows(chunks, shard, j), *plan.shape))
        packed.append(batching.merge(batches) if batches else _empty(plan, 0))
    return packed


def owner_device_calls(
    chunks: Sequence[RaggedRows], plan: SidePlan, shard: int, j: int, device
) -> list[Call]:
    """Device j's own calls ('owner' layout, `per_device`) on `device`: its batches packed in place
    into [calls, 1, per_call, ...] arrays (the last call padded), every call then put in one
    `device_put`: no copy of the batches on the host between packing and putting (a CPU device
    aliases them: one copy of the batches in all), and no Python call into JAX per array.

    The same calls as slot j of the global calls (`owner_steps`, `group_steps`, `stack_calls`)
    less those that are padding only.
    """
    per_call = plan.per_call
    # at most `plan.steps`
    planned = -(-plan.device_steps[j] // per_call) * per_call
    # aligned: CPU devices alias the packed arrays (the puts copy nothing)
    packed = batching.empty_batch(planned, *plan.shape, alloc=aligned_empty)
    filled = batching.pack_normal_into(owner_rows(chunks, shard, j), packed, plan.piece_len)
    calls = -(-filled // per_call)
    arrays = [
        a[: calls * per_call].reshape(calls, 1, per_call, *a.shape[1:])
        for a in (packed.ids, packed.seg, packed.row_ids, packed.row_len)
    ]
    put = jax.device_put([a[c] for c in range(calls) for a in arrays], device)
    rows = (arrays[2] >= 0).sum(axis=(1, 2, 3)).tolist()
    return [(put[4 * c : 4 * c + 4], rows[c]) for c in range(calls)]


class OwnerResident:
    """'owner' layout: each device's rows packed apart once (`pack`) and kept on the devices.

    With `per_device`, device j's calls are single-device arrays of its own (its all-padding
    calls left out; `owner_device_calls`), one device after the other: a thread per device ran no
    faster, its packing and puts held by the GIL. Else global calls whose slot j holds device j's
    batches.
    """

    def __init__(
        self,
        plan: SidePlan,
        calls: list[list[Call]],
        long: list[batching.LongBatch],
        per_device: bool,
    ):
        self.plan, self.calls, self.long, self.per_device = plan, calls, long, per_device

    @classmethod
    def pack(
        cls, mesh, plan: SidePlan, chunks: list[RaggedRows], shard: int, per_device: bool
    ) -> OwnerResident:
        """Pack `chunks` (every row of the side) by owner and put the calls on the devices.

        `chunks` is emptied as it is packed (the caller's list): with `per_device`, a chunk goes
        once the devices that own its rows are packed, so the rows read and the batches packed
        are not both held whole; the list is empty on return.
        """
        devices = mesh.local_devices
        long = list(batching.pack_long(chunks, plan.piece_len, plan.batch_pieces))
        if per_device:
            calls = []
            for j, d in enumerate(devices):
                calls.append(owner_device_calls(chunks, plan, shard, j, d))
                chunks[:] = [c for c in chunks if len(c) and int(c.row_ids.max()) // shard > j]
        else:
            k = len(devices)
            steps = batching.owner_steps(pack_by_owner(chunks, plan, shard, k), _empty(plan, 1))
            chunks.clear()
            grouped = batching.group_steps(steps, k, plan.steps, functools.partial(_empty, plan))
            calls = [[global_call(mesh, c) for c in batching.stack_calls(grouped, plan.per_call)]]
        chunks.clear()
        return cls(plan, calls, long, per_device)

    def streams(self) -> list[Iterable[Call]]:
        return self.calls

    def long_calls(self) -> LongCalls:
        return self.long

    @property
    def total_steps(self) -> int:
        if self.per_device:
            return self.plan.per_call * sum(len(c) for c in self.calls)
        return self.plan.steps


class OwnerStream:
    """'owner' with `stream_batches`: each device's calls built from the files as they are consumed
    (`owner_file_stream`); only the long rows, kept from the planning pass, stay in memory."""

    def __init__(
        self,
        mesh,
        plan: SidePlan,
        make_chunks: MakeChunks,
        long: list[batching.LongBatch],
        shard: int,
        per_device: bool,
    ):
        self.mesh, self.plan, self.make_chunks = mesh, plan, make_chunks
        self.long, self.shard, self.per_device = long, shard, per_device

    @classmethod
    def pack(
        cls,
        mesh,
        plan: SidePlan,
        make_chunks: MakeChunks,
        long_rows: list[RaggedRows],
        shard: int,
        per_device: bool,
    ) -> OwnerStream:
        """Pack the long rows the planning pass kept (those longer than a batch of `plan`)."""
        per_batch = plan.piece_len * plan.batch_pieces
        longer = [c.select(c.lengths > per_batch) for c in long_rows]
        long = list(batching.pack_long(longer, plan.piece_len, plan.batch_pieces))
        return cls(mesh, plan, make_chunks, long, shard, per_device)

    def streams(self) -> list[Iterable[Call]]:
        devices = self.mesh.local_devices
        parts = owner_file_stream.split_by_owner(self.make_chunks(), self.shard, len(devices))
        if self.per_device:
            # device j's calls are [1, ...] arrays of its own
            put = [functools.partial(device_call, d) for d in devices]
        else:
            put = [functools.partial(global_call, self.mesh)]
        return [
            owner_file_stream.device_calls(p, *self.plan.shape, self.plan.per_call, f)
            for p, f in zip(parts, put)
        ]

    def long_calls(self) -> LongCalls:
        return self.long

    @property
    def total_steps(self) -> int:
        if self.per_device:
            return self.plan.per_call * sum(
                -(-n // self.plan.per_call) for n in self.plan.device_steps
            )
        return self.plan.steps


@dataclasses.dataclass
class LongCall:
    """One device call of long rows (host arrays): device j's K batches and the R rows they sum
    into."""

    ids: np.ndarray  # int32 [k, K, B, L]
    slot: np.ndarray  # int32 [k, K]: the row slot of each batch (R: padding)
    row_ids: np.ndarray  # int32 [k, R]
    row_len: np.ndarray  # int32 [k, R]


def device_long_calls(
    batches: Iterable[batching.LongBatch], plan: SidePlan, devices: int, rows: int, combine: Combine
) -> Iterator[LongCall]:
    """The long rows as device calls: rows dealt to the devices in turn, `rows` rows per device per
    call, each call made as it is consumed (put it before taking the next: the host holds the
    merged batches and one call). A list of `batches` is emptied once merged.

    Calls and their batch counts are the max over hosts (the same programs everywhere); the counts
    are agreed before the first call is given.
    """
    L, B = plan.piece_len, plan.batch_pieces
    got = list(batches)
    merged = batching.merge(got) if got else batching.empty_long(0, L, B)
    del got
    if isinstance(batches, list):
        batches.clear()
    owners = np.unique(merged.owner)
    queues = [owners[j::devices] for j in range(devices)]
    n_calls = int(combine(np.array([-(-max(len(q) for q in queues) // rows)]), "max")[0])
    # [call][device]: the batches of its rows
    picks = [
        [np.flatnonzero(np.isin(merged.owner, q[s * rows : (s + 1) * rows])) for q in queues]
        for s in range(n_calls)
    ]
    sizes = combine(
        np.array([max(1, max(len(p) for p in call)) for call in picks], np.int64), "max"
    )
    return _long_calls(merged, picks, sizes.tolist(), devices, rows)


def _long_calls(
    merged: batching.LongBatch, picks: list, sizes: list[int], devices: int, rows: int
) -> Iterator[LongCall]:
    """`device_long_calls`' calls, one at a time, from the picks and sizes agreed over hosts."""
    L, B = merged.ids.shape[2], merged.ids.shape[1]
    for call, size in zip(picks, sizes):
        ids = np.full((devices, size, B, L), batching.PAD_ID, np.int32)
        slot = np.full((devices, size), rows, np.int32)
        row_ids = np.full((devices, rows), batching.PAD_ID, np.int32)
        row_len = np.zeros((devices, rows), np.int32)
        for j, pick in enumerate(call):
            mine, at = np.unique(merged.owner[pick], return_index=True)
            row_ids[j, : len(mine)], row_len[j, : len(mine)] = mine, merged.owner_len[pick][at]
            ids[j, : len(pick)] = merged.ids[pick]
            slot[j, : len(pick)] = np.searchsorted(mine, merged.owner[pick])
        yield LongCall(ids, slot, row_ids, row_len)


def put_long(mesh, call: LongCall) -> list[jax.Array]:
    return [host_batch(mesh, a) for a in (call.ids, call.slot, call.row_ids, call.row_len)]


class DeviceResident:
    """Accelerator path: every call of both kinds copied to the devices once (`pack`), so a
    half-epoch moves no input from the host."""

    per_device = False

    def __init__(self, plan: SidePlan, calls: list[Call], long: list[list[jax.Array]]):
        self.plan, self.calls, self.long = plan, calls, long

    @classmethod
    def pack(
        cls, mesh, plan: SidePlan, make_chunks: MakeChunks, long_rows: int, combine: Combine
    ) -> DeviceResident:
        """Pack both kinds of rows in one pass over the files, a call at a time, onto the
        devices (`long_rows` rows per device per long call)."""
        per_step = len(mesh.local_devices)
        batches: list[batching.LongBatch] = []

        def chunks() -> Iterator[RaggedRows]:
            for chunk in make_chunks():
                batches.extend(batching.pack_long([chunk], plan.piece_len, plan.batch_pieces))
                yield chunk

        calls = [global_call(mesh, c) for c in host_calls(chunks(), plan, per_step, threads=0)]
        long = device_long_calls(batches, plan, per_step, long_rows, combine)
        return cls(plan, calls, [put_long(mesh, c) for c in long])

    def streams(self) -> list[Iterable[Call]]:
        return [self.calls]

    def long_calls(self) -> LongCalls:
        return self.long

    @property
    def total_steps(self) -> int:
        return self.plan.steps


class DeviceStream(FileStream):
    """Accelerator path when the batches do not fit: packed from the files every half-epoch and
    copied double-buffered (the prefetch thread keeps two calls ahead of the steps)."""

    # the host's cores are free while the accelerators run the steps
    pack_threads = 0

    def __init__(
        self,
        mesh,
        plan: SidePlan,
        make_chunks: MakeChunks,
        long: list[RaggedRows],
        long_rows: int,
        combine: Combine,
    ):
        super().__init__(mesh, plan, make_chunks, long)
        self.long_rows, self.combine = long_rows, combine

    def long_calls(self) -> LongCalls:
        batches = super().long_calls()
        calls = device_long_calls(batches, self.plan, self.per_step, self.long_rows, self.combine)
        return (put_long(self.mesh, c) for c in calls)


def resident_bytes(plan: SidePlan) -> int:
    """Bytes per device of a side's resident calls (int32 arrays)."""
    L, B, R = plan.shape
    return 4 * (plan.steps * (B * L + B + 2 * R) + plan.long_steps * (B * L + 1))
