"""`alx_trainer.loading`: the model and its dataset for eval, predict and export, and the rows an
evaluation ranks, against the contract's reader."""

import dataclasses

import numpy as np
import pytest

from alx_trainer import loading
from alx_trainer.config import TrainConfig
from alx_trainer.evaluation.evaluate import evaluate_dataset
from alx_trainer.train import train
from tests.pipeline_data import make_dataset
from webgraph_contract import stats_json
from webgraph_contract.dataset_reader import read_split

NODES = 40
EDGES = "".join(f"n{s} n{(s + step) % NODES}\n" for s in range(NODES) for step in (1, 2, 5, 11))


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """Two datasets of one graph split with different seeds, one without a test split, and a
    model trained on the first."""
    base = tmp_path_factory.mktemp("loading")
    (base / "edges.txt").write_text(EDGES)
    flags = ["--edge_format", "pairs", "--input", base / "edges.txt", "--min_links", "1"]
    make_dataset(base / "A", *flags, "--test_fraction", "0.3")
    make_dataset(base / "B", *flags, "--test_fraction", "0.3", "--seed", "7")
    make_dataset(base / "C", *flags, "--test_fraction", "0")
    config = TrainConfig(
        data=str(base / "A"), model_dir=str(base / "model"), dim=4, epochs=1, eval_every=0
    )
    train(config)
    return base


def test_load_gives_the_model_and_its_dataset_and_refuses_another(work):
    model, dataset = loading.load(str(work / "model"), str(work / "A"))
    fingerprint = stats_json.read_stats(str(work / "A"))["dataset_fingerprint"]
    assert dataset.fingerprint == model.dataset_fingerprint == fingerprint
    assert loading.load(str(work / "model"))[1] is None
    with pytest.raises(Exception, match=r"trained on .*A, dataset"):
        loading.load(str(work / "model"), str(work / "B"))
    with pytest.raises(FileNotFoundError, match="model directory not found"):
        loading.load(str(work / "nothing"), str(work / "A"))


def test_load_reads_the_row_table_only_where_asked(work, tmp_path):
    full, _ = loading.load(str(work / "model"), str(work / "A"))
    assert full.row_table is not None
    # strong generalization: rows are folded in, the row table is not read (None or False)
    for row_table in (None, False):
        model, _ = loading.load(str(work / "model"), str(work / "A"), row_table=row_table)
        assert model.row_table is None
        np.testing.assert_array_equal(model.col_table, full.col_table)
    # a tied model's one table is its column table too
    config = TrainConfig(
        data=str(work / "A"), model_dir=str(tmp_path / "tied"), dim=4, epochs=1, eval_every=0
    )
    train(dataclasses.replace(config, tied=True))
    tied, _ = loading.load(str(tmp_path / "tied"), str(work / "A"))
    model, _ = loading.load(str(tmp_path / "tied"), str(work / "A"), row_table=False)
    np.testing.assert_array_equal(model.col_table, tied.col_table)
    np.testing.assert_array_equal(tied.row_table, tied.col_table)


def test_eval_data_are_the_test_records_and_the_training_popularity(work):
    data = loading.eval_data(str(work / "A"))
    records = read_split(str(work / "A"), "test")
    assert data.known.row_ids.tolist() == [r for r, _, _ in records]
    assert [c.tolist() for c in data.known.lists()] == [c.tolist() for _, c, _ in records]
    assert [g.tolist() for g in data.gt.lists()] == [g.tolist() for _, _, g in records]
    train_cols = np.concatenate([c for _, c, _ in read_split(str(work / "A"), "train")])
    np.testing.assert_array_equal(data.popularity, np.bincount(train_cols, minlength=NODES))
    assert data.shared
    assert len(loading.eval_data(str(work / "C")).known) == 0
    with pytest.raises(ValueError, match="no test rows to evaluate"):
        evaluate_dataset((None, np.ones((NODES, 4), np.float32)), str(work / "C"))
    with pytest.raises(ValueError, match="split: expected 'test' or 'validation'"):
        loading.eval_data(str(work / "A"), "train")
