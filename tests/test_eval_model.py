"""Evaluation, predictions and export with the real trainer on real data (hollins.edu, ML-100k)."""

import json
import os
from urllib.parse import urlsplit

import jax
import numpy as np
import pytest
from alx_cli import run_cli as _run_cli

from alx_trainer.cli.commands import main_eval
from alx_trainer.config import TrainConfig
from alx_trainer.evaluation.evaluate import Ranking, evaluate_dataset
from alx_trainer.model import fold_in, load_model
from alx_trainer.tools import predict
from alx_trainer.train import train
from tests import reference_ials
from webgraph_contract.dataset_reader import read_split, read_vocab
from webgraph_contract.ragged import RaggedRows

from pipeline_data import hollins_dataset, make_dataset


@pytest.fixture(scope="module")
def hollins(tmp_path_factory):
    """The real hollins.edu crawl as one graph in the contract, and a model trained on it."""
    root = tmp_path_factory.mktemp("hollins")
    data = str(root / "data")
    hollins_dataset(data, test_fraction=0.1, num_shards=1)
    config = TrainConfig(
        data=data,
        model_dir=str(root / "model"),
        dim=32,
        epochs=8,
        alpha=0.01,
        reg=0.1,
        eval_every=4,
        progress=False,
    )
    return data, train(config)


def section(url: str) -> tuple[str, str]:
    """A page's site section: host and first path directory (lower case); '' for top-level pages."""
    parts = urlsplit(url)
    dirs = parts.path.strip("/").split("/")
    return parts.netloc.lower(), dirs[0].lower() if len(dirs) > 1 else ""


def test_neighbours_are_mostly_pages_of_the_same_site_section(hollins):
    data, model = hollins
    vocab = read_vocab(data)
    sections = np.array([hash(section(vocab[i])) for i in range(len(vocab))])
    in_degree = {c: len(rows) for c, rows, _ in read_split(data, "train_t")}
    queries = [i for i in range(len(vocab)) if in_degree.get(i, 0) >= 5]
    assert len(queries) > 300
    same = []
    for q in queries[::4]:
        found = predict.nearest_neighbors(model, q, 10, data_dir=data)
        assert len(found) == 10 and q not in [p.id for p in found]
        same.append(np.mean([sections[p.id] == sections[q] for p in found]))
    # random baseline: the chance that another page is in the same section, for the same queries
    chance = np.mean(
        [((sections == sections[q]).sum() - 1) / (len(sections) - 1) for q in queries[::4]]
    )
    share = float(np.mean(same))
    assert share > 0.5, share
    assert share > 3 * chance, (share, chance)


def test_recall_beats_popularity_and_trainer_callback_used_evaluate(hollins):
    data, model = hollins
    exact = evaluate_dataset(model, data)
    assert exact["recall@20"] > exact["popularity/recall@20"] + 0.2
    assert 0.0 <= exact["ndcg@100"] <= 1.0 and exact["recall@50"] >= exact["recall@20"] - 0.05
    approx = evaluate_dataset(model, data, ranking=Ranking(approx=True, recall_target=0.95))
    assert approx["recall@20"] >= 0.95 * exact["recall@20"]
    with open(os.path.join(model.config.model_dir, "metrics.jsonl"), encoding="utf-8") as f:
        logged = {r["epoch"]: r for r in map(json.loads, f)}
    # the training loop evaluates CPU runs on one device; the same call gives the same figure
    one = evaluate_dataset(model, data, ranking=Ranking(mesh=jax.local_devices()[:1]))
    assert logged[8]["recall@20"] == pytest.approx(one["recall@20"], abs=1e-6)
    # 8 devices: the same ranking
    assert logged[8]["recall@20"] == pytest.approx(exact["recall@20"], abs=1e-6)
    assert "recall@20" in logged[4] and "recall@20" not in logged[3]


def test_predicted_outlinks_match_brute_force(hollins):
    data, model = hollins
    vocab = read_vocab(data)
    train_rows = {r: c for r, c, _ in read_split(data, "train")}
    row = max(train_rows, key=lambda r: len(train_rows[r]))
    preds = predict.predict_outlinks(model, data, vocab[row], 15)
    scores = (
        np.asarray(model.row_table, np.float64)[row] @ np.asarray(model.col_table, np.float64).T
    )
    scores[train_rows[row]] = -np.inf
    scores[row] = -np.inf
    want = np.argsort(-scores, kind="stable")[:15]
    assert [p.id for p in preds] == list(want)
    assert [p.name for p in preds] == [vocab[i] for i in want]
    np.testing.assert_allclose([p.score for p in preds], scores[want], rtol=1e-4, atol=1e-5)
    # a held-out row is folded in from its fold-in outlinks and never gets them back
    test_row, kept, _ = read_split(data, "test")[0]
    held = predict.predict_outlinks(model, data, test_row, 10)
    assert len(held) == 10 and not {p.id for p in held} & set(kept.tolist())


def test_cli_eval_predict_export(hollins, tmp_path):
    data, model = hollins
    model_dir = model.config.model_dir
    rc, out, err = _run_cli(
        ["eval", "--data", data, "--model_dir", model_dir, "--output", str(tmp_path / "m.json")]
    )
    assert rc == 0, err
    saved = json.loads((tmp_path / "m.json").read_text())
    assert "recall@20" in out and saved["recall@20"] == pytest.approx(
        evaluate_dataset(load_model(model_dir), data)["recall@20"]
    )
    url = read_vocab(data)[read_split(data, "train")[0][0]]  # a page with outlinks
    rc, out, err = _run_cli(["predict", "--data", data, "--model_dir", model_dir, url, "--k", "5"])
    assert rc == 0 and out.count("http") >= 5, err
    rc, out, err = _run_cli(
        ["predict", "--data", data, "--model_dir", model_dir, "http://nowhere.example/"]
    )
    assert rc == 1 and "not in the vocabulary" in err and len(err.strip().splitlines()) == 1
    rc, _, err = _run_cli(
        ["export", "--model_dir", model_dir, "--output", str(tmp_path / "exp"), "--data", data]
    )
    assert rc == 0, err
    loaded = load_model(model_dir)
    npz = np.load(tmp_path / "exp" / "embeddings.npz")
    np.testing.assert_array_equal(npz["col_table"], loaded.col_table)
    np.testing.assert_array_equal(npz["row_ids"], np.arange(len(loaded.row_table)))
    assert npz["col_names"][0] == read_vocab(data)[0]
    import tensorflow as tf

    records = list(
        tf.data.TFRecordDataset(str(tmp_path / "exp" / "col_embeddings.tfr-00000-of-00001"))
    )
    ex = tf.train.Example.FromString(records[3].numpy()).features.feature
    assert len(records) == len(loaded.col_table) and ex["id"].int64_list.value[0] == 3
    np.testing.assert_allclose(ex["embedding"].float_list.value, loaded.col_table[3], rtol=1e-6)


def test_fold_in_of_a_training_row_reproduces_its_trained_embedding(tmp_path, data_dir):
    data = str(tmp_path / "ml100k")
    make_dataset(
        data,
        "--edge_format",
        "movielens",
        "--input",
        data_dir / "ml-100k" / "u.data",
        "--test_fraction",
        "0.05",
        "--num_shards",
        "1",
    )
    config = TrainConfig(
        data=data,
        model_dir=str(tmp_path / "m"),
        dim=16,
        epochs=40,
        alpha=0.01,
        reg=3.0,
        solver="cholesky",
        eval_every=0,
        checkpoint_every=0,
        progress=False,
    )
    model = train(config)
    rows = read_split(data, "train")[:200]
    folded = fold_in(model.col_table, [c for _, c, _ in rows], config)
    trained = model.row_table[[r for r, _, _ in rows]]
    assert np.linalg.norm(folded - trained) / np.linalg.norm(trained) < 1e-2
    # and the fold-in is Eq. 4 itself: a float64 NumPy solve against the same column table
    want = reference_ials.solve_rows(
        model.col_table,
        {i: c for i, (_, c, _) in enumerate(rows)},
        np.zeros((len(rows), 16)),
        config.alpha,
        config.reg,
    )
    np.testing.assert_allclose(folded, want, rtol=1e-3, atol=1e-4)
    # the same rows as CSR arrays (no array per row) fold in to the same embeddings
    csr = RaggedRows.from_lists([c for _, c, _ in rows])
    np.testing.assert_array_equal(fold_in(model.col_table, csr, config), folded)
    # a row with items, from the 8th on
    row = 7 + int(np.flatnonzero(csr.lengths[7:])[0])
    wrong = np.where(np.arange(len(csr.ids)) == csr.indptr[row], -1, csr.ids)
    with pytest.raises(ValueError, match=rf"fold_in: row {row} has a column id outside \[0, "):
        fold_in(model.col_table, RaggedRows(csr.row_ids, csr.indptr, wrong), config)


def test_cli_eval_of_a_tfds_dataset(tmp_path):
    import tensorflow_datasets as tfds
    from apache_beam.options.pipeline_options import PipelineOptions

    from tfds_builder.web_graph import WebGraph
    from tfds_builder.web_graph.make_dummy_data import DUMMY_DIR

    tfds_dir = str(tmp_path / "tfds")
    builder = WebGraph(config="de-dense", data_dir=tfds_dir, source_dir=str(DUMMY_DIR))
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(beam_options=PipelineOptions(flags=[]))
    )
    model_dir = str(tmp_path / "m")
    train(
        TrainConfig(
            data="web_graph/de-dense",
            tfds_data_dir=tfds_dir,
            model_dir=model_dir,
            dim=4,
            epochs=2,
            solver="cholesky",
            reg=0.1,
            eval_every=0,
            progress=False,
        )
    )
    out_json = tmp_path / "m.json"
    rc, out, err = _run_cli(
        [
            "eval",
            "--data",
            "web_graph/de-dense",
            "--tfds_data_dir",
            tfds_dir,
            "--model_dir",
            model_dir,
            "--k",
            "1,3",
            "--output",
            str(out_json),
        ]
    )
    assert rc == 0, err
    result = json.loads(out_json.read_text())
    assert (
        0 <= result["recall@3"] <= 1
        and 0 <= result["popularity/recall@3"] <= 1
        and result["num_rows"] >= 1
    )
    rc, _, err = _run_cli(
        [
            "eval",
            "--data",
            "web_graph/nothing",
            "--tfds_data_dir",
            tfds_dir,
            "--model_dir",
            model_dir,
        ]
    )
    assert rc == 1 and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("target", ["0", "1.5", "-0.1", "nan", "high"])
def test_recall_target_outside_0_1_is_a_usage_error(target, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main_eval(
            ["--data", str(tmp_path), "--model_dir", str(tmp_path), "--approx"]
            + ["--recall_target", target]
        )
    rc, (out, err) = e.value.code, capsys.readouterr()
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "argument --recall_target: expected a number in (0, 1]" in err
