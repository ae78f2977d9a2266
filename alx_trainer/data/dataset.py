"""A dataset: where one comes from, the checks that it is whole, and reading its splits.

`Dataset` and where one comes from: `open_dataset` (the trainer's `--data`: a contract directory
or a prepared TFDS dataset) or `in_memory` (a CSR matrix held in memory); `split_reader` streams
a host's share of one of its splits.

A prepared TFDS dataset (`--data web_graph/de-dense`) is read through the same reader: its files
hold the contract's `tf.train.Example` features (`row_tag`, `col_tag`, `gt_tag`), so only the
file list and the matrix shape come from TFDS (the shards of each split from
`builder.info.splits`, the shape from the `stats.json` the builder keeps in its data directory,
or `info.metadata["stats"]`, else from the largest id in the files).

Checks (each before epoch 1, or before `eval`/`predict`/`export` do any work; each fails with a
one-line `DataError` that names the directory, what is wrong, and what to do):
- every shard of `-of-N` of each split is present (`check_shards`, run by `open_directory`).
- `check_dataset`: the directory is whole and agrees with its stats.json: every vocabulary shard
  of `-of-N` present, the ids of `vocab.tsv` (and `vocab.cols.tsv`) covering the matrix's rows
  (columns) exactly, every file stats.json's `file_sha256` lists present and none besides; run
  once per opened dataset by `loading.load` (eval, predict, export) and by `train` (sweep).
- `check_outside_data`: a model or output directory is not the dataset directory nor inside it.
- `check_trainable`: the matrix has rows and columns and stats.json promises training rows.
- `check_rows`: the rows the trainer counted while reading a split equal stats.json `splits`.
- `check_same_data`: the model's recorded `dataset_fingerprint` equals the data's; a model or a
  dataset without one (written before fingerprints existed) gets a warning, not a refusal.

Reading (`read_chunks`): the contract's TFRecords as chunks of rows (`RaggedRows`: row tags,
pointer, column ids) in NumPy, without TensorFlow. Each host reads only its own share of the
shard files (`host_files`); each file is read in blocks of whole records
(`webgraph_contract.tfrecord`, CRC-32C checked) and each block decoded at once
(`webgraph_contract.record_codec`) over the host's cores (in worker processes when the read is
large, `decode_mode`, else in threads), so no host ever holds the dataset as Python objects, and
`prefetch` runs the reading in a thread ahead of the solves.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import mmap
import os
import queue
import re
import threading
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence, TypeVar

import numpy as np

from alx_trainer import execution
from alx_trainer.data import csr_transpose
from webgraph_contract import dataset_reader, file_workers, fileio, layout, stats_json
from webgraph_contract.ragged import RaggedRows
from webgraph_contract.record_codec import SplitRows


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
    eval_split: str = "test"  # the contract split that files["test"] holds ("validation" tuning)
    splits: dict[str, int] = dataclasses.field(default_factory=dict)  # rows per split (stats.json)
    # stats.json `dataset_fingerprint` (None: made before it existed)
    fingerprint: str | None = None
    protocol: str = ""  # stats.json `protocol` (`given_split`: the test users are training rows)
    # splits held in memory (`in_memory`)
    arrays: dict[str, RaggedRows] = dataclasses.field(default_factory=dict)
    # the parsed stats.json (or TFDS info) it was opened from: read once (`check_dataset`)
    stats: Mapping[str, Any] = dataclasses.field(default_factory=dict, repr=False)


def open_dataset(data: str, tfds_data_dir: str = "") -> Dataset:
    """A contract directory (local or remote, e.g. gs://), or a TFDS name such as
    `web_graph/de-dense`."""
    if fileio.isdir(data):
        return open_directory(data)
    if "/" in data and "://" not in data and not data.startswith(("/", ".")):
        return open_tfds(data, tfds_data_dir or None)
    raise FileNotFoundError(
        f"{data}: no such dataset directory (nor a TFDS name like web_graph/de-dense)"
    )


def open_directory(data_dir: str) -> Dataset:
    """The shard files and matrix shape of a directory written in the dataset contract; a
    `DataError` when a split lacks some of its `-of-N` shards, or has none although it is required
    or stats.json counts rows in it."""
    stats = stats_json.read_stats(data_dir)
    splits = {
        k: int(v) for k, v in stats.get("splits", {}).items() if k in layout.ALL_SPLIT_PREFIXES
    }
    files = {}
    for split in layout.ALL_SPLIT_PREFIXES:
        pattern = layout.split_glob(data_dir, split)
        found = sorted(fileio.glob(pattern))
        if not found:
            optional = split == "test" or split in layout.VALIDATION_PREFIXES
            if not optional or splits.get(split, 0) > 0:
                counted = (
                    f", although stats.json counts {splits[split]} rows in it"
                    if split in splits
                    else ""
                )
                raise DataError(
                    f"{data_dir}: no {split!r} shard ({pattern} matches nothing{counted}); "
                    f"restore them or {REBUILD}"
                )
            continue
        check_shards(data_dir, repr(split), found)
        files[split] = found
    return _described(data_dir, data_dir, files, stats, layout.ALL_SPLIT_PREFIXES)


def open_tfds(name: str, data_dir: str | None) -> Dataset:
    """A prepared TFDS dataset such as `web_graph/de-dense` (see the module docstring)."""
    full, root, files, stats = locate_tfds(name, data_dir)
    return _described(full, root, files, stats, layout.SPLIT_PREFIXES, tfds=True)


def _described(
    name: str,
    root: str,
    files: dict[str, list[str]],
    stats: Mapping[str, Any],
    prefixes: Sequence[str],
    tfds: bool = False,
) -> Dataset:
    """A Dataset of `files` as its stats.json describes it (splits among `prefixes` counted)."""
    num_rows, num_cols = stats_json.matrix_shape(stats)
    splits = {k: int(v) for k, v in stats.get("splits", {}).items() if k in prefixes}
    return Dataset(
        name,
        num_rows,
        num_cols,
        files,
        root,
        tfds=tfds,
        bipartite=stats_json.is_bipartite(stats),
        splits=splits,
        fingerprint=stats_json.dataset_fingerprint(stats),
        protocol=str(stats.get("protocol", "")),
        stats=stats,
    )


def validation_view(dataset: Dataset) -> Dataset:
    """The dataset with its validation splits in the places of train, train_t and test (tuning)."""
    missing = [s for s in layout.VALIDATION_PREFIXES if s not in dataset.files]
    if missing:
        raise FileNotFoundError(
            f"{dataset.name}: no {missing[0]!r} split; make the dataset with the pipeline's "
            "--validation_fraction (given splits) or `webgraph_contract.planted "
            "--validation_fraction`"
        )
    places = {"train": "validation_train", "train_t": "validation_train_t", "test": "validation"}
    files = {place: dataset.files[split] for place, split in places.items()}
    splits = {
        place: dataset.splits[split] for place, split in places.items() if split in dataset.splits
    }
    return dataclasses.replace(dataset, files=files, splits=splits, eval_split="validation")


def split_reader(
    dataset: Dataset,
    split: str,
    chunk_rows: int,
    num_rows: int,
    num_cols: int,
    process_index: int = 0,
    process_count: int = 1,
) -> Callable[[], Iterator[RaggedRows]]:
    """A function that streams this host's share of `split` as chunks of at most `chunk_rows` rows:
    its round-robin share of the shard files, or of the in-memory split's chunks."""
    held = dataset.arrays.get(split)
    if held is None:
        files = host_files(dataset.files[split], process_index, process_count)
        return functools.partial(read_chunks, files, chunk_rows, num_rows, num_cols)

    def chunks() -> Iterator[RaggedRows]:
        for lo in range(process_index * chunk_rows, len(held), process_count * chunk_rows):
            yield held.take(lo, min(lo + chunk_rows, len(held)))

    return chunks


def in_memory(
    name: str, indptr: np.ndarray, cols: np.ndarray, num_cols: int, threads: int | None = None
) -> Dataset:
    """A training matrix held in memory as CSR (row r has columns `cols[indptr[r]:indptr[r+1]]`).

    Its transpose (the column half-epoch's rows) is made here, in `threads` threads (None: one per
    core this process may use). Both directions hold their ids as int32 where they fit
    (`csr_transpose.id_dtype`; int32 `cols` are kept, not copied). It has no test split: evaluate
    the trained model with `alx_trainer.evaluation.evaluate.evaluate_rows(model, rows)`.
    """
    indptr, cols = np.asarray(indptr, np.int64), np.asarray(cols)
    num_rows = len(indptr) - 1
    if num_rows < 0 or indptr[0] != 0 or indptr[-1] != len(cols) or (np.diff(indptr) < 0).any():
        raise ValueError(f"{name}: indptr is not a CSR row pointer over {len(cols)} columns")
    if len(cols) and (cols.min() < 0 or cols.max() >= num_cols):
        raise ValueError(f"{name}: column ids outside [0, {num_cols})")
    cols = cols.astype(csr_transpose.id_dtype(num_cols), copy=False)
    t_indptr, rows_of = csr_transpose.transpose(indptr, cols, num_cols, threads)
    arrays = {
        "train": RaggedRows(np.arange(num_rows, dtype=np.int64), indptr, cols),
        "train_t": RaggedRows(np.arange(num_cols, dtype=np.int64), t_indptr, rows_of),
    }
    splits = {k: len(v) for k, v in arrays.items()}
    # its links, as a directory's stats.json counts them (the execution plan reads them)
    stats = {"edges": len(cols)}
    return Dataset(
        name, num_rows, num_cols, stats, "", bipartite=True, splits=splits, arrays=arrays
    )


# The checks

log = logging.getLogger(__name__)

REBUILD = "rebuild it with `python -m webgraph_pipeline`"
# bytes of a vocabulary shard whose lines are counted at a time (bounds the temporary mask)
COUNT_BLOCK = 1 << 24


class DataError(ValueError):
    """The data cannot be used as given (incomplete, empty, or not the model's)."""


def check_trainable(where: str, num_rows: int, num_cols: int, splits: Mapping[str, int]) -> None:
    """Something to train: a matrix with rows and columns, and training rows when stats.json counts
    them."""
    if num_rows <= 0 or num_cols <= 0:
        raise DataError(
            f"{where}: the dataset has no node ({num_rows} x {num_cols} matrix in stats.json); "
            "nothing to train: rebuild it with less strict filters"
        )
    if "train" in splits and int(splits["train"]) <= 0:
        raise DataError(
            f"{where}: the dataset has no training row (stats.json splits.train = 0); nothing to "
            "train"
        )


def check_rows(where: str, split: str, counted: int, splits: Mapping[str, int], how: str) -> None:
    """The rows counted in `split` (`how` says by what) equal stats.json's count, when it has
    one."""
    if split not in splits:
        return
    expected = int(splits[split])
    if counted != expected:
        raise DataError(
            f"{where}: the {split!r} shards hold {counted} rows ({how}) but stats.json says "
            f"{expected}; "
            f"the files and stats.json are from different runs or damaged: {REBUILD}"
        )
    if split == "train" and counted == 0:
        raise DataError(f"{where}: the dataset has no training row; nothing to train")


def short_fingerprint(fingerprint: Optional[str]) -> str:
    return fingerprint[:12] if fingerprint else "none"


def check_same_data(
    model_dir: str,
    model_fingerprint: Optional[str],
    model_data: str,
    data: str,
    data_fingerprint: Optional[str],
) -> None:
    """Refuse `data` when its fingerprint differs from the one the model in `model_dir` recorded
    (trained on `model_data`); warn when either side has none."""
    if model_fingerprint and data_fingerprint:
        if model_fingerprint != data_fingerprint:
            raise DataError(
                f"--data {data} (dataset {short_fingerprint(data_fingerprint)}) is not the "
                f"dataset the model in {model_dir} was trained on ({model_data}, dataset "
                f"{short_fingerprint(model_fingerprint)}); pass that --data, "
                "or train a model on this one into a new --model_dir"
            )
        return
    which = f"the model in {model_dir}" if not model_fingerprint else f"--data {data}"
    log.warning(
        "cannot check that the model in %s was trained on --data %s: %s records no dataset "
        "fingerprint "
        "(written before fingerprints existed); its results are right only if it is the same "
        "dataset",
        model_dir,
        data,
        which,
    )


def check_outside_data(data: str, out_dir: str, flag: str = "--model_dir") -> None:
    """A DataError when `out_dir` (a model or output directory) is the dataset directory `data`
    or inside it: what a run writes there would mix with the dataset's files."""
    if not out_dir or not fileio.is_local(out_dir) or not os.path.isdir(data):
        return
    data_dir, out = os.path.realpath(data), os.path.realpath(out_dir)
    if out == data_dir or out.startswith(data_dir.rstrip(os.sep) + os.sep):
        where = "is" if out == data_dir else "is inside"
        raise DataError(
            f"{flag} {out_dir} {where} the dataset directory --data {data}; give a directory "
            "outside it"
        )


def check_shards(where: str, label: str, files: list[str]) -> None:
    """Every shard `-of-N` of one split (or of the vocabulary) is in `files`: a DataError naming
    `where`, the `label` of the files (`'train'`, `vocabulary`) and the first missing shards."""
    missing, clash = layout.missing_shards(files)
    if clash:
        raise DataError(f"{where}: the {label} shards are inconsistent: {clash}; {REBUILD}")
    if missing:
        shown = ", ".join(missing[:3]) + (
            f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        )
        raise DataError(
            f"{where}: the dataset is incomplete: {label} shard(s) {shown} missing "
            f"({len(files)} of {len(files) + len(missing)} present); restore them or {REBUILD}"
        )


def check_dataset(dataset: Any) -> None:
    """A one-line `DataError` naming the file unless the contract directory of `dataset` (an
    opened `dataset.Dataset`, with the stats.json it was opened from) is whole and agrees with
    that stats.json (see the module's list); a TFDS or in-memory dataset is not checked here.
    Checked once per state of the directory."""
    if dataset.tfds or dataset.arrays or not dataset.data_dir:
        return
    names = tuple(layout.data_files(dataset.data_dir))
    state = (dataset.data_dir, json.dumps(dataset.stats, sort_keys=True), names)
    if state not in _CHECKED:
        _check_directory(dataset.data_dir, dataset.stats, names)
        _CHECKED.add(state)


# the (directory, stats.json, data files) states `check_dataset` found whole
_CHECKED: set[tuple[str, str, tuple[str, ...]]] = set()


def _check_directory(data_dir: str, stats: Mapping[str, Any], names: tuple[str, ...]) -> None:
    """`check_dataset` of a directory with this stats.json and these data files."""
    stats_path = os.path.join(data_dir, stats_json.STATS_FILE)
    num_rows, num_cols = stats_json.matrix_shape(stats)
    if (
        "num_rows" in stats
        and stats_json.is_bipartite(stats)
        and stats["nodes"] != num_rows + num_cols
    ):
        raise DataError(
            f"{stats_path}: nodes = {stats['nodes']}, not num_rows + num_cols = "
            f"{num_rows + num_cols}; the file is damaged: {REBUILD}"
        )
    rows_vocab = sorted(fileio.glob(layout.vocab_glob(data_dir)))
    cols_vocab = sorted(fileio.glob(layout.vocab_glob(data_dir, columns=True)))
    shapes = [(rows_vocab, num_rows, "rows")]
    if cols_vocab:
        shapes.append((cols_vocab, num_cols, "columns"))
    for files, size, what in shapes:
        if files:
            _check_vocabulary(data_dir, stats_path, files, size, what)
    listed = stats.get(stats_json.FILE_DIGESTS_KEY)
    if isinstance(listed, dict):
        missing = sorted(set(listed) - set(names))
        extra = sorted(set(names) - set(listed))
        if missing:
            raise DataError(
                f"{os.path.join(data_dir, missing[0])}: missing"
                + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
                + f"; {stats_path} lists it among the dataset's files: restore it or {REBUILD}"
            )
        if extra:
            raise DataError(
                f"{os.path.join(data_dir, extra[0])}: not a file of this dataset"
                + (f" (and {len(extra) - 1} more)" if len(extra) > 1 else "")
                + f" ({stats_path} does not list it): a file of another run? remove it or "
                f"{REBUILD}"
            )


def _check_vocabulary(
    data_dir: str, stats_path: str, files: list[str], size: int, what: str
) -> None:
    """Every shard of `-of-N` present (`check_shards`), and their `id<TAB>name` lines naming ids
    0..size-1 once each, in order (as the pipeline writes them: sorted, by contiguous id range)."""
    check_shards(data_dir, "vocabulary", files)
    expected = 0
    for path, (first, last, count) in zip(files, execution.thread_map(_id_range, files)):
        if count == 0:
            continue
        if first != expected or last - first + 1 != count:
            raise DataError(
                f"{path}: its {count} names are of ids {first}..{last}, not {expected}.."
                f"{expected + count - 1} (ids 0..{size - 1} once each, in order); the "
                f"vocabulary is damaged: {REBUILD}"
            )
        expected = last + 1
    if expected != size:
        raise DataError(
            f"{files[-1]}: the vocabulary names {expected} {what} but {stats_path} says "
            f"{size}; stats.json and the files are from different runs or damaged: {REBUILD}"
        )


def _id_range(path: str) -> tuple[int, int, int]:
    """(first id, last id, lines) of a vocabulary shard; (0, -1, 0) when it is empty. A local
    shard is mapped: its lines counted by NumPy a block at a time (at memory speed, without the
    GIL), its first and last lines found from either end; another is read in blocks."""
    if not fileio.is_local(path):
        return _streamed_id_range(path)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return 0, -1, 0
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            data = np.frombuffer(m, np.uint8)
            count = sum(
                int(np.count_nonzero(data[at : at + COUNT_BLOCK] == ord("\n")))
                for at in range(0, size, COUNT_BLOCK)
            )
            # the map cannot close while an array views it
            del data
            end = size - 1 if m[-1] == ord("\n") else size
            count += int(end == size)
            newline = m.find(b"\n")
            first = _line_id(path, m[: newline if newline >= 0 else size])
            last = _line_id(path, m[m.rfind(b"\n", 0, end) + 1 : end])
    return first, last, count


def _streamed_id_range(path: str) -> tuple[int, int, int]:
    """`_id_range` of a shard that is not local (an object store's): read once, in blocks."""
    count, first, tail = 0, None, b""
    with fileio.open_file(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            count += block.count(b"\n")
            tail = (tail + block)[-(1 << 16) :]
            if first is None:
                first = _line_id(path, block.split(b"\n", 1)[0])
    if first is None:
        return 0, -1, 0
    if not tail.endswith(b"\n"):
        count += 1
    last = _line_id(path, tail.rstrip(b"\n").rsplit(b"\n", 1)[-1])
    return first, last, count


def _line_id(path: str, line: bytes) -> int:
    """The id of one `id<TAB>name` line."""
    key, sep, _ = line.partition(b"\t")
    if not sep or not key.isdigit():
        raise DataError(f"{path}: expected `id<TAB>name` lines, got {line[:80]!r}")
    return int(key)


# Reading a host's share of a split

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
    threads = threads or execution.host_threads()
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
        each = (threads or execution.host_threads()) // n  # threads per worker: spare cores
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


# A built TFDS dataset

DEFAULT_VERSION = "1.0.0"


def locate_tfds(
    name: str, data_dir: str | None
) -> tuple[str, str, dict[str, list[str]], dict[str, Any]]:
    """(full name, data directory, split -> shard files, stats) of a prepared TFDS dataset such as
    `web_graph/de-dense` (version 1.0.0 by default)."""
    try:
        import tensorflow_datasets as tfds  # seconds to import; only TFDS names need it
    except ImportError:
        raise ImportError(
            f"--data {name} is a TFDS name, which needs TensorFlow Datasets: "
            "pip install 'webgraph-alx[tfds]' (or give a dataset directory)"
        ) from None

    full = name if ":" in name else f"{name}:{DEFAULT_VERSION}"
    try:
        builder = tfds.builder(full, data_dir=data_dir)
    except Exception as e:  # TFDS raises several types for an unknown or unprepared dataset
        where = data_dir or "the default data_dir"
        # TFDS's first sentence, without the builder arguments before it
        reason = re.split(r"\.(?:\s|$)", str(e).strip().splitlines()[0])[0].rsplit(": ", 1)[-1]
        raise FileNotFoundError(
            f"--data {name}: no such dataset directory, nor a prepared TFDS dataset in {where} "
            f"({reason}); give a dataset directory or a TFDS name built with `tfds build`"
        ) from None
    root = os.fspath(builder.data_dir)
    if not os.path.isdir(root):
        raise FileNotFoundError(
            f"{full}: not prepared under {root}; run `tfds build tfds_builder/web_graph ...` first"
        )
    files: dict[str, list[str]] = {}
    for split, info in builder.info.splits.items():
        if split in layout.SPLIT_PREFIXES:
            files[split] = sorted(os.path.join(root, f) for f in info.filenames)
    absent = [f for split_files in files.values() for f in split_files if not os.path.exists(f)]
    if absent:
        raise DataError(
            f"{full}: {len(absent)} shard file(s) of the prepared dataset are missing "
            f"({absent[0]}, ...); run `tfds build` again"
        )
    for split in ("train", "train_t"):
        if not files.get(split):
            raise ValueError(
                f"{full}: has no {split!r} split; dataset does not match the WebGraph contract"
            )
    stats_path = os.path.join(root, stats_json.STATS_FILE)
    if os.path.exists(stats_path):
        stats = stats_json.read_stats(root)
    elif "stats" in builder.info.metadata:
        stats = dict(builder.info.metadata["stats"])
    else:
        stats = {"nodes": _tfds_max_id(files) + 1}
    return full, root, files, stats


def _tfds_max_id(files: dict[str, list[str]]) -> int:
    """The largest row or column id in the train splits (one streaming pass)."""
    top = -1
    big = np.iinfo(np.int64).max
    for split in ("train", "train_t"):
        for chunk in read_chunks(files[split], 4096, big, big):
            top = max(top, int(chunk.row_ids.max(initial=-1)), int(chunk.ids.max(initial=-1)))
    return top
