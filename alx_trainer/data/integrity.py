"""Checks that `--data` is whole, worth training on, and the dataset a model was trained on.

Every check runs before epoch 1 (or before `eval`/`predict`/`export` do any work) and fails with
a one-line `DataError` that names the directory, what is wrong, and what to do:

- every shard of `-of-N` of each split is present (`dataset.open_directory` checks it).
- `check_trainable`: the matrix has rows and columns and stats.json promises training rows.
- `check_rows`: the rows the trainer counted while reading a split equal stats.json `splits`.
- `check_same_data`: the model's recorded `dataset_fingerprint` equals the data's; a model or a
  dataset without one (written before fingerprints existed) gets a warning, not a refusal.
"""

from __future__ import annotations

import logging
from typing import Mapping, Optional

log = logging.getLogger(__name__)

REBUILD = "rebuild it with `python -m webgraph_pipeline`"


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
