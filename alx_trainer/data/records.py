"""Streaming input: the contract's TFRecords as CSR chunks of rows in NumPy, without TensorFlow.

Each host reads only its own share of the shard files (`files[process_index::process_count]`);
each file is read in blocks of whole records (`webgraph_contract.tfrecord`, CRC-32C checked) and
each block decoded at once (`webgraph_contract.record_codec`), so no host ever holds the dataset
as Python objects, and `prefetch` runs the reading in a thread ahead of the solves.
"""

from __future__ import annotations

import dataclasses
import functools
import queue
import threading
from typing import Callable, Iterator, Sequence, TypeVar

import numpy as np

from webgraph_contract import dataset_reader

T = TypeVar("T")


@dataclasses.dataclass
class RowChunk:
    """A chunk of rows in CSR form: row `k` has columns `cols[indptr[k]:indptr[k+1]]`."""

    row_ids: np.ndarray  # int64 [n]
    indptr: np.ndarray  # int64 [n + 1]
    cols: np.ndarray  # int64 [nnz]

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.indptr)

    def __len__(self) -> int:
        return len(self.row_ids)


@dataclasses.dataclass
class Dataset:
    """Where a dataset's shards are and the matrix shape (from stats.json or the TFDS info)."""

    name: str
    num_rows: int
    num_cols: int
    files: dict[str, list[str]]  # split -> sorted shard paths (every host's)
    data_dir: str
    tfds: bool = False  # files named by TFDS rather than by the contract
    bipartite: bool = False  # users x items (separate row and column ids), as stats.json says
    eval_split: str = "test"  # the contract split that files["test"] holds ("validation" when tuning)
    splits: dict[str, int] = dataclasses.field(default_factory=dict)  # rows per split, as stats.json says
    fingerprint: str | None = None  # stats.json `dataset_fingerprint` (None: written before it existed)
    protocol: str = ""  # stats.json `protocol` (`given_split`: the test users are training rows)
    arrays: dict[str, RowChunk] = dataclasses.field(default_factory=dict)  # splits held in memory (`in_memory`)


def in_memory(name: str, indptr: np.ndarray, cols: np.ndarray, num_cols: int) -> Dataset:
    """A training matrix held in memory as CSR (row r has columns `cols[indptr[r]:indptr[r+1]]`).

    Its transpose (the column half-epoch's rows) is made here. It has no test split: evaluate the
    trained model with `alx_trainer.evaluation.evaluate.evaluate_rows(model, rows)`.
    """
    indptr, cols = np.asarray(indptr, np.int64), np.asarray(cols, np.int64)
    num_rows = len(indptr) - 1
    if num_rows < 0 or indptr[0] != 0 or indptr[-1] != len(cols) or (np.diff(indptr) < 0).any():
        raise ValueError(f"{name}: indptr is not a CSR row pointer over {len(cols)} columns")
    if len(cols) and (cols.min() < 0 or cols.max() >= num_cols):
        raise ValueError(f"{name}: column ids outside [0, {num_cols})")
    order = np.argsort(cols, kind="stable")
    rows_of = np.repeat(np.arange(num_rows, dtype=np.int64), np.diff(indptr))[order]
    t_indptr = np.concatenate([[0], np.cumsum(np.bincount(cols, minlength=num_cols))]).astype(np.int64)
    arrays = {
        "train": RowChunk(np.arange(num_rows, dtype=np.int64), indptr, cols),
        "train_t": RowChunk(np.arange(num_cols, dtype=np.int64), t_indptr, rows_of),
    }
    splits = {k: len(v) for k, v in arrays.items()}
    return Dataset(name, num_rows, num_cols, {}, "", bipartite=True, splits=splits, arrays=arrays)


def split_reader(
    dataset: Dataset, split: str, chunk_rows: int, num_rows: int, num_cols: int,
    process_index: int = 0, process_count: int = 1,
) -> Callable[[], Iterator[RowChunk]]:
    """A function that streams this host's share of `split` as chunks of at most `chunk_rows` rows:
    its round-robin share of the shard files, or of the in-memory split's chunks."""
    held = dataset.arrays.get(split)
    if held is None:
        files = host_files(dataset.files[split], process_index, process_count)
        return functools.partial(read_chunks, files, chunk_rows, num_rows, num_cols)

    def chunks() -> Iterator[RowChunk]:
        for lo in range(process_index * chunk_rows, len(held), process_count * chunk_rows):
            yield _take(held, lo, min(lo + chunk_rows, len(held)))

    return chunks


def host_files(files: Sequence[str], process_index: int, process_count: int) -> list[str]:
    """This host's share of the sorted shard files (round robin)."""
    return list(files)[process_index::process_count]


def read_chunks(files: Sequence[str], chunk_rows: int, num_rows: int, num_cols: int) -> Iterator[RowChunk]:
    """Stream `files` (in order) as CSR chunks of `chunk_rows` rows (fewer at the end of a file).

    Raises ValueError naming the file when a record is corrupt or an id lies outside the
    matrix shape from stats.json (the dataset does not match the contract).
    """
    for path in files:
        held: list[RowChunk] = []
        held_rows = 0
        for rows in dataset_reader.iter_file_rows(path):
            chunk = RowChunk(rows.row_tags, rows.col_ptr, rows.cols)
            _check_ids(path, chunk, num_rows, num_cols)
            held.append(chunk)
            held_rows += len(chunk)
            if held_rows >= chunk_rows:
                whole = _concat(held)
                held_rows %= chunk_rows
                stop = len(whole) - held_rows
                for lo in range(0, stop, chunk_rows):
                    yield _take(whole, lo, lo + chunk_rows)
                held = [_take(whole, stop, len(whole))] if held_rows else []
        if held:
            yield _concat(held)


def _take(chunk: RowChunk, lo: int, hi: int) -> RowChunk:
    start, stop = chunk.indptr[lo], chunk.indptr[hi]
    return RowChunk(chunk.row_ids[lo:hi], chunk.indptr[lo : hi + 1] - start, chunk.cols[start:stop])


def _concat(chunks: list[RowChunk]) -> RowChunk:
    if len(chunks) == 1:
        return chunks[0]
    offsets = np.cumsum([0] + [c.indptr[-1] for c in chunks[:-1]])
    indptr = np.concatenate([chunks[0].indptr[:1]] + [c.indptr[1:] + o for c, o in zip(chunks, offsets)])
    return RowChunk(np.concatenate([c.row_ids for c in chunks]), indptr, np.concatenate([c.cols for c in chunks]))


_MISMATCH = "dataset does not match the contract"


def _check_ids(path: str, chunk: RowChunk, num_rows: int, num_cols: int) -> None:
    if len(chunk.row_ids) and (chunk.row_ids.min() < 0 or chunk.row_ids.max() >= num_rows):
        bad = chunk.row_ids[(chunk.row_ids < 0) | (chunk.row_ids >= num_rows)][0]
        raise ValueError(f"{path}: row_tag {bad} outside [0, {num_rows}) from stats.json; {_MISMATCH}")
    if len(chunk.cols) and (chunk.cols.min() < 0 or chunk.cols.max() >= num_cols):
        bad = chunk.cols[(chunk.cols < 0) | (chunk.cols >= num_cols)][0]
        raise ValueError(f"{path}: col_tag {bad} outside [0, {num_cols}) from stats.json; {_MISMATCH}")


def chunks_from_rows(row_ids: Sequence[int], rows: Sequence[Sequence[int]]) -> Iterator[RowChunk]:
    """In-memory rows (e.g. fold-in of a few test rows) as one CSR chunk."""
    lengths = np.array([len(r) for r in rows], dtype=np.int64)
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    cols = np.concatenate([np.asarray(r, dtype=np.int64) for r in rows]) if len(rows) else np.zeros(0, np.int64)
    yield RowChunk(np.asarray(row_ids, dtype=np.int64), indptr, cols)


def prefetch(make_iter: Callable[[], Iterator[T]], depth: int = 2) -> Iterator[T]:
    """Run an iterator in a background thread, `depth` items ahead; re-raises its errors here."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    done = object()
    stop = threading.Event()

    def worker() -> None:
        try:
            for item in make_iter():
                while not stop.is_set():
                    try:
                        q.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put(done)
        except BaseException as e:  # handed to the consumer, which re-raises it
            q.put(e)

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
