"""One loader of a trained model and the dataset it was trained on, for `eval`, `predict` and
`export`, and of the rows an evaluation ranks.

`load(model_dir, data)`: the latest checkpoint of a `train` run (its row table only where asked),
and the opened dataset, checked whole (`dataset.check_dataset`) and refused unless the model was
trained on it (same `dataset_fingerprint`; a warning when either side predates fingerprints);
`open_checked(data)`: the dataset alone, opened and checked (`sweep`). `eval_data(dataset,
split)`: the held-out rows of a split as `RaggedRows` (fold-in columns, and the ground truth),
checked against stats.json's count, and whether row and column ids are shared, read once per
dataset state (cached); the column popularity of the matching training split only where asked
(`EvalData.popularity`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any

import numpy as np

from alx_trainer.data.dataset import (
    Dataset,
    check_dataset,
    check_rows,
    check_same_data,
    open_dataset,
    open_directory,
    read_chunks,
    validation_view,
)
from alx_trainer.model import Model, load_model
from webgraph_contract import dataset_reader, fileio, stats_json
from webgraph_contract.ragged import RaggedRows

# a trainer `Model` or a `(row_table or None, col_table)` pair
Tables = Any
SPLITS = ("test", "validation")


def load(
    model_dir: str, data: str = "", tfds_data_dir: str = "", row_table: bool | None = True
) -> tuple[Model, Dataset | None]:
    """The model of `model_dir` and the opened `data` (a dataset directory or a TFDS name; None
    when not given), refused unless the model was trained on it. `row_table`: read the trained
    row table (False: not, unless the model is tied, `load_model`; None: only for a dataset of the
    `given_split` protocol, whose evaluation scores its rows from it: a fold-in never reads it)."""
    if not fileio.isdir(model_dir):
        raise FileNotFoundError(
            f"{model_dir}: model directory not found; give the --model_dir of a `train` run"
        )
    dataset = open_checked(data, tfds_data_dir) if data else None
    if row_table is None:
        row_table = dataset is not None and dataset.protocol == "given_split"
    model = load_model(model_dir, row_table)
    if dataset is None:
        return model, None
    check_same_data(
        model_dir, model.dataset_fingerprint, model.config.data, data, dataset.fingerprint
    )
    return model, dataset


def open_checked(data: str, tfds_data_dir: str = "") -> Dataset:
    """`data` opened (`open_dataset`) and checked whole (`dataset.check_dataset`)."""
    dataset = open_dataset(data, tfds_data_dir)
    check_dataset(dataset)
    return dataset


def model_tables(model_or_tables: Tables | str | os.PathLike) -> tuple[Any, np.ndarray, Any]:
    """(row_table or None, float32 col_table, config or None) of a Model, a model directory or a
    (row, col) pair."""
    if isinstance(model_or_tables, (str, os.PathLike)):
        model_or_tables = load_model(os.fspath(model_or_tables))
    if isinstance(model_or_tables, tuple):
        row, col = model_or_tables
        return row, np.asarray(col, np.float32), None
    return (
        getattr(model_or_tables, "row_table", None),
        np.asarray(model_or_tables.col_table, np.float32),
        getattr(model_or_tables, "config", None),
    )


def for_split(dataset: Dataset | str | os.PathLike, split: str = "test") -> Dataset:
    """A dataset (or dataset directory) pointed at the rows of `split` to evaluate: its test
    rows, or its validation rows (`validation_view`)."""
    if split not in SPLITS:
        raise ValueError(f"split: expected 'test' or 'validation', got {split!r}")
    if not isinstance(dataset, Dataset):
        dataset = open_directory(os.fspath(dataset))
    return validation_view(dataset) if split == "validation" else dataset


def no_test_rows(name: str, how: str = "") -> ValueError:
    """The error of a dataset without rows to evaluate."""
    return ValueError(
        f"{name}: no test rows to evaluate{f' ({how})' if how else ''} "
        "(the dataset was built without a test split?)"
    )


@dataclasses.dataclass(frozen=True)
class EvalData:
    """The rows an evaluation ranks: `known` (row ids, fold-in columns) and `gt` (the same row
    ids, held-out columns), whether row and column ids are shared (a graph), and the column
    popularity (training rows per column, float32), read from the training split on first use
    (`column_popularity`, cached): only an evaluation that reports the popularity baseline reads
    it."""

    known: RaggedRows
    gt: RaggedRows
    shared: bool
    # the training split's files, (rows, cols) and the dataset state: what `popularity` reads
    train: tuple[str, ...]
    shape: tuple[int, int]
    stamp: tuple

    @property
    def popularity(self) -> np.ndarray:
        """Training rows per column (float32), `column_popularity` of the training split."""
        return column_popularity(self.train, self.shape, self.stamp)


def eval_data(data: str | os.PathLike | Dataset, split: str = "test") -> EvalData:
    """Cached read of the rows to evaluate for every kind of `--data`: a dataset directory (its
    `split`, test or validation) or an opened `Dataset` (its `files["test"]`, which
    `validation_view` points at the validation rows, and `files["train"]` for the popularity),
    TFDS ones included."""
    dataset = data if isinstance(data, Dataset) else for_split(data, split)
    if not dataset.files.get("test"):
        raise no_test_rows(dataset.name)
    stats = os.path.join(dataset.data_dir, stats_json.STATS_FILE)
    stamp = (dataset.fingerprint, os.path.getmtime(stats) if os.path.exists(stats) else 0.0)
    known, gt = _test_rows(tuple(dataset.files["test"]), stamp)
    # the rows read against stats.json's count (`validation_view` counts the validation rows)
    counts = {dataset.eval_split: dataset.splits["test"]} if "test" in dataset.splits else {}
    check_rows(dataset.name, dataset.eval_split, len(known), counts, "read to evaluate")
    return EvalData(
        known,
        gt,
        not dataset.bipartite,
        tuple(dataset.files["train"]),
        (dataset.num_rows, dataset.num_cols),
        stamp,
    )


@functools.lru_cache(maxsize=8)
def _test_rows(test: tuple[str, ...], stamp: tuple) -> tuple[RaggedRows, RaggedRows]:
    """(fold-in columns, held-out columns) of the records of the `test` files."""
    rows = dataset_reader.read_rows(test)
    return rows.col_tag, rows.gt_tag


@functools.lru_cache(maxsize=8)
def column_popularity(train: tuple[str, ...], shape: tuple[int, int], stamp: tuple) -> np.ndarray:
    """Training rows per column (float32) of the `train` files of a `shape` (rows, cols) dataset
    in the state `stamp`, read once per state (cached)."""
    counts = np.zeros(shape[1], np.int64)
    for chunk in read_chunks(train, 1 << 16, *shape):
        counts += np.bincount(chunk.ids, minlength=shape[1])
    return counts.astype(np.float32)
