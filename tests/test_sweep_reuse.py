"""A sweep plans the dataset once per d and reuses it across points: each point still trains with
its own alpha, lambda and nu (tables equal to the same point trained alone), and its cost is
recorded."""

import csv
import os

import numpy as np
import pytest

from alx_trainer.config import TrainConfig
from alx_trainer.model import load_model
from alx_trainer.tools import sweep
from alx_trainer.train import PER_RUN, prepare, train

import reference_ials as ref
from pipeline_data import gowalla_dataset

NUM_ROWS, NUM_COLS = 60, 90


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """Random rows, three of them longer than one batch of the configs below."""
    rows = ref.random_rows(0, NUM_ROWS, NUM_COLS, max_len=14, long_rows=[5, 17, 30])
    path = str(tmp_path_factory.mktemp("reuse") / "data")
    ref.write_dataset(path, rows, NUM_ROWS, NUM_COLS, shards=2)
    return path


@pytest.fixture(scope="module")
def gowalla(tmp_path_factory):
    """The Gowalla excerpt with validation splits."""
    path = tmp_path_factory.mktemp("sweep_reuse") / "data"
    gowalla_dataset(path, num_shards=1, validation_fraction=0.25)
    return str(path)


def _config(data: str, model_dir: str, **kw) -> TrainConfig:
    # 4 x 8 = 32 ids a batch: rows 5, 17 and 30 are solved as long rows
    base = {
        "data": data,
        "model_dir": model_dir,
        "dim": 6,
        "epochs": 2,
        "solver": "cg",
        "cg_iters": 3,
        "progress": False,
        "eval_every": 0,
        "init_stddev": 0.3,
        "piece_len": 4,
        "batch_pieces": 8,
        "batch_rows": 4,
    }
    base.update(kw)
    return TrainConfig(**base)


# (alpha, lambda, nu) of the point trained first, then of the point compared
FIRST, SECOND = (0.5, 0.8, 0.0), (0.05, 0.1, 1.0)


@pytest.mark.parametrize(
    "execution",
    [
        {},
        {"accelerator": "on"},
        {"accelerator": "on", "resident_batches": "off"},
        {"solver": "cholesky"},
    ],
    ids=["cpu", "one_call", "streamed", "cholesky"],
)
def test_prepared_run_equals_the_same_point_trained_alone(small, tmp_path, execution):
    def point(values, name):
        alpha, reg, nu = values
        return _config(
            small, str(tmp_path / name), alpha=alpha, reg=reg, reg_exponent=nu, **execution
        )

    prepared = prepare(point(FIRST, "prepared"))
    first = train(point(FIRST, "first"), prepared=prepared)
    # the runners planned for FIRST, given SECOND's config
    second = train(point(SECOND, "second"), prepared=prepared)
    alone = train(point(SECOND, "alone"))
    assert not np.allclose(first.col_table, alone.col_table)  # the points' tables differ
    np.testing.assert_array_equal(second.row_table, alone.row_table)
    np.testing.assert_array_equal(second.col_table, alone.col_table)
    assert second.metrics[-1]["loss"] == pytest.approx(alone.metrics[-1]["loss"], rel=1e-6)
    # the first point again, after the second: the same tables as its first run
    again = train(point(FIRST, "again"), prepared=prepared)
    np.testing.assert_array_equal(again.col_table, first.col_table)


def test_prepared_refuses_a_run_of_other_settings(small, tmp_path):
    prepared = prepare(_config(small, str(tmp_path / "p")))
    with pytest.raises(ValueError, match="--dim 6, this run has 8"):
        train(_config(small, str(tmp_path / "m"), dim=8), prepared=prepared)
    with pytest.raises(ValueError, match="--solver 'cg', this run has 'cholesky'"):
        train(_config(small, str(tmp_path / "m"), solver="cholesky"), prepared=prepared)
    assert {"alpha", "reg", "reg_exponent", "epochs", "model_dir"} <= PER_RUN
    assert not {"dim", "solver", "cg_iters", "table_dtype", "data", "validation"} & PER_RUN


def test_sweep_prepares_once_per_d_and_each_point_trains_as_alone(gowalla, tmp_path, monkeypatch):
    prepared = []

    def counted(config, *a, **kw):
        prepared.append(config.dim)
        return prepare(config, *a, **kw)

    monkeypatch.setattr(sweep, "prepare", counted)
    base = TrainConfig(
        data=gowalla,
        model_dir=str(tmp_path),
        epochs=2,
        eval_every=1,
        eval_k="20",
        ndcg_k=20,
        progress=False,
    )
    out = str(tmp_path / "sweep")
    lines = []
    rows = sweep.run_sweep(
        base, out, [4, 8], [0.01, 0.1], [0.1], [1.0], keep_models=True, log=lines.append
    )
    assert prepared == [4, 8]  # once per d
    assert len(rows) == 8  # 2 d x 2 alpha x 2 epochs
    for r in rows:
        assert r["init_seconds"] > 0 and r["train_seconds"] > 0 and r["eval_seconds"] > 0
    for a, b in zip(rows[::2], rows[1::2]):  # a point's epochs 1 and 2
        assert (a["epochs"], b["epochs"]) == (1, 2)
        assert a["init_seconds"] == b["init_seconds"]
        assert b["train_seconds"] > a["train_seconds"] and b["eval_seconds"] > a["eval_seconds"]
    trained = [line for line in lines if line.startswith("[")]
    assert len(trained) == 4 and all(
        " s (init " in line and "evaluation" in line for line in trained
    )
    # the second point of d=8 (prepared for the first): as the same point trained alone
    point = {"dim": 8, "alpha": 0.1, "lambda": 0.1, "nu": 1.0}
    kept = load_model(os.path.join(out, "models", sweep.point_key(point).replace("|", "_")))
    config = sweep.point_config(
        base, point, validation=True, model_dir=str(tmp_path / "alone"), checkpoint_every=0
    )
    alone = train(config)
    np.testing.assert_array_equal(kept.row_table, alone.row_table)
    np.testing.assert_array_equal(kept.col_table, alone.col_table)
    mine = [r for r in rows if sweep.point_key(r) == sweep.point_key(point)]
    assert [r["recall_gt@20"] for r in mine] == pytest.approx(
        [m["recall_gt@20"] for m in alone.metrics]
    )


def test_sweep_without_kept_models_saves_no_checkpoint(gowalla, tmp_path, monkeypatch):
    saved = []
    monkeypatch.setattr("alx_trainer.checkpoint.save", lambda *a, **k: saved.append(a[1]))
    base = TrainConfig(data=gowalla, model_dir=str(tmp_path), epochs=1, progress=False)
    sweep.run_sweep(base, str(tmp_path / "s"), [4], [0.1], [0.1], log=lambda s: None)
    assert saved == []
    sweep.run_sweep(
        base, str(tmp_path / "k"), [4], [0.1], [0.1], keep_models=True, log=lambda s: None
    )
    assert saved == [1]


def test_rows_of_an_older_sweep_without_the_cost_columns_are_reused(gowalla, tmp_path):
    base = TrainConfig(data=gowalla, model_dir=str(tmp_path), epochs=1, progress=False)
    out = str(tmp_path / "sweep")
    first = sweep.run_sweep(base, out, [4], [0.1], [0.1], log=lambda s: None)
    path = os.path.join(out, sweep.RESULTS_CSV)
    cost = ("init_seconds", "eval_seconds")
    with open(path, newline="") as f:
        old = [{k: v for k, v in r.items() if k not in cost} for r in csv.DictReader(f)]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(old[0]))
        writer.writeheader()
        writer.writerows(old)
    lines = []
    rows = sweep.run_sweep(base, out, [4], [0.1, 0.01], [0.1], log=lines.append)
    assert any("done before" in line for line in lines)  # the old row reused, not retrained
    assert len(rows) == 2
    by_alpha = {r["alpha"]: r for r in rows}
    assert np.isnan(by_alpha[0.1]["init_seconds"]) and by_alpha[0.01]["init_seconds"] > 0
    assert by_alpha[0.1]["recall_gt@20"] == first[0]["recall_gt@20"]
