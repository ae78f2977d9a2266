"""Shared test set-up: 8 virtual CPU devices for JAX, and paths to the bundled real data."""

import os
import pathlib

# Must happen before JAX is imported anywhere in the test session.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Commands run in-process turn JAX's compilation cache on ('auto': under XDG_CACHE_HOME): the
# repository's own ignored directory, not the user's home; one per pytest-xdist worker, so two
# workers never write the same cache entry at once.
os.environ["XDG_CACHE_HOME"] = str(
    pathlib.Path(__file__).resolve().parent.parent
    / ".pytest_cache"
    / "xdg"
    / os.environ.get("PYTEST_XDIST_WORKER", "main")
)

import pytest  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parent.parent
DATA = REPO / "data"


@pytest.fixture(scope="session")
def data_dir() -> pathlib.Path:
    """The real sample data bundled with the repository (see data/README.md)."""
    return DATA
