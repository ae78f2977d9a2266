"""Streaming input: the contract's TFRecords as CSR chunks of rows in NumPy, without TensorFlow.

Each host reads only its own share of the shard files (`files[process_index::process_count]`);
each file is read in blocks of whole records (`webgraph_contract.tfrecord`, CRC-32C checked) and
each block decoded at once (`webgraph_contract.record_codec`) in threads over the host's cores,
so no host ever holds the dataset as Python objects, and `prefetch` runs the reading in a thread
ahead of the solves.
"""

from __future__ import annotations

import collections
import functools
import queue
import threading
from typing import Callable, Iterator, Sequence, TypeVar

import numpy as np

from alx_trainer.data import host_cores
from alx_trainer.data.row_chunk import RowChunk
from webgraph_contract import dataset_reader

T = TypeVar("T")


def host_files(files: Sequence[str], process_index: int, process_count: int) -> list[str]:
    """This host's share of the sorted shard files (round robin)."""
    return list(files)[process_index::process_count]


def read_chunks(files: Sequence[str], chunk_rows: int, num_rows: int, num_cols: int,
                threads: int | None = None) -> Iterator[RowChunk]:
    """Stream `files` (in order) as CSR chunks of `chunk_rows` rows (fewer at the end of a file).

    Blocks are checked and decoded in `threads` threads (None: one per core this process may
    use), and the next file is read while this one's last blocks decode. Raises ValueError
    naming the file when a record is corrupt or an id lies outside the matrix shape from
    stats.json (the dataset does not match the contract).
    """
    threads = threads or host_cores.host_threads()
    for path, blocks in _files_ahead(files, threads):
        held: list[RowChunk] = []
        held_rows = 0
        for rows in blocks:
            chunk = RowChunk(rows.row_tags, rows.col_ptr, rows.cols)
            _check_ids(path, chunk, num_rows, num_cols)
            held.append(chunk)
            held_rows += len(chunk)
            if held_rows >= chunk_rows:
                whole = RowChunk.concat(held)
                held_rows %= chunk_rows
                stop = len(whole) - held_rows
                for lo in range(0, stop, chunk_rows):
                    yield whole.take(lo, lo + chunk_rows)
                held = [whole.take(stop, len(whole))] if held_rows else []
        if held:
            yield RowChunk.concat(held)


def _files_ahead(files: Sequence[str], threads: int) -> Iterator[tuple[str, Iterator]]:
    """(path, its decoded blocks) of every file in order; each file is read in a thread of its own
    (`dataset_reader.iter_file_rows`, `threads` decoding), the next one started with this one."""
    started: collections.deque = collections.deque()
    try:
        for k, path in enumerate(files):
            while len(started) < 2 and k + len(started) < len(files):
                ahead = files[k + len(started)]
                started.append(_start(functools.partial(dataset_reader.iter_file_rows, ahead, threads), 2))
            yield path, _drain(*started[0])
            started.popleft()
    finally:
        for _, stop in started:
            stop.set()


_MISMATCH = "dataset does not match the contract"


def _check_ids(path: str, chunk: RowChunk, num_rows: int, num_cols: int) -> None:
    if len(chunk.row_ids) and (chunk.row_ids.min() < 0 or chunk.row_ids.max() >= num_rows):
        bad = chunk.row_ids[(chunk.row_ids < 0) | (chunk.row_ids >= num_rows)][0]
        raise ValueError(f"{path}: row_tag {bad} outside [0, {num_rows}) from stats.json; {_MISMATCH}")
    if len(chunk.cols) and (chunk.cols.min() < 0 or chunk.cols.max() >= num_cols):
        bad = chunk.cols[(chunk.cols < 0) | (chunk.cols >= num_cols)][0]
        raise ValueError(f"{path}: col_tag {bad} outside [0, {num_cols}) from stats.json; {_MISMATCH}")


def prefetch(make_iter: Callable[[], Iterator[T]], depth: int = 2) -> Iterator[T]:
    """Run an iterator in a background thread, `depth` items ahead; re-raises its errors here."""
    yield from _drain(*_start(make_iter, depth))


_DONE = object()


def _start(make_iter: Callable[[], Iterator[T]], depth: int) -> tuple[queue.Queue, threading.Event]:
    """A thread that runs `make_iter()` into a queue of `depth` items until done or stopped."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def worker() -> None:
        try:
            for item in make_iter():
                if not put(item):
                    return
            put(_DONE)
        except BaseException as e:  # handed to the consumer, which re-raises it
            put(e)

    threading.Thread(target=worker, daemon=True).start()
    return q, stop


def _drain(q: queue.Queue, stop: threading.Event) -> Iterator:
    """The items of a `_start` queue; stops its thread when the consumer stops early."""
    try:
        while True:
            item = q.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
