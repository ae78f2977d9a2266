"""Datasets for the trainer tests, made the only way a dataset is made: by the pipeline's CLI."""

from __future__ import annotations

import os
from typing import Any

from webgraph_contract import stats_json
from webgraph_pipeline.cli import main


def make_dataset(output: str | os.PathLike, *flags: Any) -> dict[str, Any]:
    """Run `python -m webgraph_pipeline FLAGS --output OUTPUT` in this process; its stats.json."""
    code = main([str(f) for f in flags] + ["--output", str(output)])
    assert code == 0, f"webgraph_pipeline {flags} exited {code}"
    return stats_json.read_stats(str(output))
