"""`sweep` keyed by what its results depend on: a rerun reuses only rows of the same dataset
and settings, says how many and why the others are retrained; `final/` likewise; flags it cannot
honour are refused (issue 44)."""

from __future__ import annotations

import csv
import json

import pytest
from alx_cli import run_cli

from alx_trainer.model import load_model
from alx_trainer.tools import sweep
from tests.pipeline_data import gowalla_dataset
from webgraph_contract import stats_json


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Two datasets of the Gowalla excerpt (validation splits of another size)."""
    root = tmp_path_factory.mktemp("guard_sweep")
    gowalla_dataset(root / "A", num_shards=1, validation_fraction=0.25)
    gowalla_dataset(root / "B", num_shards=1, validation_fraction=0.5)
    return root


def run_sweep(data_dir, out, *flags: str) -> tuple[str, str]:
    """`sweep` of 2 points of 1 epoch; (stdout, stderr)."""
    rc, text, err = run_cli(
        [
            "sweep",
            "--data",
            str(data_dir),
            "--out_dir",
            str(out),
            "--dims",
            "4",
            "--alphas",
            "0.01,0.1",
            "--lambdas",
            "0.1",
            "--epochs",
            "1",
            "--no-progress",
            *flags,
        ]
    )
    assert rc == 0, err
    return text, err


def fingerprint(path) -> str:
    return stats_json.read_stats(str(path))["dataset_fingerprint"]


def csv_rows(out) -> list[dict[str, str]]:
    with open(out / sweep.RESULTS_CSV, newline="") as f:
        return list(csv.DictReader(f))


def test_a_rerun_on_another_dataset_or_seed_retrains_every_point(data, tmp_path):
    out = tmp_path / "s"
    _, err = run_sweep(data / "A", out, "--no_final")
    assert err.count("done before") == 0
    _, err = run_sweep(data / "A", out, "--no_final")
    assert "2 of 2 points reused (same dataset and settings), 0 retrained" in err
    assert err.count("done before with the same dataset and settings, reused") == 2
    # another dataset: every point trained again, and only its rows remain
    _, err = run_sweep(data / "B", out, "--no_final")
    assert "0 of 2 points reused" in err and "2 retrained: another dataset" in err
    assert "dropped 2 row(s) of 2 point(s)" in err and "done before" not in err
    rows = csv_rows(out)
    assert len(rows) == 2 and {r["dataset"] for r in rows} == {fingerprint(data / "B")}
    # another seed, CG iterations, initial scale: the same
    _, err = run_sweep(
        data / "B", out, "--no_final", "--seed", "7", "--cg_iters", "1", "--init_stddev", "0.5"
    )
    assert "0 of 2 points reused" in err and "done before" not in err
    assert "seed 0 -> 7" in err and "cg_iters" in err and "init_stddev" in err
    rows = csv_rows(out)
    assert {(r["seed"], r["cg_iters"], r["init_stddev"]) for r in rows} == {("7", "1", "0.5")}
    # another setting without a column of its own (hashed): named from sweep_settings.json
    again = ["--seed", "7", "--cg_iters", "1", "--init_stddev", "0.5", "--ndcg_k", "10"]
    _, err = run_sweep(data / "B", out, "--no_final", *again)
    assert "0 of 2 points reused" in err and "ndcg_k 100 -> 10" in err


def test_csv_writes_integers_as_integers(data, tmp_path):
    out = tmp_path / "s"
    run_sweep(data / "A", out, "--no_final")
    rows = csv_rows(out)
    assert [(r["dim"], r["epochs"], r["max_epochs"], r["seed"]) for r in rows] == [
        ("4", "1", "1", "0")
    ] * 2
    assert all(r["compiles"].isdigit() for r in rows)
    assert all(r["solver"] and r["dataset"] == fingerprint(data / "A") for r in rows)


def test_final_of_other_settings_is_trained_again(data, tmp_path):
    out = tmp_path / "s"
    run_sweep(data / "A", out)
    assert load_model(str(out / "final")).config.solver != "cholesky"
    # another solver (whose tables are padded otherwise): the points and final/ trained again
    _, err = run_sweep(data / "A", out, "--solver", "cholesky")
    assert "0 of 2 points reused" in err and "solver" in err
    assert "final: of another point, dataset or settings" in err
    assert load_model(str(out / "final")).config.solver == "cholesky"
    record = json.loads((out / sweep.FINAL_JSON).read_text())
    assert record["key"]["solver"] == "cholesky"
    assert record["key"]["dataset"] == fingerprint(data / "A")
    # the same again: reused
    _, err = run_sweep(data / "A", out, "--solver", "cholesky")
    assert "2 of 2 points reused" in err and "trained again" not in err


@pytest.mark.parametrize(
    "flags, rc, named",
    [
        (["--dims", "4", "--dim", "8"], 2, "--dim and --dims"),
        (["--model_dir", "M"], 2, "--model_dir M: a sweep trains into --out_dir"),
        (["--eval_every", "0"], 2, "--eval_every 0 evaluates no point"),
    ],
)
def test_flags_a_sweep_cannot_honour_are_refused(data, tmp_path, flags, rc, named):
    out = tmp_path / "s"
    got, text, err = run_cli(
        ["sweep", "--data", str(data / "A"), "--out_dir", str(out), "--epochs", "1", *flags]
    )
    assert got == rc and text == "" and len(err.strip().splitlines()) == 1 and named in err, err
    assert not out.exists()


def test_out_dir_a_file_or_inside_the_data_is_refused(data, tmp_path):
    afile = tmp_path / "file"
    afile.write_text("mine")
    rc, _, err = run_cli(["sweep", "--data", str(data / "A"), "--out_dir", str(afile)])
    assert rc == 1 and err.strip() == (
        f"alx_trainer sweep: error: --out_dir {afile} is a file, not a directory; give a directory"
    )
    inside = data / "A" / "sweep"
    rc, _, err = run_cli(["sweep", "--data", str(data / "A"), "--out_dir", str(inside)])
    assert rc == 1 and len(err.strip().splitlines()) == 1
    assert "is inside the dataset directory" in err and not inside.exists()
