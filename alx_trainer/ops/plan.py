"""Planning a side: from its row lengths to the batch shape and the counts every host runs.

`make_plan` is pure: the lengths and owners of this host's rows in, a frozen `SidePlan` out.
Counts that must agree over hosts go through `combine` (`over_hosts` in a multi-host run, the
identity in one process), so every host runs the same number of compiled calls.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
from jax.experimental import multihost_utils

from alx_trainer.config import TrainConfig
from alx_trainer.data import batching

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
    lens = (config.piece_len,) if config.piece_len else batching.PIECE_LENS
    return [batching.batch_shape(L, config.batch_pieces, batch_ids) for L in lens]


def make_plan(
    config: TrainConfig,
    owner: bool,
    lengths: np.ndarray,
    row_ids: np.ndarray,
    devices: int,
    shard: int,
    combine: Combine,
    batch_ids: int = batching.BATCH_IDS,
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
        counts = np.array([batching.padded_slots(lengths, L, B) for L, B in shapes], np.int64)
        counts = combine(counts.ravel(), "sum").reshape(counts.shape)
        chosen = batching.choose_piece_len({L: tuple(c) for (L, _), c in zip(shapes, counts)})
        shapes = [s for s in shapes if s[0] == chosen]
    (L, B), k = shapes[0], devices
    pieces = batching.num_pieces(lengths, L)
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
        steps = -(-len(batching.batch_starts(normal, B, R, final=True)[0]) // k)
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
        batching.batch_starts(pieces[normal & (owners == j)], batch_pieces, batch_rows, final=True)
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
