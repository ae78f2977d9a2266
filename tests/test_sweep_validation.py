"""The sweep tunes on the validation split only, in one process, then reports the best point on
test."""

import json
import os
import shutil

import numpy as np
import pytest
from alx_cli import run_cli as _run_cli

from alx_trainer.cli.commands import main_sweep
from alx_trainer.config import TrainConfig
from alx_trainer.evaluation.evaluate import Ranking, evaluate_dataset
from alx_trainer.model import load_model
from alx_trainer.tools import sweep
from alx_trainer.train import train

from pipeline_data import gowalla_dataset


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """The Gowalla excerpt with validation splits, and a copy without its test split."""
    root = tmp_path_factory.mktemp("sweep")
    full = root / "full"
    gowalla_dataset(full, num_shards=1, validation_fraction=0.25)
    blind = root / "no_test"
    shutil.copytree(full, blind)
    for path in blind.glob("test.tfr-*"):
        path.unlink()
    # a consistent test-less dataset (missing shards that stats.json counts are refused before
    # training)
    stats = json.loads((blind / "stats.json").read_text())
    stats["splits"]["test"] = 0
    stats["file_sha256"] = {
        name: digest
        for name, digest in stats["file_sha256"].items()
        if not name.startswith("test.")
    }
    (blind / "stats.json").write_text(json.dumps(stats))
    return str(full), str(blind)


def test_sweep_reads_no_test_reuses_compiled_steps_and_resumes(datasets, tmp_path):
    _, blind = datasets  # without test files: tuning that read test would fail
    base = TrainConfig(
        data=blind, model_dir=str(tmp_path), epochs=2, eval_k="20", ndcg_k=20, progress=False
    )
    calls = []

    def counted_train(config, **kw):
        assert config.validation  # every tuning run trains on validation_train
        calls.append((config.dim, config.alpha, config.reg))
        return train(config, **kw)

    out = str(tmp_path / "sweep")
    rows = sweep.run_sweep(
        base, out, [8], [0.01, 0.1], [0.1], [1.0], train_fn=counted_train, log=lambda s: None
    )
    assert len(calls) == 2 and len(rows) == 4  # 2 points x 2 epochs
    assert sorted({r["epochs"] for r in rows}) == [1.0, 2.0]
    assert {"recall@20", "recall_gt@20", "ndcg@20", "cold/recall_gt@20"} <= set(rows[0])
    # the second point has the first one's shapes: no new compilation
    second = [r for r in rows if r["alpha"] == 0.1]
    assert second and all(r["compiles"] == 0 for r in second)
    rows = sweep.run_sweep(
        base, out, [8], [0.01, 0.1], [0.1, 1.0], [1.0], train_fn=counted_train, log=lambda s: None
    )
    assert len(rows) == 8 and sorted(calls[2:]) == [
        (8, 0.01, 1.0),
        (8, 0.1, 1.0),
    ]  # only the new points ran
    assert not os.listdir(os.path.join(out, "models"))  # models are not kept unless asked


def test_sweep_command_picks_the_best_validation_point_and_reports_it_on_test(datasets, tmp_path):
    full, _ = datasets
    out = str(tmp_path / "sweep")
    rc, text, err = _run_cli(
        [
            "sweep",
            "--data",
            full,
            "--out_dir",
            out,
            "--dims",
            "4,8",
            "--alphas",
            "0.01,0.1",
            "--lambdas",
            "0.1",
            "--nus",
            "1",
            "--epochs",
            "2",
            "--eval_k",
            "20",
            "--ndcg_k",
            "20",
            "--no-progress",
        ]
    )
    assert rc == 0, err
    assert "[4/4]" in err  # progress on stderr
    with open(os.path.join(out, sweep.RESULTS_JSON)) as f:
        saved = json.load(f)
    table = sweep.read_results(os.path.join(out, sweep.RESULTS_CSV))
    assert len(table) == len(saved["rows"]) == 8  # 2 d x 2 alpha x 2 epochs
    top = max(table, key=lambda r: r["recall_gt@20"])  # the first of the highest in its own table
    assert saved["best"] == top
    assert f"recall_gt@20={top['recall_gt@20']:.4f}" in text
    # the final run: the best point on the full training data, evaluated on test
    final = saved["final"]
    assert final["point"] == {k: saved["best"][k] for k in sweep.POINT + ("epochs",)}
    model = load_model(final["model_dir"])
    assert model.epoch == int(saved["best"]["epochs"]) and model.col_table.shape[1] == int(
        saved["best"]["dim"]
    )
    assert not model.config.validation
    again = evaluate_dataset(model, full, ranking=Ranking(ks=(20,), ndcg_k=20))
    assert final["test"]["recall_gt@20"] == pytest.approx(again["recall_gt@20"])
    assert final["test"]["num_rows"] == 40 and "cold/recall_gt@20" in final["test"]
    with open(os.path.join(out, sweep.BEST_CONFIG)) as f:
        tuned = json.load(f)
    assert (tuned["dim"], tuned["alpha"], tuned["reg"], tuned["reg_exponent"], tuned["epochs"]) == (
        saved["best"]["dim"],
        saved["best"]["alpha"],
        saved["best"]["lambda"],
        saved["best"]["nu"],
        saved["best"]["epochs"],
    )
    with open(os.path.join(out, sweep.HEATMAP_PNG), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert np.isfinite(final["seconds_per_epoch"])


def test_sweep_needs_the_validation_split(tmp_path):
    data = tmp_path / "plain"
    gowalla_dataset(data, num_shards=1)
    rc, _, err = _run_cli(
        [
            "sweep",
            "--data",
            str(data),
            "--out_dir",
            str(tmp_path / "s"),
            "--alphas",
            "0.1",
            "--lambdas",
            "0.1",
            "--epochs",
            "1",
            "--no-progress",
        ]
    )
    assert rc == 1
    assert "no 'validation_train' split" in err and "--validation_fraction" in err


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--alphas", "-1"], "argument --alphas: expected comma-separated non-negative numbers"),
        (["--alphas", "x"], "argument --alphas: expected comma-separated numbers"),
        (["--lambdas", ","], "argument --lambdas: expected comma-separated non-negative"),
        (["--nus", "inf"], "argument --nus: expected comma-separated non-negative"),
        (["--dims", "4.5"], "argument --dims: expected comma-separated integers"),
        (["--metric", "ndcg@50"], "--metric 'ndcg@50': the sweep's evaluation (--eval_k 20,"),
        (["--metric", "foo"], "records recall@20, recall_gt@20, recall@50"),
    ],
)
def test_bad_grid_or_metric_is_a_usage_error_before_training(
    datasets, tmp_path, capsys, flags, named
):
    full, _ = datasets
    out = tmp_path / "sweep"
    try:  # argparse exits; a bad metric, known once train's flags are read, returns 2
        rc = main_sweep(
            ["--data", full, "--out_dir", str(out), "--epochs", "1", "--no-progress", *flags]
        )
    except SystemExit as e:
        rc = e.code
    text, err = capsys.readouterr()
    assert rc == 2 and text == "" and len(err.strip().splitlines()) == 1 and named in err, err
    assert not out.exists()  # nothing trained, nothing written
