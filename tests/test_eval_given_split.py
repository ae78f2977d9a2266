"""On a given split the test users are training rows: evaluation scores their trained rows, not a
fold-in."""

import numpy as np
import pytest
from alx_cli import run_cli as _run_cli

from alx_trainer.config import TrainConfig
from alx_trainer.evaluation.evaluate import Ranking, evaluate_dataset
from alx_trainer.train import train
from webgraph_contract.dataset_reader import read_split

from pipeline_data import gowalla_dataset

K = 20


@pytest.fixture(scope="module")
def given(tmp_path_factory):
    """The Gowalla excerpt as a given split, and a model whose 1-step CG rows are far from a 1-step
    fold-in."""
    root = tmp_path_factory.mktemp("given")
    data = str(root / "data")
    gowalla_dataset(data, num_shards=1)
    config = TrainConfig(
        data=data,
        model_dir=str(root / "model"),
        dim=16,
        epochs=3,
        alpha=0.1,
        reg=0.5,
        cg_iters=1,
        eval_every=0,
        progress=False,
        eval_k="20",
        ndcg_k=K,
    )
    return data, train(config)


def reference(users: np.ndarray, items: np.ndarray, rows) -> dict[str, float]:
    """float64 NumPy: each test user's own row scores every item, training items excluded, top K."""
    scores = users.astype(np.float64) @ items.astype(np.float64).T
    recall, ndcg = [], []
    for row, seen, gt in rows:
        s = scores[row].copy()
        s[seen] = -np.inf
        top = np.argsort(-s, kind="stable")[:K]
        hit = np.isin(top, gt)
        recall.append(hit.sum() / len(gt))
        ideal = np.sum(1 / np.log2(np.arange(2, min(K, len(gt)) + 2)))
        ndcg.append(np.sum(hit / np.log2(np.arange(2, K + 2))) / ideal)
    return {"recall_gt@20": float(np.mean(recall)), "ndcg@20": float(np.mean(ndcg))}


def test_given_split_scores_the_trained_rows(given):
    data, model = given
    rows = read_split(data, "test")
    want = reference(model.row_table, model.col_table, rows)
    got = evaluate_dataset(model, data, ranking=Ranking(ks=(K,), ndcg_k=K))
    assert got["trained_rows"] == 1
    assert got["recall_gt@20"] == pytest.approx(want["recall_gt@20"], abs=1e-9)
    assert got["ndcg@20"] == pytest.approx(want["ndcg@20"], abs=1e-6)
    # a 1-step CG fold-in from zero is another model: the old default scored that
    folded = evaluate_dataset(model, data, ranking=Ranking(ks=(K,), ndcg_k=K), trained_rows=False)
    assert folded["trained_rows"] == 0
    assert abs(folded["ndcg@20"] - want["ndcg@20"]) > 1e-3


def test_eval_command_scores_trained_rows_unless_fold_in(given):
    data, model = given
    model_dir = model.config.model_dir
    rc, out, _ = _run_cli(
        ["eval", "--data", data, "--model_dir", model_dir, "--k", "20", "--ndcg_k", "20"]
    )
    assert rc == 0 and "scored from their trained rows" in out
    rc, out, _ = _run_cli(
        [
            "eval",
            "--data",
            data,
            "--model_dir",
            model_dir,
            "--k",
            "20",
            "--ndcg_k",
            "20",
            "--fold_in",
        ]
    )
    assert rc == 0 and "by folding them in from their fold-in items" in out
