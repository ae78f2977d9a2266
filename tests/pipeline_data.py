"""Datasets for the trainer tests, made the only way a dataset is made: by the pipeline's CLI."""

from __future__ import annotations

import os
import pathlib
from typing import Any

from webgraph_contract import stats_json
from webgraph_pipeline.cli import main

from conftest import DATA

HOLLINS = DATA / "hollins"
GOWALLA = pathlib.Path(__file__).parent / "data" / "gowalla"


def make_dataset(output: str | os.PathLike, *flags: Any) -> dict[str, Any]:
    """Run `python -m webgraph_pipeline FLAGS --output OUTPUT` in this process; its stats.json."""
    code = main([str(f) for f in flags] + ["--output", str(output)])
    assert code == 0, f"webgraph_pipeline {flags} exited {code}"
    return stats_json.read_stats(str(output))


def hollins_dataset(
    output: str | os.PathLike, test_fraction: float, num_shards: int, urls: bool = True
) -> dict[str, Any]:
    """The real hollins.edu crawl (with its URLs unless `urls` is False) as a graph with a random
    test split; its stats.json."""
    flags: list[Any] = ["--edge_format", "pairs", "--header", "--input", HOLLINS / "edges.txt"]
    if urls:
        flags += ["--urls", HOLLINS / "urls.txt"]
    flags += ["--test_fraction", test_fraction, "--num_shards", num_shards]
    return make_dataset(output, *flags)


def gowalla_dataset(
    output: str | os.PathLike, num_shards: int, validation_fraction: float | None = None
) -> dict[str, Any]:
    """The Gowalla excerpt as a given split (with validation splits where `validation_fraction`
    is given); its stats.json."""
    flags: list[Any] = ["--edge_format", "given_split", "--input", GOWALLA / "train.txt"]
    flags += ["--test_input", GOWALLA / "test.txt"]
    if validation_fraction is not None:
        flags += ["--validation_fraction", validation_fraction]
    return make_dataset(output, *flags, "--num_shards", num_shards)
