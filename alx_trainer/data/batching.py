"""Dense batching (paper 4.3): a side's batch shape planned, its rows packed, vectorized in NumPy.

Every row is cut into pieces of `L` column ids; pieces are packed into device batches of exactly
`B` pieces and at most `R` rows, with `seg[b]` = the row slot that piece `b` belongs to. All arrays
have fixed shapes, so the step function compiles once. Padding: id -1, segment R, row id -1.

A row with more than `B` pieces cannot fit one device batch; such "long rows" are cut into whole
device batches of their own (`pack_long`) whose statistics the trainer sums before one solve, so
every row length trains exactly.

Planning (`make_plan`) is pure: the lengths and owners of this host's rows in, a frozen
`SidePlan` out (the shape and the counts every host runs). Counts that must agree over hosts go
through `combine` (`over_hosts` in a multi-host run, `one_host` in one process), so every host
runs the same number of compiled calls.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
from jax.experimental import multihost_utils

from alx_trainer import execution
from alx_trainer.config import BATCH_IDS, PIECE_LENS, TrainConfig
from webgraph_contract.ragged import RaggedRows

PAD_ID = -1


@dataclasses.dataclass
class DeviceBatch:
    """`k` packed device batches (k = devices per step once grouped by `group_steps`)."""

    ids: np.ndarray  # int32 [k, B, L], PAD_ID where empty
    seg: np.ndarray  # int32 [k, B], row slot of each piece, R for empty pieces
    row_ids: np.ndarray  # int32 [k, R], PAD_ID for empty slots
    row_len: np.ndarray  # int32 [k, R], observations of each row (0 for empty slots)

    def __len__(self) -> int:
        return self.ids.shape[0]


@dataclasses.dataclass
class LongBatch:
    """`k` device batches, each holding B pieces of a single long row."""

    ids: np.ndarray  # int32 [k, B, L]
    owner: np.ndarray  # int64 [k], the long row each batch belongs to (PAD_ID for padding)
    owner_len: np.ndarray  # int64 [k], total observations of that row

    def __len__(self) -> int:
        return self.ids.shape[0]


def num_pieces(lengths: np.ndarray, piece_len: int) -> np.ndarray:
    """Pieces per row: ceil(len / L), at least one (an empty row still gets a slot and a solve)."""
    return np.maximum(1, -(-lengths // piece_len))


# The automatic piece length (`piece_len` 0) is the first of `PIECE_LENS` whose padding stays
# within MAX_PADDING; automatic `batch_pieces` (0) keep `BATCH_IDS` ids per device batch.
MAX_PADDING = 1.2


def batch_shape(piece_len: int, batch_pieces: int, batch_ids: int = BATCH_IDS) -> tuple[int, int]:
    """(L, B) of a configured shape whose L is known (0 = automatic B: `batch_ids` ids)."""
    return piece_len, batch_pieces or max(1, batch_ids // piece_len)


def padded_slots(lengths: np.ndarray, piece_len: int, batch_pieces: int) -> tuple[int, int]:
    """(id slots, ids) of the rows of `lengths` that fit one batch of `batch_pieces` pieces of
    `piece_len`."""
    pieces = num_pieces(lengths, piece_len)
    fits = pieces <= batch_pieces
    return int(pieces[fits].sum()) * piece_len, int(lengths[fits].sum())


def choose_piece_len(counts: dict[int, tuple[int, int]]) -> int:
    """The automatic piece length from `padded_slots` per candidate L (`PIECE_LENS`).

    A row of n ids takes ceil(n / L) pieces: short rows waste most of a long piece, while each
    piece costs the kernels a row vector gathered and a segment summed per CG pass, so shorter
    pieces only pay where padding is large (the measurements: docs/benchmarks.md, "Figures
    behind code choices").
    """
    for piece_len in PIECE_LENS:
        slots, ids = counts[piece_len]
        if slots <= MAX_PADDING * max(ids, 1):
            return piece_len
    return min(
        PIECE_LENS, key=lambda piece_len: counts[piece_len][0] / max(counts[piece_len][1], 1)
    )


def empty_batch(
    k: int, piece_len: int, batch_pieces: int, batch_rows: int, alloc: Callable = np.empty
) -> DeviceBatch:
    """`k` batches of padding only, their arrays made by `alloc(shape, dtype)` (e.g. an aligned
    allocation that CPU devices can alias)."""
    out = _blank(k, piece_len, batch_pieces, batch_rows, alloc)
    _pad(out, batch_rows)
    return out


def batch_starts(
    pieces: np.ndarray, batch_pieces: int, batch_rows: int, final: bool
) -> tuple[list[int], int]:
    """Next-fit boundaries: start row of each full batch, and the first row left over."""
    cum = np.concatenate([[0], np.cumsum(pieces)])
    n = len(pieces)
    starts: list[int] = []
    start = 0
    while start < n:
        end = int(np.searchsorted(cum, cum[start] + batch_pieces, side="right")) - 1
        end = min(end, start + batch_rows, n)
        if (
            end == n
            and not final
            and end - start < batch_rows
            and cum[n] - cum[start] < batch_pieces
        ):
            break  # not full yet: wait for more rows
        starts.append(start)
        start = end
    return starts, start


def _fill(
    parts: Sequence[RaggedRows],
    starts: list[int],
    stop: int,
    piece_len: int,
    batch_pieces: int,
    batch_rows: int,
) -> DeviceBatch:
    """Scatter rows [starts[0], stop) of the rows of `parts` into len(starts) device batches."""
    out = empty_batch(len(starts), piece_len, batch_pieces, batch_rows)
    if starts:
        _fill_into(out, parts, starts, stop, piece_len)
    return out


def _fill_into(
    out: DeviceBatch, parts: Sequence[RaggedRows], starts: list[int], stop: int, piece_len: int
) -> None:
    """Scatter rows [starts[0], stop) of the rows of `parts` (one after another: joined here, in
    the packing thread) into the first len(starts) batches of `out`, which hold padding only (a
    view of larger arrays fills them in place)."""
    chunk = RaggedRows.concat(parts)
    k = len(starts)
    first = starts[0]
    lengths = chunk.lengths[first:stop]
    pieces = num_pieces(lengths, piece_len)
    bounds = np.asarray(starts + [stop]) - first
    batch_of_row = np.repeat(np.arange(k), np.diff(bounds))
    slot = np.arange(len(lengths)) - bounds[batch_of_row]
    piece_start = np.concatenate([[0], np.cumsum(pieces)])[:-1]
    piece_off = piece_start - piece_start[bounds[:-1]][batch_of_row]

    out.row_ids[batch_of_row, slot] = chunk.row_ids[first:stop]
    out.row_len[batch_of_row, slot] = lengths
    # Segment id of every piece.
    piece_row = np.repeat(np.arange(len(lengths)), pieces)
    piece_idx = np.arange(len(piece_row)) - piece_start[piece_row] + piece_off[piece_row]
    out.seg[batch_of_row[piece_row], piece_idx] = slot[piece_row]
    # Every column id: a row's ids fill the lanes of its pieces in order, so they lie one after
    # another in the flattened batches, from its first piece's first lane (one index per id).
    lo, hi = chunk.indptr[first], chunk.indptr[stop]
    first_lane = (batch_of_row * out.ids.shape[1] + piece_off) * piece_len
    flat = np.repeat(first_lane - (chunk.indptr[first:stop] - lo), lengths) + np.arange(hi - lo)
    np.put(out.ids, flat, chunk.ids[lo:hi])


def pack_normal(
    chunks: Iterable[RaggedRows],
    piece_len: int,
    batch_pieces: int,
    batch_rows: int,
    threads: int = 1,
) -> Iterator[DeviceBatch]:
    """Pack every row that fits one device batch; rows longer than that are skipped here.

    The batches of successive chunks are filled in `threads` threads (0: one per host core), in
    order.
    """

    def fill(job: tuple[list[RaggedRows], list[int], int]) -> DeviceBatch:
        return _fill(*job, piece_len, batch_pieces, batch_rows)

    return execution.ordered(
        fill,
        _fill_jobs(chunks, piece_len, batch_pieces, batch_rows),
        threads or execution.host_threads(),
    )


def pack_calls(
    chunks: Iterable[RaggedRows],
    piece_len: int,
    batch_pieces: int,
    batch_rows: int,
    per_step: int,
    per_call: int,
    num_steps: int,
    threads: int = 0,
) -> Iterator[DeviceBatch]:
    """The calls of `stack_calls(group_steps(pack_normal(...), per_step, num_steps), per_call)`
    ([per_step, per_call, ...] arrays, `num_steps / per_call` of them), each packed in place: the
    batches are filled in `threads` threads (0: one per host core) straight into their call's
    arrays, padding included, so no batch is copied or merged (with one device a step, a call's
    arrays are the ones filled; with more, one copy orders them by device)."""
    if num_steps % per_call:
        raise ValueError(
            f"{num_steps % per_call} steps left over: the step count must be a multiple of "
            f"{per_call}"
        )
    per = per_step * per_call  # batches a call holds, in the order they are packed
    calls, made = num_steps // per_call, 0
    workers = threads or execution.host_threads()

    def by_device(call: DeviceBatch) -> DeviceBatch:  # [per, ...] -> [per_step, per_call, ...]
        def order(a: np.ndarray) -> np.ndarray:
            a = a.reshape(per_call, per_step, *a.shape[1:])
            if per_step == 1:
                return a.swapaxes(0, 1)  # a view
            out = np.empty((per_step, *a.shape[:1], *a.shape[2:]), a.dtype)
            execution.thread_map(lambda j: out.__setitem__(j, a[:, j]), range(per_step), workers)
            return out

        return DeviceBatch(*(order(getattr(call, f.name)) for f in dataclasses.fields(call)))

    def fill(out: DeviceBatch, parts: list[RaggedRows], starts: list[int], stop: int) -> None:
        _pad(out, batch_rows)
        _fill_into(out, parts, starts, stop, piece_len)

    with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="alx-pack") as pool:
        call, at, pending = None, 0, collections.deque()
        for parts, starts, stop in _fill_jobs(chunks, piece_len, batch_pieces, batch_rows):
            while starts:
                if call is None:
                    if made == calls:
                        raise RuntimeError(
                            f"data produced more than the {num_steps} steps the plan allows; did "
                            "the files change?"
                        )
                    call, at = _blank(per, piece_len, batch_pieces, batch_rows), 0
                take = min(len(starts), per - at)
                end = starts[take] if take < len(starts) else stop
                view = _slice(call, at, at + take)
                pending.append(pool.submit(fill, view, parts, starts[:take], end))
                at, starts = at + take, starts[take:]
                while len(pending) > 2 * workers:  # bounds the chunks held by queued jobs
                    pending.popleft().result()
                if at == per:
                    while pending:
                        pending.popleft().result()
                    made += 1
                    yield by_device(call)
                    call = None
        while pending:
            pending.popleft().result()
        if call is not None:
            _pad(_slice(call, at, per), batch_rows)
            made += 1
            yield by_device(call)
    for _ in range(calls - made):
        yield by_device(empty_batch(per, piece_len, batch_pieces, batch_rows))


def _blank(
    k: int, piece_len: int, batch_pieces: int, batch_rows: int, alloc: Callable = np.empty
) -> DeviceBatch:
    """`k` batches of uninitialized arrays (their fills write the padding)."""
    return DeviceBatch(
        ids=alloc((k, batch_pieces, piece_len), np.int32),
        seg=alloc((k, batch_pieces), np.int32),
        row_ids=alloc((k, batch_rows), np.int32),
        row_len=alloc((k, batch_rows), np.int32),
    )


def _pad(out: DeviceBatch, batch_rows: int) -> None:
    """Set the batches of `out` to padding (as `empty_batch` makes them)."""
    out.ids.fill(PAD_ID)
    out.seg.fill(batch_rows)
    out.row_ids.fill(PAD_ID)
    out.row_len.fill(0)


def pack_normal_into(chunks: Iterable[RaggedRows], out: DeviceBatch, piece_len: int) -> int:
    """Pack like `pack_normal` (one thread) into the batches of `out` (padding only), from the
    first on, without a copy per batch; returns how many it filled, or raises if they do not fit."""
    batch_pieces, batch_rows = out.seg.shape[1], out.row_ids.shape[1]
    filled = 0
    for parts, starts, stop in _fill_jobs(chunks, piece_len, batch_pieces, batch_rows):
        if filled + len(starts) > len(out):
            raise RuntimeError(
                f"the rows packed more than the {len(out)} batches planned; did the files change?"
            )
        _fill_into(_slice(out, filled, filled + len(starts)), parts, starts, stop, piece_len)
        filled += len(starts)
    return filled


def _fill_jobs(
    chunks: Iterable[RaggedRows], piece_len: int, batch_pieces: int, batch_rows: int
) -> Iterator[tuple[list[RaggedRows], list[int], int]]:
    """(rows, batch starts, stop) of each `_fill` of `pack_normal`, in order. The rows are the
    chunks' parts that hold them, views (rows left over wait for the next chunk; they and the
    rows that complete their batch are joined by the packing thread, not here)."""
    parts: list[RaggedRows] = []
    pieces = np.zeros(0, np.int64)  # of the rows in `parts`
    for chunk in chunks:
        counts = num_pieces(chunk.lengths, piece_len)
        fits = counts <= batch_pieces
        if not fits.all():
            chunk, counts = chunk.select(fits), counts[fits]
        if not len(chunk):
            continue
        parts.append(chunk)
        pieces = np.concatenate([pieces, counts])
        starts, stop = batch_starts(pieces, batch_pieces, batch_rows, final=False)
        if starts:
            head, parts = _cut(parts, stop)
            yield head, starts, stop
            pieces = pieces[stop:]
    if parts:
        yield (parts, *batch_starts(pieces, batch_pieces, batch_rows, final=True))


def _cut(parts: list[RaggedRows], at: int) -> tuple[list[RaggedRows], list[RaggedRows]]:
    """The rows of `parts` before row `at` and from it on, as views."""
    for i, part in enumerate(parts):
        if at <= len(part):
            head = parts[:i] + ([part.take(0, at)] if at else [])
            tail = ([part.take(at, len(part))] if at < len(part) else []) + parts[i + 1 :]
            return head, tail
        at -= len(part)
    raise ValueError(f"row {at} is past the rows of the parts")


def pack_long(
    chunks: Iterable[RaggedRows], piece_len: int, batch_pieces: int
) -> Iterator[LongBatch]:
    """Cut every row with more than `batch_pieces` pieces into whole device batches of its own."""
    per_batch = piece_len * batch_pieces
    for chunk in chunks:
        long = num_pieces(chunk.lengths, piece_len) > batch_pieces
        if not long.any():
            continue
        sub = chunk.select(long)
        lengths = sub.lengths
        nb = -(-lengths // per_batch)
        batch_row = np.repeat(np.arange(len(sub)), nb)
        ids = np.full((len(batch_row), per_batch), PAD_ID, np.int32)
        entry_row = np.repeat(np.arange(len(sub)), lengths)
        q = np.arange(len(sub.ids)) - sub.indptr[:-1][entry_row]
        first_batch = np.concatenate([[0], np.cumsum(nb)])[:-1]
        ids[first_batch[entry_row] + q // per_batch, q % per_batch] = sub.ids
        yield LongBatch(
            ids.reshape(-1, batch_pieces, piece_len), sub.row_ids[batch_row], lengths[batch_row]
        )


def group_steps(batches: Iterable, per_step: int, num_steps: int, make_empty) -> Iterator:
    """Regroup a stream of k-batches into exactly `num_steps` groups of `per_step` (padding the
    end).

    `make_empty(k)` builds k padding batches. Every host must run the same number of steps,
    so hosts with less data pad with empty steps.
    """
    buffer: list = []
    have = 0
    emitted = 0
    for batch in batches:
        buffer.append(batch)
        have += len(batch)
        while have >= per_step:
            merged = merge(buffer)
            yield _slice(merged, 0, per_step)
            emitted += 1
            rest = _slice(merged, per_step, len(merged))
            buffer, have = ([rest], len(rest)) if len(rest) else ([], 0)
    if have:
        merged = merge(buffer + [make_empty(per_step - have)])
        yield merged
        emitted += 1
    if emitted > num_steps:
        raise RuntimeError(
            f"data produced {emitted} steps but the plan allows {num_steps}; did the files change?"
        )
    for _ in range(num_steps - emitted):
        yield make_empty(per_step)


def owner_steps(per_device: Sequence[DeviceBatch], empty: DeviceBatch) -> Iterator[DeviceBatch]:
    """Steps whose slot j holds device j's next batch (`per_device[j]`, k_j batches), or `empty`
    once it has none."""
    for s in range(max((len(b) for b in per_device), default=0)):
        yield merge([_slice(b, s, s + 1) if s < len(b) else empty for b in per_device])


def stack_calls(steps: Iterable[DeviceBatch], per_call: int) -> Iterator[DeviceBatch]:
    """Every `per_call` consecutive steps ([k, ...] arrays) as one call ([k, per_call, ...]
    arrays)."""
    group: list[DeviceBatch] = []
    for step in steps:
        group.append(step)
        if len(group) == per_call:
            yield DeviceBatch(
                *(
                    np.stack([getattr(g, f.name) for g in group], axis=1)
                    for f in dataclasses.fields(DeviceBatch)
                )
            )
            group = []
    if group:
        raise ValueError(
            f"{len(group)} steps left over: the step count must be a multiple of {per_call}"
        )


def merge(items: list):
    """Concatenate batches of one kind along their first axis."""
    if len(items) == 1:
        return items[0]
    cls = type(items[0])
    return cls(
        **{
            f.name: np.concatenate([getattr(x, f.name) for x in items])
            for f in dataclasses.fields(cls)
        }
    )


def _slice(item, lo: int, hi: int):
    cls = type(item)
    return cls(**{f.name: getattr(item, f.name)[lo:hi] for f in dataclasses.fields(cls)})


def empty_long(k: int, piece_len: int, batch_pieces: int) -> LongBatch:
    return LongBatch(
        np.full((k, batch_pieces, piece_len), PAD_ID, np.int32),
        np.full(k, PAD_ID, np.int64),
        np.zeros(k, np.int64),
    )


# Planning a side: its batch shape and the counts every host runs

# combine(values, how): `values` (int64 [n]) of every host reduced by `how` ('sum' or 'max').
Combine = Callable[[np.ndarray, str], np.ndarray]


@dataclasses.dataclass(frozen=True)
class SidePlan:
    """The batch shape and global counts of one side (the max over hosts where they differ).

    `steps` is a multiple of `per_call` (the batches each device scans per compiled call);
    `device_steps` holds each local device's own normal batches ('owner' layout; else empty).
    """

    piece_len: int
    batch_pieces: int
    batch_rows: int
    steps: int
    per_call: int
    long_steps: int
    long_solves: int
    # records read by the planning pass, over all hosts (checked against stats.json)
    rows: int
    device_steps: tuple[int, ...] = ()

    @property
    def shape(self) -> tuple[int, int, int]:
        """(L, B, R): piece length, pieces per batch, row slots per batch."""
        return self.piece_len, self.batch_pieces, self.batch_rows

    @property
    def calls(self) -> int:
        """Compiled calls of normal rows per device per half-epoch."""
        return self.steps // self.per_call

    def with_calls(self, max_calls: int) -> SidePlan:
        """This plan's batches in at most `max_calls` compiled calls, as long as they must be
        (a plan made with `max_calls` 1: its `steps` are the batches, unpadded)."""
        per_call = max(1, -(-self.steps // max_calls))
        calls = -(-self.steps // per_call)
        return dataclasses.replace(self, steps=calls * per_call, per_call=per_call)


BALANCE_SLACK = 1.02  # room over an even share of pieces, for rows that next-fit cannot split
BALANCE_PIECES = 64  # a balanced batch's pieces are a multiple of this


def candidate_shapes(config: TrainConfig, batch_ids: int) -> list[tuple[int, int]]:
    """(L, B) shapes the automatic piece length chooses among (one when `piece_len` is set)."""
    lens = (config.piece_len,) if config.piece_len else PIECE_LENS
    return [batch_shape(L, config.batch_pieces, batch_ids) for L in lens]


def make_plan(
    config: TrainConfig,
    owner: bool,
    lengths: np.ndarray,
    row_ids: np.ndarray,
    devices: int,
    shard: int,
    combine: Combine,
    batch_ids: int = BATCH_IDS,
    max_calls: int = 0,
    balance_over: int = 0,
) -> SidePlan:
    """Plan one side from this host's rows (`lengths`, `row_ids` in file order) on `devices` local
    devices.

    `batch_ids`: ids per batch when `batch_pieces` is automatic; `max_calls` (0: `steps_per_call`
    batches per call instead) bounds the compiled calls. `balance_over` (the mesh's device count;
    0: off): an automatic batch is cut to about a device's normal pieces over the fewest batches of
    `batch_ids` ids, so a batch as large as the data needs is not mostly padding (`BALANCE_SLACK`
    and a multiple of `BALANCE_PIECES` for next-fit).
    Next-fit packing depends on the row lengths only. Row slots per batch (`batch_rows` 0) are set
    from the mean pieces per row over all hosts, so slots are rarely the binding limit. With
    `owner`, each device packs the rows of its own table shard (`shard` rows) apart.
    """
    shapes = candidate_shapes(config, batch_ids)
    # automatic piece length: from the padding of every host's rows
    if len(shapes) > 1:
        counts = np.array([padded_slots(lengths, L, B) for L, B in shapes], np.int64)
        counts = combine(counts.ravel(), "sum").reshape(counts.shape)
        chosen = choose_piece_len({L: tuple(c) for (L, _), c in zip(shapes, counts)})
        shapes = [s for s in shapes if s[0] == chosen]
    (L, B), k = shapes[0], devices
    pieces = num_pieces(lengths, L)
    normal = pieces[pieces <= B]
    totals = combine(np.array([normal.sum(), len(normal), len(row_ids)], np.int64), "sum")
    if balance_over and not config.batch_pieces:
        per_device = totals[0] / balance_over
        even = per_device / max(1, np.ceil(per_device / B)) * BALANCE_SLACK
        B = int(min(B, BALANCE_PIECES * np.ceil(even / BALANCE_PIECES)))
        normal = pieces[pieces <= B]
        totals = combine(np.array([normal.sum(), len(normal), len(row_ids)], np.int64), "sum")
    mean_pieces = totals[0] / max(totals[1], 1)
    R = config.batch_rows or int(min(B, max(1, np.ceil(1.25 * B / max(mean_pieces, 1)))))
    n_long = int(np.sum(-(-lengths[pieces > B] // (B * L))))
    device_steps: tuple[int, ...] = ()
    if owner:
        device_steps = _device_steps(pieces, row_ids // shard, k, B, R)
        steps = max(device_steps, default=0)
        per_device = np.bincount((row_ids[pieces > B] // shard).astype(np.int64), minlength=k)
        long_solves = int(-(-per_device.max(initial=0) // R))
    else:
        steps = -(-len(batch_starts(normal, B, R, final=True)[0]) // k)
        long_solves = -(-int(np.sum(pieces > B)) // (k * R))
    steps, long_steps, long_solves = (
        int(c) for c in combine(np.array([steps, -(-n_long // k), long_solves]), "max")
    )
    # the accelerator path: at most `max_calls` calls, as long as they must be
    if max_calls:
        per_call = max(1, -(-steps // max_calls))
        calls = -(-steps // per_call)
    else:
        calls = -(-steps // config.steps_per_call)
        # as few padding steps as `calls` calls allow
        per_call = max(1, -(-steps // max(calls, 1)))
    return SidePlan(
        L, B, R, calls * per_call, per_call, long_steps, long_solves, int(totals[2]), device_steps
    )


def _device_steps(
    pieces: np.ndarray, owners: np.ndarray, devices: int, batch_pieces: int, batch_rows: int
) -> tuple[int, ...]:
    """Dense batches of normal rows each device packs ('owner' layout: the rows of its shard);
    next-fit depends on the row lengths only."""
    normal = pieces <= batch_pieces
    starts = [
        batch_starts(pieces[normal & (owners == j)], batch_pieces, batch_rows, final=True)
        for j in range(devices)
    ]
    return tuple(len(full) for full, _ in starts)


def one_host(values: np.ndarray, how: str) -> np.ndarray:
    """`Combine` of a single-process run: the values as they are."""
    return np.asarray(values, np.int64)


def over_hosts(values: np.ndarray, how: str) -> np.ndarray:
    """`Combine` over every process (a collective: all processes call it, with as many values)."""
    # every process has none (the count is agreed): nothing to gather
    if len(values) == 0:
        return np.zeros(0, np.int64)
    every = np.asarray(multihost_utils.process_allgather(np.asarray(values, np.int64))).reshape(
        -1, len(values)
    )
    return every.sum(axis=0) if how == "sum" else every.max(axis=0)
