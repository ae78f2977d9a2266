"""Checks that `--data` is whole, worth training on, and the dataset a model was trained on.

Every check runs before epoch 1 (or before `eval`/`predict`/`export` do any work) and fails with
a one-line `DataError` that names the directory, what is wrong, and what to do:

- every shard of `-of-N` of each split is present (`check_shards`, run by
  `dataset.open_directory`).
- `check_dataset`: the dataset directory is whole and agrees with its stats.json: every vocabulary
  shard of `-of-N` present, the ids of `vocab.tsv` (and `vocab.cols.tsv`) covering the matrix's
  rows (columns) exactly, every file stats.json's `file_sha256` lists present and none besides;
  run once per opened dataset by `loading.load` (eval, predict, export) and by `train` (sweep).
- `check_outside_data`: a model or output directory is not the dataset directory nor inside it.
- `check_trainable`: the matrix has rows and columns and stats.json promises training rows.
- `check_rows`: the rows the trainer counted while reading a split equal stats.json `splits`.
- `check_same_data`: the model's recorded `dataset_fingerprint` equals the data's; a model or a
  dataset without one (written before fingerprints existed) gets a warning, not a refusal.
"""

from __future__ import annotations

import json
import logging
import mmap
import os
from typing import Any, Mapping, Optional

import numpy as np

from alx_trainer.data.host_cores import thread_map
from webgraph_contract import fileio, layout, stats_json

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


def short(fingerprint: Optional[str]) -> str:
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
                f"--data {data} (dataset {short(data_fingerprint)}) is not the dataset the model "
                f"in {model_dir} "
                f"was trained on ({model_data}, dataset {short(model_fingerprint)}); pass that "
                "--data, "
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
    for path, (first, last, count) in zip(files, thread_map(_id_range, files)):
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
