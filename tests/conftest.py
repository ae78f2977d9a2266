"""Shared test set-up: 8 virtual CPU devices for JAX, and paths to the bundled real data."""

import atexit
import os
import pathlib
import shutil
import tempfile

# Must happen before JAX is imported anywhere in the test session.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Commands run in-process turn JAX's compilation cache on ('auto': under XDG_CACHE_HOME): a fresh
# directory of this test process (one per pytest-xdist worker, so two workers never write the same
# cache entry at once), not the user's home, and removed at exit: no run depends on programs an
# earlier run of other code left cached, as a clean clone's never does.
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="alx-tests-cache-")
atexit.register(shutil.rmtree, os.environ["XDG_CACHE_HOME"], True)

import pytest  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parent.parent
DATA = REPO / "data"


@pytest.fixture(scope="session")
def data_dir() -> pathlib.Path:
    """The real sample data bundled with the repository (see data/README.md)."""
    return DATA
