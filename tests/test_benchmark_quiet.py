"""The benchmarks print their own results, not the libraries' chatter: the pipeline run in-process
(Beam's import-time `apitools not found` warning) and implicit's CPU model (its OpenBLAS-threads
warning) say nothing."""

import subprocess
import sys
import warnings

import pytest
from threadpoolctl import threadpool_info

from benchmarks.core import implicit_als
from benchmarks.core.paths import REPO

MAKE = (
    "import sys; from benchmarks.core import datasets; "
    "s = datasets.gowalla_split(sys.argv[1], sys.argv[2]); print('rows', s.num_rows)"
)


def test_pipeline_in_process_prints_no_beam_warning(tmp_path):
    src = tmp_path / "gowalla"
    src.mkdir()
    (src / "train.txt").write_text("".join(f"{u} {u % 7} {u % 5 + 7} 12\n" for u in range(20)))
    (src / "test.txt").write_text("".join(f"{u} {u % 3 + 13}\n" for u in range(20)))
    done = subprocess.run(
        [sys.executable, "-c", MAKE, str(tmp_path / "out"), str(src)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "rows 20" in done.stdout
    assert "apitools" not in done.stderr and "WARNING" not in done.stderr, done.stderr


@pytest.mark.skipif(
    not any(a["internal_api"] == "openblas" and a["num_threads"] > 1 for a in threadpool_info()),
    reason="implicit warns only where OpenBLAS runs more than one thread",
)
def test_implicit_cpu_model_is_built_without_blas_warning():
    import implicit.utils

    # it warns once a process
    implicit.utils._checked_blas_config = False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        implicit_als.implicit_model(8, 0.1, 2, 3)
    assert not [w for w in caught if "OpenBLAS" in str(w.message)]
