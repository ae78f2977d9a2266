"""Streaming input: the contract's TFRecords as CSR chunks of rows in NumPy, without TensorFlow.

Each host reads only its own share of the shard files (`files[process_index::process_count]`);
each file is read in blocks of whole records (`webgraph_contract.tfrecord`, CRC-32C checked) and
each block decoded at once (`webgraph_contract.record_codec`) in threads over the host's cores,
so no host ever holds the dataset as Python objects, and `prefetch` runs the reading in a thread
ahead of the solves.
"""

from __future__ import annotations

import queue
import threading
from typing import Callable, Iterator, Sequence, TypeVar

from alx_trainer.data import host_cores
from alx_trainer.data.row_chunk import RowChunk
from webgraph_contract import dataset_reader

T = TypeVar("T")


def host_files(files: Sequence[str], process_index: int, process_count: int) -> list[str]:
    """This host's share of the sorted shard files (round robin)."""
    return list(files)[process_index::process_count]


def read_chunks(
    files: Sequence[str], chunk_rows: int, num_rows: int, num_cols: int, threads: int | None = None
) -> Iterator[RowChunk]:
    """Stream `files` (in order) as CSR chunks of `chunk_rows` rows (fewer at the end of a file).

    Blocks are checked and decoded in `threads` threads (None: one per core this process may
    use). Raises ValueError naming the file when a record is corrupt or an id lies outside the
    matrix shape from stats.json (the dataset does not match the contract).
    """
    threads = threads or host_cores.host_threads()
    for path in files:
        held: list[RowChunk] = []
        held_rows = 0
        for rows in dataset_reader.iter_file_rows(path, threads):
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
