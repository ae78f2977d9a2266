"""The dataset's file layout: split and vocabulary shard names, globs, completeness."""

from __future__ import annotations

import os
import re
from typing import Iterable, Iterator, Mapping, Optional, Sequence

import numpy as np

from webgraph_contract import fileio

# TFDS split name -> file prefix of its TFRecord shards: the splits every dataset has (`test` may be
# empty).
SPLIT_PREFIXES: Mapping[str, str] = {
    "train": "train",
    "train_t": "train.transpose",
    "test": "test",
}

# Optional, for tuning (`--validation_fraction`): the training data re-split the way `test` splits
# it.
# `validation_train` (+ transpose) is what to train on, `validation` the rows to evaluate (`col_tag`
# = the row's validation_train items, `gt_tag` = its held-out training items).
VALIDATION_PREFIXES: Mapping[str, str] = {
    "validation_train": "validation.train",
    "validation_train_t": "validation.train.transpose",
    "validation": "validation",
}

ALL_SPLIT_PREFIXES: Mapping[str, str] = {**SPLIT_PREFIXES, **VALIDATION_PREFIXES}

TFRECORD_SUFFIX = ".tfr"

VOCAB_PREFIX = "vocab.tsv"

# Interaction data (users x items) only: the column (item) names; `vocab.tsv` then holds the rows.
COL_VOCAB_PREFIX = "vocab.cols.tsv"


def shard_of(row_id, num_ids: int, num_shards: int):
    """The shard of an id (or an array of ids) when ids 0..num_ids-1 are cut into `num_shards`
    contiguous ranges: id r goes to shard r * num_shards // num_ids (ids past the end to the
    last)."""
    return np.minimum(row_id * num_shards // max(num_ids, 1), num_shards - 1)


def shard_bounds(num_ids: int, num_shards: int) -> np.ndarray:
    """The first id of each shard and the end: shard k holds the ids [bounds[k], bounds[k + 1])
    that `shard_of` puts in it (the smallest r with r * num_shards >= k * num_ids)."""
    k = np.arange(num_shards + 1, dtype=np.int64)
    return np.minimum(-(-k * num_ids // num_shards), num_ids)


def row_blocks(ptr: np.ndarray, lo: int, hi: int, size: int) -> Iterator[tuple[int, int]]:
    """Consecutive row ranges [a, b) cutting rows [lo, hi) of a CSR pointer (row r holds
    `ptr[r + 1] - ptr[r]` entries) into blocks of at most `size` entries: as many whole rows as
    fit, at least one (a row of more than `size` entries is a block alone)."""
    while lo < hi:
        end = int(np.searchsorted(ptr, ptr[lo] + size, "right")) - 1
        end = min(hi, max(end, lo + 1))
        yield lo, end
        lo = end


_SHARD_RE = re.compile(r"^(?P<prefix>.+)-(?P<index>\d{5})-of-(?P<total>\d{5})$")


def shard_name(prefix: str, index: int, num_shards: int, suffix: str = "") -> str:
    """`train.tfr-00003-of-00010`: the name of one shard, in the public web_graph layout."""
    return f"{prefix}{suffix}-{index:05d}-of-{num_shards:05d}"


def split_glob(data_dir: str, split: str) -> str:
    """The glob that matches every TFRecord shard of `split` under `data_dir`."""
    if split not in ALL_SPLIT_PREFIXES:
        raise ValueError(f"unknown split {split!r}; expected one of {sorted(ALL_SPLIT_PREFIXES)}")
    return os.path.join(data_dir, f"{ALL_SPLIT_PREFIXES[split]}{TFRECORD_SUFFIX}-*-of-*")


def vocab_glob(data_dir: str, columns: bool = False) -> str:
    """The glob that matches every vocabulary shard (with `columns`: column-name shard) under
    `data_dir`."""
    return os.path.join(data_dir, f"{COL_VOCAB_PREFIX if columns else VOCAB_PREFIX}-*-of-*")


def data_files(data_dir: str) -> list[str]:
    """Names of the files that hold a dataset's content: every split shard and vocabulary shard
    (sorted)."""
    patterns = [split_glob(data_dir, split) for split in ALL_SPLIT_PREFIXES]
    patterns += [vocab_glob(data_dir), vocab_glob(data_dir, columns=True)]
    return sorted({os.path.basename(p) for pattern in patterns for p in fileio.glob(pattern)})


def shard_pattern(prefix: str) -> str:
    """The regex of the shard names of `prefix`: `PREFIX-SSSSS-of-NNNNN`."""
    return rf"{re.escape(prefix)}-\d{{5}}-of-\d{{5}}"


def written_names(names: str) -> re.Pattern:
    """The regex (use `fullmatch`) of the names `names` (a regex) and of the temporary files their
    writers make (`fileio.temp_path`; `NAME.tmp-HEX` as older versions named them)."""
    return re.compile(rf"\.(?:{names}){fileio.TEMP_SUFFIX}|(?:{names})(?:{fileio.TEMP_SUFFIX})?")


def remove_stale(directory: str, names: str, keep: Iterable[str]) -> list[str]:
    """Remove from `directory` the files whose names match the regex `names` but are not in `keep`
    (an earlier write's shards, with another shard count), and the temporary files a killed writer
    of such names left (`fileio.temp_path`; `NAME.tmp-HEX` as older versions named them); nothing
    else. The paths removed."""
    ours = written_names(names)
    kept = {os.path.basename(k) for k in keep}
    stale = [
        os.path.join(directory, name)
        for name in sorted(fileio.listdir(directory))
        if ours.fullmatch(name) and name not in kept
    ]
    for path in stale:
        fileio.remove(path)
    return stale


def missing_shards(files: Sequence[str]) -> tuple[list[str], Optional[str]]:
    """Which shards of `-of-N` are absent from `files` (paths of one split), and a reason when the
    names disagree on N; ([], None) when the split is complete."""
    parsed = [_SHARD_RE.match(os.path.basename(f)) for f in files]
    if not files or not all(parsed):
        return [], None
    totals = sorted({int(m["total"]) for m in parsed})
    if len(totals) > 1:
        return [], f"shard names disagree on the shard count ({', '.join(map(str, totals))})"
    present = {int(m["index"]) for m in parsed}
    prefix = parsed[0]["prefix"]
    return [
        f"{prefix}-{i:05d}-of-{totals[0]:05d}" for i in range(totals[0]) if i not in present
    ], None


def iter_split_files(data_dir: str, split: str) -> Iterable[str]:
    """The sorted shard paths of one split; an error naming the glob if there are none."""
    files = sorted(fileio.glob(split_glob(data_dir, split)))
    if not files:
        raise FileNotFoundError(f"no {split!r} shards match {split_glob(data_dir, split)}")
    return files
