"""`open_dataset`: the `--data` of the trainer, a contract directory or a prepared TFDS dataset."""

from __future__ import annotations

import dataclasses

from alx_trainer.data import integrity, tfds_input
from alx_trainer.data.records import Dataset
from webgraph_contract import fileio, layout, stats_json


def open_dataset(data: str, tfds_data_dir: str = "") -> Dataset:
    """A contract directory (local or remote, e.g. gs://), or a TFDS name such as `web_graph/de-dense`."""
    if fileio.isdir(data):
        return open_directory(data)
    if "/" in data and "://" not in data and not data.startswith(("/", ".")):
        return tfds_input.open_tfds(data, tfds_data_dir or None)
    raise FileNotFoundError(f"{data}: no such dataset directory (nor a TFDS name like web_graph/de-dense)")


def open_directory(data_dir: str) -> Dataset:
    """The shard files and matrix shape of a directory written in the dataset contract; a `DataError`
    when a split lacks shards or has none although stats.json counts rows in it."""
    stats = stats_json.read_stats(data_dir)
    num_rows, num_cols = stats_json.matrix_shape(stats)
    splits = {k: int(v) for k, v in stats.get("splits", {}).items() if k in layout.ALL_SPLIT_PREFIXES}
    files = {}
    for split in layout.ALL_SPLIT_PREFIXES:
        try:
            files[split] = list(layout.iter_split_files(data_dir, split))
        except FileNotFoundError:
            optional = split == "test" or split in layout.VALIDATION_PREFIXES
            if not optional or splits.get(split, 0) > 0:
                counted = f", although stats.json counts {splits[split]} rows in it" if split in splits else ""
                raise integrity.DataError(
                    f"{data_dir}: no {split!r} shard ({layout.split_glob(data_dir, split)} matches nothing{counted}); "
                    f"restore them or {integrity.REBUILD}"
                ) from None
            continue
        integrity.check_shards(data_dir, split, files[split])
    return Dataset(data_dir, num_rows, num_cols, files, data_dir, bipartite=stats_json.is_bipartite(stats),
                   splits=splits, fingerprint=stats_json.dataset_fingerprint(stats),
                   protocol=str(stats.get("protocol", "")))


def validation_view(dataset: Dataset) -> Dataset:
    """The dataset with its validation splits in the places of train, train_t and test (tuning)."""
    missing = [s for s in layout.VALIDATION_PREFIXES if s not in dataset.files]
    if missing:
        raise FileNotFoundError(
            f"{dataset.name}: no {missing[0]!r} split; make the dataset with the pipeline's --validation_fraction"
        )
    places = {"train": "validation_train", "train_t": "validation_train_t", "test": "validation"}
    files = {place: dataset.files[split] for place, split in places.items()}
    splits = {place: dataset.splits[split] for place, split in places.items() if split in dataset.splits}
    return dataclasses.replace(dataset, files=files, splits=splits, eval_split="validation")
