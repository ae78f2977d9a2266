"""Streaming input: the contract's TFRecords read with tf.data, as CSR chunks of rows in NumPy.

Each host reads only its own share of the shard files (`files[process_index::process_count]`);
records are parsed in batches by `tf.io.parse_example` with the contract's feature spec and
prefetched, so no host ever holds the dataset as Python objects.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
from typing import Callable, Iterator, Sequence, TypeVar

import numpy as np
import tensorflow as tf

from webgraph_pipeline import contract

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


def host_files(files: Sequence[str], process_index: int, process_count: int) -> list[str]:
    """This host's share of the sorted shard files (round robin)."""
    return list(files)[process_index::process_count]


_PARSER = None


def _parser():
    """A tf.function parsing a batch of serialized records (traced once per process)."""
    global _PARSER
    if _PARSER is None:
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def parse(serialized):
            parsed = tf.io.parse_example(serialized, contract.feature_spec())
            cols = tf.RaggedTensor.from_sparse(parsed["col_tag"])
            return parsed["row_tag"], cols.values, cols.row_splits

        _PARSER = parse
    return _PARSER


def read_chunks(
    files: Sequence[str], chunk_rows: int, num_rows: int, num_cols: int, prefetch: int = 2
) -> Iterator[RowChunk]:
    """Stream `files` (in order) as CSR chunks of at most `chunk_rows` rows.

    Raises ValueError naming the file when a record is corrupt or an id lies outside the
    matrix shape from stats.json (the dataset does not match the contract).
    """
    parse = _parser()
    for path in files:
        ds = tf.data.TFRecordDataset([path]).batch(chunk_rows).prefetch(prefetch)
        try:
            for serialized in ds:
                row_tag, values, splits = (t.numpy() for t in parse(serialized))
                chunk = RowChunk(row_tag.astype(np.int64), splits.astype(np.int64), values.astype(np.int64))
                _check_ids(path, chunk, num_rows, num_cols)
                yield chunk
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
            message = str(e.message).splitlines()[0] if hasattr(e, "message") else str(e)
            raise ValueError(f"{path}: corrupt or non-contract TFRecord ({message})") from None


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
