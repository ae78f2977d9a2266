"""Where the benchmarks find the repository's data and configs, and put their work."""

from __future__ import annotations

import pathlib
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[2]
DATA = REPO / "data"
# LightGCN's train.txt / test.txt
GOWALLA_DIR = DATA / "gowalla"
ML1M_DIR = DATA / "ml-1m-implicit"
# our point tuned on Gowalla's validation split
GOWALLA_CONFIG = REPO / "configs" / "gowalla.json"
# implicit's CUDA wheels for the GPU machine (benchmarks/gpu_wheels.sh)
WHEELS = REPO / ".whl"


def work_dir(name: str) -> pathlib.Path:
    """The default work directory of a benchmark: `name` under the system's temporary directory."""
    return pathlib.Path(tempfile.gettempdir()) / name
