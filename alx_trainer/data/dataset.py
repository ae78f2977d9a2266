"""`Dataset` and where one comes from: `open_dataset` (the trainer's `--data`: a contract directory
or a prepared TFDS dataset) or `in_memory` (a CSR matrix held in memory); `split_reader` streams
a host's share of one of its splits."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from alx_trainer.data import csr_transpose, integrity, records, tfds_input
from webgraph_contract import fileio, layout, stats_json
from webgraph_contract.ragged import RaggedRows


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
    # the parsed stats.json (or TFDS info) it was opened from: read once (`integrity.check_dataset`)
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
                raise integrity.DataError(
                    f"{data_dir}: no {split!r} shard ({pattern} matches nothing{counted}); "
                    f"restore them or {integrity.REBUILD}"
                )
            continue
        integrity.check_shards(data_dir, repr(split), found)
        files[split] = found
    return _described(data_dir, data_dir, files, stats, layout.ALL_SPLIT_PREFIXES)


def open_tfds(name: str, data_dir: str | None) -> Dataset:
    """A prepared TFDS dataset such as `web_graph/de-dense` (see `tfds_input`)."""
    full, root, files, stats = tfds_input.locate(name, data_dir)
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
        files = records.host_files(dataset.files[split], process_index, process_count)
        return functools.partial(records.read_chunks, files, chunk_rows, num_rows, num_cols)

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
