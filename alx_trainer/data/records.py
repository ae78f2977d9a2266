"""Streaming input: the contract's TFRecords as chunks of rows (`RaggedRows`: row tags, pointer,
column ids) in NumPy, without TensorFlow.

Each host reads only its own share of the shard files (`files[process_index::process_count]`);
each file is read in blocks of whole records (`webgraph_contract.tfrecord`, CRC-32C checked) and
each block decoded at once (`webgraph_contract.record_codec`) over the host's cores (in worker
processes when the read is large, `decode_mode`, else in threads),
so no host ever holds the dataset as Python objects, and `prefetch` runs the reading in a thread
ahead of the solves.
"""

from __future__ import annotations

import functools
import logging
import os
import queue
import threading
from typing import Callable, Iterator, Sequence, TypeVar

from alx_trainer.data import host_cores
from webgraph_contract import dataset_reader, file_workers, fileio
from webgraph_contract.ragged import RaggedRows
from webgraph_contract.record_codec import SplitRows

T = TypeVar("T")


def host_files(files: Sequence[str], process_index: int, process_count: int) -> list[str]:
    """This host's share of the sorted shard files (round robin)."""
    return list(files)[process_index::process_count]


PROCESS_MIN_BYTES = 64 << 20  # a read of fewer bytes decodes in threads (no process starts)


def decode_mode(files: Sequence[str], threads: int | None = None) -> tuple[str, int]:
    """How `read_chunks` decodes `files`: ("processes", N) (N worker processes, a file each at a
    time) when there are 2 or more local files, more than one core to use and at least
    `PROCESS_MIN_BYTES` in all, room for the arrays in flight in `/dev/shm` and at most a quarter
    of the host's available memory taken by them (a streamed run keeps its memory bound); else
    ("threads", N)."""
    threads = threads or host_cores.host_threads()
    workers = min(threads, len(files))
    if workers >= 2 and all(fileio.is_local(f) for f in files):
        sizes = sorted((os.path.getsize(f) for f in files), reverse=True)
        room = 4 * sum(sizes[: workers + 1])  # decoded arrays: about 2.5x the encoded bytes
        fits = room <= min(file_workers.shm_free_bytes(), file_workers.available_memory() // 4)
        if sum(sizes) >= PROCESS_MIN_BYTES and fits:
            return "processes", workers
    return "threads", threads


def read_chunks(
    files: Sequence[str], chunk_rows: int, num_rows: int, num_cols: int, threads: int | None = None
) -> Iterator[RaggedRows]:
    """Stream `files` (in order) as chunks of `chunk_rows` rows (fewer at the end of a file): each a
    `RaggedRows` of the records' `row_tag`s and `col_tag` ids (int64).

    Decoding runs as `decode_mode` says. In processes (`webgraph_contract.file_workers`), one
    worker per core (`threads`; None: one per core this process may use) checks and decodes a
    whole file at a time, at most one file in flight per worker beyond the one being cut here, so
    memory holds the decoded arrays of that many files (about 2.5x their encoded bytes each); the
    chunks are views of a file's arrays. In threads, blocks are checked, decoded and their ids
    checked in `threads` threads, this thread reading the files; chunks are views of a block's
    arrays except the chunk that spans two blocks. Either way the chunks are the same, cut here,
    and this may run in any thread (e.g. `prefetch`'s). Should the processes fail on an OSError
    (their output in /dev/shm), the remaining files are read in threads. Raises ValueError naming
    the file when a record is corrupt or an id lies outside the matrix shape from stats.json (the
    dataset does not match the contract).
    """
    mode, n = decode_mode(files, threads)
    _log_mode(mode, n)
    done = 0  # files whose chunks were all yielded
    if mode == "processes":
        each = (threads or host_cores.host_threads()) // n  # threads per worker: spare cores
        try:
            for whole in file_workers.decode_files(files, num_rows, num_cols, n, each):
                for start in range(0, len(whole), chunk_rows):
                    yield whole.take(start, min(start + chunk_rows, len(whole)))
                done += 1
            return
        except OSError as e:  # e.g. /dev/shm filled meanwhile; a bad input fails again below
            logging.getLogger(__name__).warning(
                "%s: decoding in processes failed (%s); the rest in threads", files[done], e
            )
    for path in files[done:]:
        checked = functools.partial(_checked_chunk, path, num_rows, num_cols)
        held = RaggedRows.empty()  # the rows of a chunk begun in an earlier block
        for block in dataset_reader.iter_file_rows(path, n, checked):
            lo = 0
            if len(held):
                lo = min(chunk_rows - len(held), len(block))
                held = RaggedRows.concat([held, block.take(0, lo)])
                if len(held) < chunk_rows:
                    continue
                yield held
            stop = lo + (len(block) - lo) // chunk_rows * chunk_rows
            for start in range(lo, stop, chunk_rows):
                yield block.take(start, start + chunk_rows)
            held = block.take(stop, len(block))
        if len(held):
            yield held


@functools.lru_cache(maxsize=None)
def _log_mode(mode: str, n: int) -> None:
    """Say (once per process and mode) how the shard files are decoded."""
    logging.getLogger(__name__).debug("reading shard files: decoding in %s %d", mode, n)


def _checked_chunk(path: str, num_rows: int, num_cols: int, rows: SplitRows) -> RaggedRows:
    """A decoded block's `col_tag` rows, their ids checked (in a decoding thread)."""
    dataset_reader.check_ids(path, rows.col_tag, num_rows, num_cols)
    return rows.col_tag


def put_unless_stopped(q: queue.Queue, item: object, stop: threading.Event) -> bool:
    """(In a producer thread) put `item` on the bounded queue `q`, waiting while it is full; False,
    without putting it, once `stop` is set (the consumer has gone)."""
    while not stop.is_set():
        try:
            q.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False


def prefetch(make_iter: Callable[[], Iterator[T]], depth: int = 2) -> Iterator[T]:
    """Run an iterator in a background thread, `depth` items ahead; re-raises its errors here."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    done = object()
    stop = threading.Event()

    def put(item) -> bool:
        return put_unless_stopped(q, item, stop)

    def worker() -> None:
        try:
            for item in make_iter():
                if not put(item):
                    return
            put(done)
        except BaseException as e:  # handed to the consumer, which re-raises it
            put(e)

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    try:
        while True:
            item = q.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
