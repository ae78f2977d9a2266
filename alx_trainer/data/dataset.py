"""`open_dataset`: the `--data` of the trainer, a contract directory or a prepared TFDS dataset."""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from alx_trainer.data import tfds_input
from alx_trainer.data.records import Dataset
from webgraph_pipeline import contract


def open_dataset(data: str, tfds_data_dir: str = "") -> Dataset:
    """A contract directory (local or remote, e.g. gs://), or a TFDS name such as `web_graph/de-dense`."""
    if tf.io.gfile.isdir(data):
        return open_directory(data)
    if "/" in data and "://" not in data and not data.startswith(("/", ".")):
        return tfds_input.open_tfds(data, tfds_data_dir or None)
    raise FileNotFoundError(f"{data}: no such dataset directory (nor a TFDS name like web_graph/de-dense)")


def open_directory(data_dir: str) -> Dataset:
    """The shard files and matrix shape of a directory written in the dataset contract."""
    stats = contract.read_stats(data_dir)
    num_rows, num_cols = contract.matrix_shape(stats)
    files = {}
    for split in contract.ALL_SPLIT_PREFIXES:
        try:
            files[split] = list(contract.iter_split_files(data_dir, split))
        except FileNotFoundError:
            if split in ("train", "train_t"):
                raise
    return Dataset(data_dir, num_rows, num_cols, files, data_dir, bipartite=contract.is_bipartite(stats))


def validation_view(dataset: Dataset) -> Dataset:
    """The dataset with its validation splits in the places of train, train_t and test (tuning)."""
    missing = [s for s in contract.VALIDATION_PREFIXES if s not in dataset.files]
    if missing:
        raise FileNotFoundError(
            f"{dataset.name}: no {missing[0]!r} split; make the dataset with the pipeline's --validation_fraction"
        )
    files = {"train": dataset.files["validation_train"], "train_t": dataset.files["validation_train_t"],
             "test": dataset.files["validation"]}
    return dataclasses.replace(dataset, files=files, eval_split="validation")
