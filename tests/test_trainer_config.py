"""TrainConfig: flags, config files (JSON/YAML), flags overriding the file, --help, one-line
errors."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from alx_trainer.cli import commands
from alx_trainer.cli.common import parse_dataclass_args
from alx_trainer.config import TrainConfig

import reference_ials as ref
from conftest import REPO


def test_flags_file_and_override(tmp_path):
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("dim: 32\nsolver: lu\nreg: 2\ntied: true\neval_k: [10, 20]\n")
    config = parse_dataclass_args(
        TrainConfig, ["--config", str(cfg_file), "--dim", "16", "--data", "d", "--model_dir", "m"]
    )
    assert config.dim == 16  # flag wins
    assert (
        config.solver == "lu"
        and config.reg == 2.0
        and isinstance(config.reg, float)
        and config.tied
    )
    assert config.recall_ks() == [10, 20]
    json_file = tmp_path / "c.json"
    json_file.write_text(json.dumps({"tied": True, "alpha": 0.5}))
    config = parse_dataclass_args(TrainConfig, ["--config", str(json_file), "--no-tied"])
    assert config.tied is False and config.alpha == 0.5
    assert parse_dataclass_args(TrainConfig, []) == TrainConfig()


def test_help_documents_every_field():
    out = subprocess.run(
        [sys.executable, "-m", "alx_trainer", "train", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for field in dataclasses.fields(TrainConfig):
        assert f"--{field.name}" in out
        assert field.metadata["help"], field.name
    assert "--config" in out


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--data", "x", "--model_dir", "m", "--solver", "svd"], "solver: must be one of"),
        (["--data", "x", "--model_dir", "m", "--dim", "0"], "dim: must be positive"),
        (["--model_dir", "m"], "data: required"),
        (["--data", "x", "--model_dir", "m", "--batch_rows", "999"], "batch_rows"),
        (["--data", "x", "--model_dir", "m", "--eval_k", "a,b"], "eval_k"),
        (["--config", "/nonexistent.json"], "config file not found"),
        (
            ["--data", "x", "--model_dir", "m", "--reg", "inf"],
            "reg: must be a finite number >= 0, got inf",
        ),
        (
            ["--data", "x", "--model_dir", "m", "--reg", "nan"],
            "reg: must be a finite number >= 0, got nan",
        ),
        (["--data", "x", "--model_dir", "m", "--alpha=-inf"], "alpha: must be a finite number"),
        (
            ["--data", "x", "--model_dir", "m", "--init_stddev", "inf"],
            "init_stddev: must be a finite",
        ),
        (
            ["--data", "x", "--model_dir", "m", "--solver", "block", "--cpu_devices", "2"],
            "cpu_devices: solver 'block'",
        ),
        (
            ["--data", "x", "--model_dir", "m", "--solver", "cholesky", "--cpu_devices", "2"],
            "calls LAPACK potrf",
        ),
        (
            ["--data", "x", "--model_dir", "m", "--accelerator", "yes"],
            "accelerator: must be one of",
        ),
        (
            ["--data", "x", "--model_dir", "m", "--accelerator", "on", "--layout", "owner"],
            "'owner' is the per-core",
        ),
        (
            ["--data", "x", "--model_dir", "m", "--matmul_precision", "fp8"],
            "matmul_precision: must be one of",
        ),
    ],
)
def test_bad_config_is_a_one_line_usage_error(argv, message, capsys):
    assert commands.main_train(argv) == 2
    err = capsys.readouterr().err.strip()
    assert (
        message in err
        and len(err.splitlines()) == 1
        and err.startswith("alx_trainer train: error:")
    )


def test_bad_config_file_keys_and_values(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"dimm": 3}')
    assert commands.main_train(["--config", str(bad)]) == 2
    assert "unknown config key 'dimm'" in capsys.readouterr().err
    bad.write_text('{"dim": "x"}')
    assert commands.main_train(["--config", str(bad)]) == 2
    assert "dim: expected int" in capsys.readouterr().err
    bad.write_text("{not json")
    assert commands.main_train(["--config", str(bad)]) == 2
    assert "cannot parse config file" in capsys.readouterr().err


def _dataset(tmp_path):
    rows = ref.random_rows(0, 12, 10, max_len=4)
    return ref.write_dataset(str(tmp_path / "data"), rows, 12, 10), rows


def test_missing_corrupt_and_non_contract_data(tmp_path, capsys):
    common = ["--model_dir", str(tmp_path / "m"), "--dim", "4", "--epochs", "1", "--no-progress"]
    assert commands.main_train(["--data", str(tmp_path / "nowhere")] + common) == 1
    assert "no such dataset directory" in capsys.readouterr().err

    data_dir, _ = _dataset(tmp_path)
    os.remove(os.path.join(data_dir, "stats.json"))
    assert commands.main_train(["--data", data_dir] + common) == 1
    assert "no stats.json" in capsys.readouterr().err

    data_dir, _ = _dataset(tmp_path)
    shard = os.path.join(data_dir, "train.tfr-00001-of-00002")
    with open(shard, "r+b") as f:
        f.seek(20)
        f.write(b"\xff\xff\xff\xff")
    assert commands.main_train(["--data", data_dir] + common) == 1
    err = capsys.readouterr().err.strip()
    assert "train.tfr-00001-of-00002" in err and "corrupt" in err and len(err.splitlines()) == 1

    rows = {0: [1, 2], 1: [9]}
    # column 9 outside num_cols = 5
    data_dir = ref.write_dataset(str(tmp_path / "small"), rows, 2, 5)
    assert commands.main_train(["--data", data_dir] + common) == 1
    assert "col_tag 9 outside [0, 5)" in capsys.readouterr().err


def test_cli_trains_and_writes_metrics_and_tensorboard(tmp_path, capsys):
    data_dir, _ = _dataset(tmp_path)
    model_dir = tmp_path / "m"
    argv = [
        "--data",
        data_dir,
        "--model_dir",
        str(model_dir),
        "--dim",
        "4",
        "--epochs",
        "2",
        "--piece_len",
        "2",
        "--batch_pieces",
        "4",
        "--checkpoint_every",
        "1",
        "--keep_checkpoints",
        "1",
    ]
    assert commands.main_train(argv) == 0
    out = capsys.readouterr().out
    assert "trained 2 epoch(s)" in out
    lines = [json.loads(x) for x in (model_dir / "metrics.jsonl").read_text().splitlines()]
    assert f"loss {lines[-1]['loss']:.6g}" in out  # the summary is the last epoch's
    assert [r["epoch"] for r in lines] == [1, 2]
    for key in (
        "loss",
        "loss_observed",
        "loss_unobserved",
        "loss_reg_row",
        "loss_reg_col",
        "seconds",
        "row_seconds",
    ):
        assert np.isfinite(lines[-1][key])
    assert lines[1]["loss"] <= lines[0]["loss"] * (1 + 1e-6)  # ALS never increases the objective
    assert any(
        p.name.startswith("events.out.tfevents") for p in (model_dir / "tensorboard").iterdir()
    )
    assert sorted(p.name for p in (model_dir / "checkpoints").iterdir() if p.name.isdigit()) == [
        "2"
    ]
    assert json.loads((model_dir / "config.json").read_text())["dim"] == 4


def test_cli_splits_the_cpu_only_for_collective_free_runs(tmp_path):
    """The command line makes one JAX device per core for CG (matrix-free, 'owner' layout), one
    device otherwise
    (the exact and block solvers call LAPACK, which deadlocked on per-core devices; the accelerator
    path's
    layouts have collectives)."""
    data_dir, _ = _dataset(tmp_path)
    # not the test session's 8 virtual devices
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    common = ["--data", data_dir, "--dim", "4", "--epochs", "1", "--no-progress"]
    # its layouts have collectives
    cases = (
        # a small problem (execution.SMALL_PROBLEM_LINKS): one device, one program an epoch
        ([], 1),
        (["--accelerator", "off"], os.cpu_count()),
        (["--solver", "cholesky"], 1),
        (["--solver", "block"], 1),
        (["--cpu_devices", "3"], 3),
        (["--accelerator", "on"], 1),
    )
    for k, (extra, devices) in enumerate(cases):
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "alx_trainer",
                "train",
                "--model_dir",
                str(tmp_path / str(k)),
                *common,
                *extra,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, run.stderr[-2000:]
        assert f"on {devices} device(s) in 1 process(es)" in run.stdout


def test_default_start_is_scaled_by_one_over_sqrt_dim():
    """init_stddev 0 (the default) draws the start from N(0, 0.1/sqrt(dim)); a given value is used
    as is."""
    from alx_trainer.execution import make_mesh
    from alx_trainer.model import init_tables

    mesh = make_mesh()
    for dim in (16, 1024):
        tables = init_tables(TrainConfig(data="x", model_dir="m", dim=dim), 3000, 8, mesh)
        rows = np.asarray(tables["row"])[:3000]
        assert np.std(rows) == pytest.approx(0.1 / np.sqrt(dim), rel=0.05)
        assert np.median(np.linalg.norm(rows, axis=1)) == pytest.approx(0.1, rel=0.05)
    given = init_tables(
        TrainConfig(data="x", model_dir="m", dim=1024, init_stddev=0.1), 3000, 8, mesh
    )
    assert np.std(np.asarray(given["row"])[:3000]) == pytest.approx(0.1, rel=0.05)
