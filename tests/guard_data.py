"""A small graph dataset and a model trained on it, for the guard tests (`test_guards_*`)."""

from __future__ import annotations

import pathlib

from alx_trainer.config import TrainConfig
from alx_trainer.train import train
from tests.pipeline_data import make_dataset

# 40 nodes with URL names, 4 outlinks and 4 inlinks each (as test_trainer_guards)
NODES = 40
EDGES = "".join(
    f"http://n{s}.example/p http://n{(s + step) % NODES}.example/p\n"
    for s in range(NODES)
    for step in (1, 2, 5, 11)
)


def small_dataset(base: pathlib.Path, name: str = "data", *flags: str) -> pathlib.Path:
    """The 40-node graph with a test split, in 2 shards, as `base/name`."""
    edges = base / "edges.txt"
    if not edges.exists():
        edges.write_text(EDGES)
    out = base / name
    make_dataset(
        out,
        "--edge_format",
        "pairs",
        "--input",
        edges,
        "--min_links",
        "1",
        "--num_shards",
        "2",
        "--test_fraction",
        "0.3",
        *flags,
    )
    return out


def small_model(data: pathlib.Path, model_dir: pathlib.Path, epochs: int = 1):
    """A model of dimension 4 trained on `data` into `model_dir`."""
    return train(
        TrainConfig(
            data=str(data),
            model_dir=str(model_dir),
            dim=4,
            epochs=epochs,
            eval_every=0,
            progress=False,
        )
    )
