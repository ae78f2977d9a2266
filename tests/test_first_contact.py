"""First contact (issue 26): each command prints what matters, one line per error, a hint where
users slip.

Through the real command lines in subprocesses, in the environment a user has: none of the
settings conftest.py makes for the test session (TF_CPP_MIN_LOG_LEVEL, XLA_FLAGS, JAX_PLATFORMS).
The demo's own line budget is checked in test_demo.py (one demo run serves both).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from alx_trainer.evaluation import metrics
from alx_trainer.evaluation.evaluate import format_metrics
from alx_trainer.tools.sweep import _grid, cell_digits, format_table
from webgraph_pipeline.cli import counter_lines
from webgraph_pipeline.edge_formats import EdgeFormat, header_hint

from conftest import REPO

# What the libraries print when nobody holds them back: TensorFlow/XLA/absl C++ logs, Beam,
# tensorboardX.
LIBRARY_LINE = re.compile(
    r"^[IWEF]\d{4} |All log messages before absl|cpu_feature_guard|To enable the following "
    r"instructions|"
    r"apitools|apache_beam|native_type_compatibility|PrismRunner|semi_persistent_directory|Control "
    r"channel|"
    r"tensorboardX|^(INFO|WARNING)\["
)
USER_ENV_DROPS = (
    "TF_CPP_MIN_LOG_LEVEL",
    "XLA_FLAGS",
    "JAX_PLATFORMS",
    "WEBGRAPH_DEBUG",
    "WEBGRAPH_DEBUG",
)


def user_env() -> dict[str, str]:
    """The environment of a user's shell: the test session's own settings removed."""
    return {k: v for k, v in os.environ.items() if k not in USER_ENV_DROPS}


def command(*args: str, cwd=REPO, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=user_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def library_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if LIBRARY_LINE.search(line)]


# ---- one line per error: (command line, exit status, the whole of stderr)
# -------------------------------

ERRORS = [
    (
        ["-m", "alx_trainer"],
        2,
        "alx_trainer: error: missing command; one of train, eval, sweep, predict, export (--help "
        "for each)",
    ),
    (
        ["-m", "alx_trainer", "trian"],
        2,
        "alx_trainer: error: unknown command 'trian' (did you mean train?); one of train, eval, "
        "sweep, predict, export",
    ),
    (
        ["-m", "alx_trainer", "train", "--data", "D", "--model_dir", "M", "--dimm", "64"],
        2,
        "alx_trainer train: error: unknown flag --dimm (did you mean --dim?)",
    ),
    (
        ["-m", "alx_trainer", "eval", "--data", "D", "--model_dir", "M", "--kk", "20"],
        2,
        "alx_trainer eval: error: unknown flag --kk (did you mean --k?)",
    ),
    (
        ["-m", "alx_trainer", "predict", "--model_dir", "M", "--data", "D", "--neigbors", "x"],
        2,
        "alx_trainer predict: error: unknown flag --neigbors (did you mean --neighbors?)",
    ),
    (
        ["-m", "alx_trainer", "sweep", "--out_dir", "O", "--data", "D", "--dimss", "64"],
        2,
        "alx_trainer sweep: error: unknown flag --dimss (did you mean --dims?)",
    ),
    (
        ["-m", "alx_trainer", "eval", "--data", "D", "--model_dir", "M"],
        1,
        "alx_trainer eval: error: M: model directory not found; give the --model_dir of a `train` "
        "run",
    ),
    (
        ["-m", "webgraph_pipeline", "--input", "E", "--output", "O", "--min_link", "2"],
        2,
        "webgraph_pipeline: error: unknown flag --min_link (did you mean --min_links?)",
    ),
    (
        ["-m", "webgraph_pipeline", "--input", "E", "--output", "O", "--runer", "DirectRunner"],
        2,
        "webgraph_pipeline: error: unknown flag --runer (did you mean --runner?)",
    ),
    (
        ["-m", "webgraph_pipeline", "--input", "/nonexistent/*.wat", "--output", "O"],
        2,
        "webgraph_pipeline: error: --input '/nonexistent/*.wat': no file matches",
    ),
    (
        [
            "-m",
            "webgraph_pipeline.wat_writer",
            "--synthetic_pages",
            "10",
            "--output",
            "O",
            "--records",
            "5",
        ],
        2,
        "webgraph_pipeline.wat_writer: error: unknown flag --records (did you mean "
        "--records_per_file?)",
    ),
]


@pytest.mark.parametrize(
    "args, status, stderr", ERRORS, ids=[" ".join(a[1:3]) for a, _, _ in ERRORS]
)
def test_each_error_is_one_line_with_its_prefix(args, status, stderr, tmp_path):
    (tmp_path / "edges.txt").write_text("1 2\n")
    names = {
        "D": str(tmp_path / "data"),
        "M": str(tmp_path / "model"),
        "E": str(tmp_path / "edges.txt"),
        "O": str(tmp_path / "out"),
    }
    run = command(*[names.get(a, a) for a in args], cwd=tmp_path)
    want = stderr.replace("M:", names["M"] + ":")
    assert (run.returncode, run.stderr.splitlines()) == (status, [want])
    assert run.stdout == ""


TWO_WORKER_PROCESSES = ("--direct_running_mode", "multi_processing", "--direct_num_workers", "2")


def test_a_failing_multi_process_job_says_why_in_one_line(tmp_path):
    """The worker processes start through webgraph_pipeline.beam_worker (Beam imported quietly) and
    log errors only (--default_sdk_harness_log_level): stderr is the job's one error line."""
    (tmp_path / "edges.txt").write_text("# nothing but a comment\n")
    run = command(
        "-m",
        "webgraph_pipeline",
        "--edge_format",
        "pairs",
        "--input",
        str(tmp_path / "edges.txt"),
        "--output",
        str(tmp_path / "out"),
        *TWO_WORKER_PROCESSES,
        cwd=tmp_path,
    )
    lines = run.stderr.splitlines()  # was 44 lines or more: every worker's INFO and WARNING log
    assert run.returncode == 1 and len(lines) == 1, lines
    assert lines[0].startswith("webgraph_pipeline: error: ") and "no edge read" in lines[0]


def test_a_multi_process_job_prints_nothing_from_its_workers(data_dir, tmp_path):
    """A successful job on two worker processes: nothing on stderr, the report on stdout, and the
    same dataset as a single-process run of the same command."""
    base = [
        "-m",
        "webgraph_pipeline",
        "--edge_format",
        "pairs",
        "--header",
        "--input",
        str(data_dir / "hollins" / "edges.txt"),
        "--urls",
        str(data_dir / "hollins" / "urls.txt"),
        "--min_links",
        "2",
        "--num_shards",
        "1",
    ]
    run = command(*base, "--output", str(tmp_path / "two"), *TWO_WORKER_PROCESSES, cwd=tmp_path)
    assert run.returncode == 0 and run.stderr == "", run.stderr
    assert run.stdout.splitlines()[-1] == f"wrote {tmp_path / 'two'}"
    single = command(*base, "--output", str(tmp_path / "one"), cwd=tmp_path)
    assert single.returncode == 0, single.stderr
    two, one = (json.loads((tmp_path / d / "stats.json").read_text()) for d in ("two", "one"))
    assert (two["nodes"], two["edges"], two["splits"]) == (
        one["nodes"],
        one["edges"],
        one["splits"],
    )
    assert two["dataset_fingerprint"] == one["dataset_fingerprint"]


def test_tfds_builder_build_verbose_keeps_the_dataset_info(data_dir, tmp_path):
    """`python -m tfds_builder build --verbose` is `tfds build` as TFDS prints it: the DatasetInfo,
    not
    the short summary of the default (which test_demo.py checks)."""
    dataset = tmp_path / "dataset"
    pipeline = command(
        "-m",
        "webgraph_pipeline",
        "--edge_format",
        "pairs",
        "--header",
        "--input",
        str(data_dir / "hollins" / "edges.txt"),
        "--min_links",
        "2",
        "--num_shards",
        "1",
        "--output",
        str(dataset),
        cwd=tmp_path,
    )
    assert pipeline.returncode == 0, pipeline.stderr
    config = json.dumps({"name": "hollins", "min_links": 2})
    run = command(
        "-m",
        "tfds_builder",
        "build",
        "tfds_builder/web_graph",
        f"--config={config}",
        f"--manual_dir={dataset}",
        f"--data_dir={tmp_path / 'tfds'}",
        "--beam_pipeline_options=runner=DirectRunner",
        "--verbose",
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "tfds.core.DatasetInfo(" in run.stdout
    assert not [
        line for line in run.stdout.splitlines() if line.startswith("web_graph/hollins/1.0.0: ")
    ]


def test_brief_counters_sum_each_kind_of_drop():
    counters = {
        "files.read": 2,
        "dropped_links.self_loop": 5,
        "dropped_links.duplicate": 7,
        "links.kept": 1234,
        "dropped_nodes.degree_filter": 3,
    }
    assert counter_lines(counters, brief=True) == [
        "counters: files.read 2, links.kept 1,234",
        "dropped (each reason in stats.json): links 12 (2 reasons), nodes 3 (1 reason)",
    ]
    many = {f"a_rather_long_counter_name.number_{i}": i for i in range(8)}
    lines = counter_lines(many, brief=True)
    assert len(lines) > 1 and all(len(line) <= 100 for line in lines)
    assert " ".join(line.strip() for line in lines) == "counters: " + ", ".join(
        f"{k} {v}" for k, v in many.items()
    )
    assert counter_lines(counters)[1:] == [f"  {k:<27}  {v:>12,}" for k, v in counters.items()]
    assert counter_lines({"dropped_urls.bad": 1}, brief=True) == [
        "dropped (each reason in stats.json): urls 1 (1 reason)"
    ]
    assert (
        counter_lines({}, brief=True)
        == counter_lines({})
        == ["counters (webgraph namespace):", "  (none)"]
    )


# ---- a hint where users slip: a header line read as data
# --------------------------------------------------


def test_header_hint_fires_on_hollins_without_header_and_not_with_it(data_dir, tmp_path):
    edges, urls = data_dir / "hollins" / "edges.txt", data_dir / "hollins" / "urls.txt"
    base = [
        "-m",
        "webgraph_pipeline",
        "--edge_format",
        "pairs",
        "--input",
        str(edges),
        "--urls",
        str(urls),
        "--min_links",
        "2",
        "--num_shards",
        "1",
    ]
    run = command(*base, "--output", str(tmp_path / "no_header"))
    assert run.returncode == 0, run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 2 and all(
        line.startswith("webgraph_pipeline: warning: ") for line in lines
    )
    first_lines = {
        str(edges): edges.read_text().splitlines()[0],
        str(urls): urls.read_text().splitlines()[0],
    }
    for path, first in first_lines.items():
        (line,) = [x for x in lines if f"{path}:1: {first!r} looks like a header" in x]
        assert "--header" in line
    hints = json.loads((tmp_path / "no_header" / "stats.json").read_text())["header_hints"]
    assert sorted(h["where"] for h in hints) == sorted([f"--urls {urls}:1", f"{edges}:1"])
    run = command(*base, "--header", "--output", str(tmp_path / "header"))
    assert run.returncode == 0 and run.stderr == ""
    assert json.loads((tmp_path / "header" / "stats.json").read_text())["header_hints"] == []


@pytest.mark.parametrize(
    "path, fmt, skip",
    [
        (
            "hollins/edges.txt",
            EdgeFormat("pairs"),
            1,
        ),  # its header line taken off: the data is looked at
        ("ml-100k/u.data", EdgeFormat("movielens"), 0),
        ("ml-1m-implicit/train.txt", EdgeFormat("adjacency"), 0),
        ("ml-1m-implicit/test.txt", EdgeFormat("adjacency"), 0),
    ],
)
def test_header_hint_is_quiet_on_correct_inputs(data_dir, path, fmt, skip):
    data = (data_dir / path).read_bytes().split(b"\n", skip)[skip]
    assert header_hint(data, fmt) is None and header_hint(data, fmt, url_ids=True) is None
    # a header the reader is told to skip (--header) is no hint
    assert (
        header_hint((data_dir / path).read_bytes(), dataclasses.replace(fmt, header=True)) is None
    )


def test_header_hint_by_hand():
    # words over numbers, in any column; URLs count as ids like numbers do
    assert header_hint(b"user item rating time\n1 2 5 9\n3 4 3 9\n", EdgeFormat("movielens"))[
        :2
    ] == (1, "user item rating time")
    assert header_hint(
        b"# a comment\n\nsrc dst\nhttp://a/ http://b/\nhttp://b/ http://c/\n", EdgeFormat("pairs")
    )[:2] == (3, "src dst")
    assert header_hint(b"from,to,stars\n7,8,4.5\n9,7,3\n", EdgeFormat("csv"))[0] == 1
    # names over names cannot be told from a header; a lone line has nothing to compare with
    assert header_hint(b"src dst\nalice bob\nbob carol\n", EdgeFormat("pairs")) is None
    assert header_hint(b"start end\n", EdgeFormat("pairs")) is None
    # ids a --urls list must name are integers: a word id on line 1 cannot be named
    assert header_hint(b"x 1\n2 3\n", EdgeFormat("pairs"), url_ids=True)[0] == 1


# ---- numbers that explain themselves
# ----------------------------------------------------------------------


def test_an_empty_activity_bucket_is_left_out_not_nan():
    # fold-in sizes 3 and 20: cold and medium rows only, no heavy one (>= 64)
    topk = np.array([[1, 2], [3, 4]])
    got = metrics.bucket_metrics(
        topk, [np.array([1]), np.array([5, 3])], [3, 20], ks=(2,), ndcg_k=2
    )
    assert not any(k.startswith("heavy/") for k in got) and got["medium/rows"] == 1
    assert all(math.isfinite(v) for v in got.values())
    result = {
        "recall@2": 0.75,
        "recall_gt@2": 0.75,
        "ndcg@2": 0.8,
        **got,
        "num_rows": 2.0,
        "num_rows_with_gt": 2.0,
    }
    shown = format_metrics(result)
    assert "nan" not in shown.lower() and "heavy" not in shown.split("model:")[1]


def _sweep_rows(
    values: dict[tuple[float, float], float], epochs=(5.0, 10.0)
) -> list[dict[str, float]]:
    return [
        {
            "dim": 64.0,
            "alpha": a,
            "lambda": lam,
            "nu": 1.0,
            "epochs": e,
            "recall_gt@20": v - (10 - e) / 1000,
        }
        for (lam, a), v in values.items()
        for e in epochs
    ]


def test_sweep_counts_grid_points_and_the_heatmap_separates_its_cells():
    values = {
        (0.002, 0.01): 0.1644,
        (0.002, 0.005): 0.1639,
        (0.001, 0.01): 0.1500,
        (0.001, 0.005): 0.1401,
    }
    rows = _sweep_rows(values)
    table = format_table(rows)
    assert "top 8 of 8 rows (4 grid points x 2 evaluated epoch counts)" in table.splitlines()[0]
    lambdas, alphas, grid = _grid([r for r in rows if r["epochs"] == 10.0], "recall_gt@20")
    assert lambdas == sorted(lambdas) and alphas == sorted(alphas)  # ascending axes
    digits = cell_digits(grid)
    shown = {f"{v:.{digits}f}" for v in grid.ravel()}
    assert (
        len(shown) == 4 and "0.1644" in shown and "0.1639" in shown
    )  # 3 digits would print both as 0.164
    assert "0.1644*" in table  # the grid's best cell, marked, with the digits that separate it
