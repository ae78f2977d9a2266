"""Where a `web_graph` build reads from, and the plain functions its Beam steps run (no TFDS).

A source is a directory (local, gs://, s3://: anything `webgraph_contract.fileio` opens). Its kind
is decided by what the directory holds, checked in this order, first for `<dir>/<official
subfolder>` (for the six named configs, e.g. `web_graph_tld_de_min_50`) and then for `<dir>` itself:

1. `pipeline`: `stats.json` next to the `train`, `train_t` and `test` shards: a dataset written
   by `python -m webgraph_pipeline`. Its stats are kept with the TFDS dataset.
2. `official`: the shards without `stats.json`: files in the layout published under
   gs://gresearch/web_graph/ (`train.tfr-00000-of-00100`, `train.transpose.tfr-...`,
   `test.tfr-...`).
3. `wat`: no shards, but WAT files (`*.wat`, `*.wat.gz`) in `<dir>`: raw crawl data; the builder
   runs the WebGraph Beam pipeline on them inside `tfds build`.

The user errors of a build (a bad config, a missing or unusable source, an empty result) are
`BuildError`s whose message is one line saying what, where and what to do; under `tfds build`
that line is all that is printed (see the builder's `one_line_errors`).
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from webgraph_contract import dataset_reader, layout, stats_json

PIPELINE = "pipeline"
OFFICIAL = "official"
WAT = "wat"

WAT_PATTERNS = ("*.wat", "*.wat.gz")
_SHARD_RE = re.compile(r"-(\d{5})-of-(\d{5})$")


class BuildError(Exception):
    """A known user error of a web_graph build; the message is the whole story, on one line."""


class ConfigError(BuildError, ValueError):
    """A config value of the wrong type or out of range (a usage error)."""


class SourceNotFoundError(BuildError, FileNotFoundError):
    """The source directory is missing or holds nothing a build can use."""


class BadSourceError(BuildError, ValueError):
    """The source holds something a build cannot use: incomplete shards, other settings, bad
    records, or a graph with an empty split."""


@dataclasses.dataclass(frozen=True)
class Source:
    """A resolved source: its kind, its directory and the files each split (or the job) reads.

    kind: `pipeline`, `official` or `wat`.
    path: the directory the files are in.
    split_files: split name -> sorted shard paths (empty for `wat`).
    wat_files: the WAT files (empty unless kind is `wat`).
    """

    kind: str
    path: str
    split_files: Mapping[str, Sequence[str]] = dataclasses.field(default_factory=dict)
    wat_files: Sequence[str] = ()


def _gfile():
    import tensorflow as tf

    return tf.io.gfile


def check_complete_shards(files: Sequence[str], split: str) -> None:
    """Raise if the `-NNNNN-of-MMMMM` shards of one split are not exactly 0..M-1 of one M."""
    totals: set[int] = set()
    indices: set[int] = set()
    for path in files:
        match = _SHARD_RE.search(path)
        if not match:
            raise BadSourceError(f"{path}: shard name lacks the -NNNNN-of-NNNNN suffix")
        indices.add(int(match.group(1)))
        totals.add(int(match.group(2)))
    if len(totals) != 1:
        raise BadSourceError(
            f"split {split!r} mixes shard counts {sorted(totals)} in {os.path.dirname(files[0])}"
        )
    (total,) = totals
    missing = sorted(set(range(total)) - indices)
    if missing:
        raise BadSourceError(
            f"split {split!r} in {os.path.dirname(files[0])} is incomplete: "
            f"{len(missing)} of {total} shards missing (first: {missing[0]:05d})"
        )


def _split_files(directory: str) -> dict[str, list[str]] | None:
    """Every split's shards in `directory`; None when it holds no shard of any split."""
    gfile = _gfile()
    found = {
        split: sorted(gfile.glob(layout.split_glob(directory, split)))
        for split in layout.SPLIT_PREFIXES
    }
    if not any(found.values()):
        return None
    missing = [split for split, files in found.items() if not files]
    if missing:
        raise SourceNotFoundError(
            f"{directory}: has web_graph shards but none for split(s) {missing} "
            f"(expected {', '.join(layout.split_glob(directory, s) for s in missing)})"
        )
    for split, files in found.items():
        check_complete_shards(files, split)
    return found


def find_wat_files(directory: str) -> list[str]:
    """The WAT files directly in `directory`, sorted."""
    gfile = _gfile()
    files: set[str] = set()
    for pattern in WAT_PATTERNS:
        files.update(gfile.glob(os.path.join(directory, pattern)))
    return sorted(files)


def resolve(root: str, subfolder: str = "") -> Source:
    """Decide what `root` holds (see the module docstring); a clear error when it is nothing
    usable."""
    gfile = _gfile()
    root = os.fspath(root)
    if not gfile.isdir(root):
        raise SourceNotFoundError(
            f"web_graph source {root} is not a directory: give --manual_dir=DIR holding a pipeline "
            "output, "
            "official shards or WAT files"
        )
    candidates = ([os.path.join(root, subfolder)] if subfolder else []) + [root]
    for directory in candidates:
        if not gfile.isdir(directory):
            continue
        split_files = _split_files(directory)
        if split_files is None:
            continue
        kind = (
            PIPELINE if gfile.exists(os.path.join(directory, stats_json.STATS_FILE)) else OFFICIAL
        )
        return Source(kind=kind, path=directory, split_files=split_files)
    wat_files = find_wat_files(root)
    if wat_files:
        return Source(kind=WAT, path=root, wat_files=wat_files)
    looked = " or ".join(candidates)
    raise SourceNotFoundError(
        f"web_graph source {looked}: found neither TFRecord shards "
        f"({os.path.basename(layout.split_glob(root, 'train'))}, ...) nor WAT files "
        f"({', '.join(WAT_PATTERNS)})"
    )


def config_mismatches(stats: Mapping[str, Any], wanted: Mapping[str, Any]) -> list[str]:
    """`key: dataset has X, config wants Y` for every graph setting in `stats['config']` that
    differs.

    Settings the stats do not record are not compared. TLD lists compare as sets.
    """
    recorded = stats.get("config") or {}
    out = []
    for key, want in wanted.items():
        if key not in recorded:
            continue
        have = recorded[key]
        if key == "tlds":
            same = sorted(have or []) == sorted(want or [])
        elif isinstance(want, float):
            same = abs(float(have) - want) < 1e-12
        else:
            same = have == want
        if not same:
            out.append(f"{key}: dataset has {have!r}, config wants {want!r}")
    return out


def check_splits_not_empty(splits: Mapping[str, int], where: str, advice: str) -> None:
    """TFDS cannot hold an empty split: raise, saying which split, where and `advice`, if any is
    empty."""
    empty = [split for split in layout.SPLIT_PREFIXES if not splits.get(split)]
    if empty:
        raise BadSourceError(f"{where}: split(s) {empty} are empty ({dict(splits)}); {advice}")


def wat_advice(links_read: int, num_files: int, tlds: Sequence[str], min_links: int) -> str:
    """What to do about an empty split of a WAT build, from what was read: lowering min_links is
    advised only when links were read and the degree filter is on."""
    if not links_read:
        return (
            f"no link was read from the {num_files} WAT file(s): they are damaged or not WAT files "
            "(the warnings above name each one)"
        )
    filters = ([f"tlds={list(tlds)}"] if tlds else []) + (
        [f"min_links={min_links}"] if min_links else []
    )
    if not filters:
        return f"{links_read:,} links were read: too few pages for the splits; give more input"
    todo = " or ".join(
        (["other tlds"] if tlds else []) + (["a lower min_links"] if min_links else [])
    )
    return (
        f"{links_read:,} links were read, too few kept by {', '.join(filters)}: give more input, "
        f"or {todo}"
    )


def stats_advice(stats: Mapping[str, Any]) -> str:
    """What to do about an empty split of a pipeline output, from its commonest drop."""
    dropped = stats.get("dropped") or {}
    if not dropped:
        return "its input held too little; give more input"
    reason = max(dropped, key=dropped.get)
    todo = (
        "build it again with a lower min_links"
        if "degree_filter" in reason
        else "build it again from other input"
    )
    return f"commonest drop {reason} ({dropped[reason]:,}): {todo}"


def row_to_example(row: tuple[int, Sequence[int], Sequence[int]]) -> tuple[int, dict[str, Any]]:
    """`(row_tag, col_tag, gt_tag)` -> the TFDS `(key, example)` pair; the key is the row id."""
    row_tag, col_tag, gt_tag = row
    return int(row_tag), {
        "row_tag": int(row_tag),
        "col_tag": np.asarray(col_tag, dtype=np.int64),
        "gt_tag": np.asarray(gt_tag, dtype=np.int64),
    }


def read_shard(filename: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """Every `(key, example)` of one TFRecord shard (the contract's reader, checksums checked); a
    damaged file or a record that is not a web_graph Example fails naming the file."""
    try:
        for rows in dataset_reader.iter_file_rows(filename):
            for row in rows.tuples():
                yield row_to_example(row)
    except (ValueError, OSError) as e:
        raise BadSourceError(str(e).splitlines()[0]) from e


def write_job_stats(
    summary: dict[str, Any],
    data_dir: str,
    config: dict[str, Any],
    input_files: list[str],
    links_read: int,
) -> str:
    """stats.json of a WAT build before the counters are known (TFDS shards the files itself).

    Fails the job with a clear message when a split came out empty (`links_read`: the links the WAT
    files gave, which decides the advice); returns the file's path.
    """
    from webgraph_pipeline import __version__

    where = (
        f"graph of {len(input_files)} WAT file(s) with tlds={config['tlds']}, "
        f"min_links={config['min_links']}"
    )
    advice = wat_advice(links_read, len(input_files), config["tlds"], config["min_links"])
    check_splits_not_empty(summary["splits"], where, advice)
    stats = stats_json.job_stats(summary, config, input_files, __version__)
    stats_json.write_stats(data_dir, stats)
    return os.path.join(data_dir, stats_json.STATS_FILE)


def example_after(
    row: tuple[int, Sequence[int], Sequence[int]], _stats_path: str
) -> tuple[int, dict[str, Any]]:
    """`row_to_example`, as a step that runs only once stats.json is written (see the builder)."""
    return row_to_example(row)
