"""bfloat16 tables on real ML-1M stay finite; a numerical collapse stops training with a clear
message."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from alx_trainer.cli import commands
from alx_trainer.config import TrainConfig
from alx_trainer.execution import make_mesh
from alx_trainer.model import load_model
from alx_trainer.train import train

import reference_ials as ref
from pipeline_data import make_dataset


@pytest.fixture(scope="module")
def ml1m(tmp_path_factory, data_dir):
    out = tmp_path_factory.mktemp("ml1m") / "data"
    stats = make_dataset(
        out,
        "--edge_format",
        "adjacency",
        "--bipartite",
        "--input",
        data_dir / "ml-1m-implicit" / "train.txt",
        "--test_fraction",
        "0.05",
        "--num_shards",
        "2",
    )
    assert stats["splits"]["test"] > 200
    return str(out)


def test_bfloat16_tables_stay_finite_on_ml1m(ml1m, tmp_path):
    config = TrainConfig(
        data=ml1m,
        model_dir=str(tmp_path / "m"),
        dim=16,
        epochs=3,
        table_dtype="bfloat16",
        alpha=0.1,
        reg=1.0,
        init_stddev=0.1,
        progress=False,
        eval_k="20",
        batch_pieces=512,
    )
    model = train(config, mesh=make_mesh(jax.devices()[:2]))
    assert np.isfinite(model.row_table).all() and np.isfinite(model.col_table).all()
    assert np.abs(model.col_table).max() > 0.01  # trained, not collapsed to zero
    assert [r["epoch"] for r in model.metrics] == [1, 2, 3]
    losses = [r["loss"] for r in model.metrics]
    assert losses[-1] < losses[0]
    recall = model.metrics[-1]["recall@20"]  # per-epoch evaluation on the held-out users
    assert model.metrics[-1]["popularity/recall@20"] < recall < 1
    lines = [json.loads(x) for x in open(tmp_path / "m" / "metrics.jsonl")]
    assert all("recall@20" in r for r in lines)
    assert load_model(config.model_dir).row_table.dtype == np.float32


def test_collapse_stops_with_epoch_and_side(tmp_path, capsys):
    # No regularization and no unobserved weight: rows with fewer items than dim give singular
    # systems, and the Cholesky solve produces NaN in the first row half-epoch.
    rows = ref.random_rows(0, 20, 30, max_len=3)
    data_dir = ref.write_dataset(str(tmp_path / "data"), rows, 20, 30)
    argv = [
        "--data",
        data_dir,
        "--model_dir",
        str(tmp_path / "m"),
        "--dim",
        "8",
        "--epochs",
        "2",
        "--alpha",
        "0",
        "--reg",
        "0",
        "--solver",
        "cholesky",
        "--no-progress",
        "--table_dtype",
        "bfloat16",
        "--eval_every",
        "0",
    ]
    assert commands.main_train(argv) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "epoch 1, row half-epoch" in err and "NaN/Inf" in err


@pytest.mark.parametrize("n", [0, 1, 37, 1000])
def test_trimmed_tables_are_the_stored_values_widened(n):
    """`trim` takes a bfloat16 table to the host as itself and widens it there in threads: every
    real row as float32 equals the device's own conversion, whatever the thread split."""
    from alx_trainer.model import table_from_numpy, trim

    values = np.random.default_rng(5).normal(0, 3, (1000, 6)).astype(np.float32)
    for dtype in (jax.numpy.bfloat16, jax.numpy.float32):
        table = table_from_numpy(make_mesh(), values, dtype)
        got = trim(table, n)
        want = np.asarray(table.astype(jax.numpy.float32))[:n]
        assert got.dtype == np.float32 and got.shape == (n, 6)
        np.testing.assert_array_equal(got, want)
