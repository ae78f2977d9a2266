"""Where the benchmarks find the repository's data and configs, and put their work."""

from __future__ import annotations

import pathlib
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[2]
DATA = REPO / "data"
GOWALLA_DIR = DATA / "gowalla"  # LightGCN's train.txt / test.txt
ML1M_DIR = DATA / "ml-1m-implicit"
GOWALLA_CONFIG = REPO / "configs" / "gowalla.json"  # our point tuned on Gowalla's validation split
WHEELS = REPO / ".whl"  # implicit's CUDA wheels for the GPU machine (benchmarks/gpu_wheels.sh)


def work_dir(name: str) -> pathlib.Path:
    """The default work directory of a benchmark: `name` under the system's temporary directory."""
    return pathlib.Path(tempfile.gettempdir()) / name
