"""The benchmarks' datasets, made by the pipeline (`python -m webgraph_pipeline`) and read back."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True)
class Split:
    """A dataset's shape, training rows (row -> columns) and test rows (row -> (fold-in, ground truth))."""

    num_rows: int
    num_cols: int
    train: dict[int, np.ndarray]
    test: dict[int, tuple[np.ndarray, np.ndarray]]


def make_split(data_dir: str, *flags: Any) -> Split:
    """Run the pipeline's CLI with `flags` writing `data_dir`; the dataset read back."""
    from webgraph_contract import dataset_reader, stats_json
    from webgraph_pipeline.cli import main

    if main([str(f) for f in flags] + ["--output", data_dir]) != 0:
        raise SystemExit(f"webgraph_pipeline {' '.join(map(str, flags))} failed")
    num_rows, num_cols = stats_json.matrix_shape(stats_json.read_stats(data_dir))
    train = {r: c for r, c, _ in dataset_reader.read_split(data_dir, "train")}
    test = {r: (c, g) for r, c, g in dataset_reader.read_split(data_dir, "test")}
    return Split(num_rows, num_cols, train, test)
