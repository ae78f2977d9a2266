"""`--data web_graph/de-dense`: a prepared TFDS dataset read through the trainer's own reader.

The TFDS files hold the same `tf.train.Example` features as the contract (`row_tag`, `col_tag`,
`gt_tag`), so only the file list and the matrix shape come from TFDS: the shards of each split
from `builder.info.splits`, the shape from the `stats.json` the builder keeps in its data
directory (or `info.metadata["stats"]`), else from the largest id in the files.
"""

from __future__ import annotations

import os
import re
from typing import Any

import numpy as np

from alx_trainer.data import integrity, records
from webgraph_contract import layout, stats_json

DEFAULT_VERSION = "1.0.0"


def locate(
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
        raise integrity.DataError(
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
        stats = {"nodes": _max_id(files) + 1}
    return full, root, files, stats


def _max_id(files: dict[str, list[str]]) -> int:
    """The largest row or column id in the train splits (one streaming pass)."""
    top = -1
    big = np.iinfo(np.int64).max
    for split in ("train", "train_t"):
        for chunk in records.read_chunks(files[split], 4096, big, big):
            top = max(top, int(chunk.row_ids.max(initial=-1)), int(chunk.ids.max(initial=-1)))
    return top
