"""'owner' layout without holding the packed batches: each half-epoch streams them from the
TFRecords.

One reader thread turns the row chunks into each device's rows (those of its table shard, ids
counted from the shard's start) and hands them to that device through a bounded queue; the
device's own thread packs them into dense batches, stacks `per_call` of them and copies each call
to its device just before running it. Host memory is bounded by the queue depth times a chunk,
plus one call per device, whatever the matrix size. The batches are the ones the in-memory path
builds (same next-fit packing of the same rows in the same order), so the tables are the same.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
from typing import Callable, Iterator

from alx_trainer.data import batching
from alx_trainer.data.dataset import put_unless_stopped
from webgraph_contract.ragged import RaggedRows

_DONE = object()


def split_by_owner(
    chunks: Iterator[RaggedRows], shard: int, devices: int, depth: int = 4
) -> list[Iterator[RaggedRows]]:
    """Per-device iterators of shard-local rows, fed by one reader thread through bounded queues.

    Each iterator must be consumed by its own thread; an error in the reader re-raises in every one.
    """
    queues = [queue.Queue(maxsize=depth) for _ in range(devices)]
    stop = threading.Event()

    def put(q: queue.Queue, item) -> bool:
        return put_unless_stopped(q, item, stop)

    def reader() -> None:
        try:
            for chunk in chunks:
                owner = chunk.row_ids // shard
                for j, q in enumerate(queues):
                    mine = chunk.select(owner == j)
                    if len(mine) and not put(
                        q, dataclasses.replace(mine, row_ids=mine.row_ids - j * shard)
                    ):
                        return
            for q in queues:
                put(q, _DONE)
        except BaseException as e:  # handed to every consumer, which re-raises it
            for q in queues:
                put(q, e)

    threading.Thread(target=reader, daemon=True, name="alx-owner-reader").start()

    def consume(q: queue.Queue) -> Iterator[RaggedRows]:
        try:
            while (item := q.get()) is not _DONE:
                if isinstance(item, BaseException):
                    raise item
                yield item
        except GeneratorExit:  # a device stopped early: release the reader
            stop.set()
            raise

    return [consume(q) for q in queues]


def device_calls(
    chunks: Iterator[RaggedRows],
    piece_len: int,
    batch_pieces: int,
    batch_rows: int,
    per_call: int,
    put: Callable[[batching.DeviceBatch], object],
) -> Iterator[object]:
    """One device's calls ([1, per_call, ...] arrays, the last padded) from its rows, each placed by
    `put`."""
    empty = batching.empty_batch(1, piece_len, batch_pieces, batch_rows)
    group: list[batching.DeviceBatch] = []
    for packed in batching.pack_normal(chunks, piece_len, batch_pieces, batch_rows):
        for k in range(len(packed)):
            group.append(batching._slice(packed, k, k + 1))
            if len(group) == per_call:
                yield put(next(batching.stack_calls(group, per_call)))
                group = []
    if group:
        yield put(next(batching.stack_calls(group + [empty] * (per_call - len(group)), per_call)))
