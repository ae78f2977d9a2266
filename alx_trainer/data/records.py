"""Streaming input: the contract's TFRecords as CSR chunks of rows in NumPy, without TensorFlow.

Each host reads only its own share of the shard files (`files[process_index::process_count]`);
each file is read in blocks of whole records (`webgraph_contract.tfrecord`, CRC-32C checked) and
each block decoded at once (`webgraph_contract.record_codec`) in threads over the host's cores,
so no host ever holds the dataset as Python objects, and `prefetch` runs the reading in a thread
ahead of the solves.
"""

from __future__ import annotations

import functools
import queue
import threading
from typing import Callable, Iterator, Sequence, TypeVar

from alx_trainer.data import host_cores
from alx_trainer.data.row_chunk import RowChunk
from webgraph_contract import dataset_reader
from webgraph_contract.record_codec import Rows

T = TypeVar("T")


def host_files(files: Sequence[str], process_index: int, process_count: int) -> list[str]:
    """This host's share of the sorted shard files (round robin)."""
    return list(files)[process_index::process_count]


def read_chunks(
    files: Sequence[str], chunk_rows: int, num_rows: int, num_cols: int, threads: int | None = None
) -> Iterator[RowChunk]:
    """Stream `files` (in order) as CSR chunks of `chunk_rows` rows (fewer at the end of a file).

    Blocks are checked, decoded and their ids checked in `threads` threads (None: one per core
    this process may use); this thread reads the files and cuts the decoded blocks into chunks,
    views of a block's arrays except the chunk that spans two blocks. Raises ValueError naming the
    file when a record is corrupt or an id lies outside the matrix shape from stats.json (the
    dataset does not match the contract).
    """
    threads = threads or host_cores.host_threads()
    for path in files:
        checked = functools.partial(_checked_chunk, path, num_rows, num_cols)
        held = RowChunk.empty()  # the rows of a chunk begun in an earlier block
        for block in dataset_reader.iter_file_rows(path, threads, checked):
            lo = 0
            if len(held):
                lo = min(chunk_rows - len(held), len(block))
                held = RowChunk.concat([held, block.take(0, lo)])
                if len(held) < chunk_rows:
                    continue
                yield held
            stop = lo + (len(block) - lo) // chunk_rows * chunk_rows
            for start in range(lo, stop, chunk_rows):
                yield block.take(start, start + chunk_rows)
            held = block.take(stop, len(block))
        if len(held):
            yield held


def _checked_chunk(path: str, num_rows: int, num_cols: int, rows: Rows) -> RowChunk:
    """A decoded block's rows as a chunk, its ids checked (in a decoding thread)."""
    chunk = RowChunk(rows.row_tags, rows.col_ptr, rows.cols)
    _check_ids(path, chunk, num_rows, num_cols)
    return chunk


_MISMATCH = "dataset does not match the contract"


def _check_ids(path: str, chunk: RowChunk, num_rows: int, num_cols: int) -> None:
    if len(chunk.row_ids) and (chunk.row_ids.min() < 0 or chunk.row_ids.max() >= num_rows):
        bad = chunk.row_ids[(chunk.row_ids < 0) | (chunk.row_ids >= num_rows)][0]
        raise ValueError(
            f"{path}: row_tag {bad} outside [0, {num_rows}) from stats.json; {_MISMATCH}"
        )
    if len(chunk.cols) and (chunk.cols.min() < 0 or chunk.cols.max() >= num_cols):
        bad = chunk.cols[(chunk.cols < 0) | (chunk.cols >= num_cols)][0]
        raise ValueError(
            f"{path}: col_tag {bad} outside [0, {num_cols}) from stats.json; {_MISMATCH}"
        )


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
