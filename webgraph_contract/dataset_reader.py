"""Reading a dataset back: a split's records as int64 arrays, and the vocabulary."""

from __future__ import annotations

import collections
import concurrent.futures
import functools
from typing import Callable, Iterable, Sequence, TypeVar

import numpy as np

from webgraph_contract import fileio, record_codec, tfrecord
from webgraph_contract.layout import iter_split_files, vocab_glob
from webgraph_contract.ragged import RaggedRows

DECODE_THREADS = 2  # threads that check and decode a file's blocks (`iter_file_rows`)
T = TypeVar("T")


def read_split(data_dir: str, split: str) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Every record of one split as `(row_tag, col_tag, gt_tag)` with int64 NumPy arrays."""
    return read_records(list(iter_split_files(data_dir, split)))


def read_rows(files: Sequence[str]) -> record_codec.SplitRows:
    """Every record of some TFRecord files in the contract's layout, in file order, as one value."""
    return record_codec.SplitRows.concat([r for path in files for r in iter_file_rows(path)])


def iter_file_rows(
    path: str,
    threads: int = DECODE_THREADS,
    then: Callable[[record_codec.SplitRows], T] | None = None,
) -> Iterable[record_codec.SplitRows] | Iterable[T]:
    """The records of one TFRecord file in the contract's layout, a block at a time, in order; a
    one-line ValueError naming the file and the byte offset of a corrupt or non-contract record.

    This thread reads the blocks and finds their records (`tfrecord.read_blocks`); `threads` more
    check and decode them, and apply `then` to each block's rows (so the caller's own per-block
    work runs in those threads too), at most `threads` + 1 blocks in memory at a time; with
    `threads` 0, this thread does it all, a block at a time. Blocks are
    `tfrecord.BLOCK_BYTES`: small enough that a block's decoding temporaries stay in the cores'
    caches and in the allocator's heap (larger blocks cost page faults and cache misses: see
    docs/benchmarks.md, "Figures behind code choices")."""
    work = functools.partial(_decode_block, path, then=then)
    if threads < 1:
        with fileio.open_file(path, "rb") as f:
            yield from map(work, tfrecord.read_blocks(f, path, checked=False))
        return
    with (
        fileio.open_file(path, "rb") as f,
        concurrent.futures.ThreadPoolExecutor(threads) as pool,
    ):
        pending: collections.deque = collections.deque()
        for block in tfrecord.read_blocks(f, path, checked=False):
            pending.append(pool.submit(work, block))
            if len(pending) > threads:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _decode_block(path: str, block: tfrecord.Block, then: Callable | None = None):
    """One block's records, checksums checked, decoded (and given to `then`)."""
    tfrecord.check(path, block)
    try:
        rows = record_codec.decode_rows(block.data, block.starts, block.lengths)
    except record_codec.ExampleError as e:
        at = block.offset + int(block.starts[e.index]) - tfrecord.HEADER_BYTES
        raise ValueError(
            f"{path}: the record at byte {at} is not a web_graph tf.train.Example ({e})"
        ) from None
    return rows if then is None else then(rows)


_MISMATCH = "dataset does not match the contract"


def check_ids(path: str, rows: RaggedRows, num_rows: int, num_cols: int) -> None:
    """A one-line ValueError naming `path` if a row id lies outside `[0, num_rows)` or a column
    id outside `[0, num_cols)` (the matrix shape from stats.json)."""
    row_ids, cols = rows.row_ids, rows.ids[rows.indptr[0] : rows.indptr[-1]]
    if len(row_ids) and (row_ids.min() < 0 or row_ids.max() >= num_rows):
        bad = row_ids[(row_ids < 0) | (row_ids >= num_rows)][0]
        raise ValueError(
            f"{path}: row_tag {bad} outside [0, {num_rows}) from stats.json; {_MISMATCH}"
        )
    if len(cols) and (cols.min() < 0 or cols.max() >= num_cols):
        bad = cols[(cols < 0) | (cols >= num_cols)][0]
        raise ValueError(
            f"{path}: col_tag {bad} outside [0, {num_cols}) from stats.json; {_MISMATCH}"
        )


def read_records(files: Sequence[str]) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Every record of some TFRecord files in the contract's feature layout, in file order."""
    out: list[tuple[int, np.ndarray, np.ndarray]] = []
    for path in files:
        for rows in iter_file_rows(path):
            out.extend(rows.tuples())
    return out


def read_vocab(data_dir: str, columns: bool = False) -> dict[int, str]:
    """Vocabulary shards of a dataset directory, id -> name (URL): `vocab.tsv-*`, or with
    `columns` the column names of interaction data (`vocab.cols.tsv-*`, else `vocab.tsv-*`)."""
    pattern = vocab_glob(data_dir)
    files = sorted(fileio.glob(vocab_glob(data_dir, columns=True))) if columns else []
    files = files or sorted(fileio.glob(pattern))
    if not files:
        raise FileNotFoundError(f"no vocabulary shards match {pattern}")
    vocab: dict[int, str] = {}
    for path in files:
        try:
            _read_vocab_file(path, vocab)
        except UnicodeDecodeError:
            raise ValueError(_not_utf8(path)) from None
    return vocab


def _read_vocab_file(path: str, vocab: dict[int, str]) -> None:
    """Add the `id<TAB>name` lines of one vocabulary shard to `vocab`."""
    with fileio.open_file(path, "r") as f:
        for n, line in enumerate(f, 1):
            key, sep, name = line.rstrip("\n").partition("\t")
            if not sep or not key.isdigit():
                raise ValueError(f"{path}:{n}: expected `id<TAB>name`, got {line.strip()!r}")
            if int(key) in vocab:
                raise ValueError(f"{path}:{n}: id {key} is named twice")
            vocab[int(key)] = name


def _not_utf8(path: str) -> str:
    """Where a file is not UTF-8: `PATH:LINE: not UTF-8 (byte 0xNN at column C)`."""
    with fileio.open_file(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as e:
                return f"{path}:{n}: not UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1})"
    return f"{path}: not UTF-8"
