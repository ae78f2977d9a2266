"""`--data web_graph/de-dense`: a TFDS dataset built by tfds_builder trains through the same input
path."""

from __future__ import annotations

import json

import numpy as np
import tensorflow_datasets as tfds
from apache_beam.options.pipeline_options import PipelineOptions
from test_reader import tf_rows  # tests/ is on sys.path

from alx_trainer.cli import commands
from alx_trainer.data.dataset import open_tfds
from tfds_builder.web_graph import WebGraph
from tfds_builder.web_graph.make_dummy_data import DUMMY_DIR, NUM_NODES
from webgraph_contract import dataset_reader


def test_train_from_tfds_name(tmp_path, capsys):
    data_dir = str(tmp_path / "tfds")
    builder = WebGraph(config="de-dense", data_dir=data_dir, source_dir=str(DUMMY_DIR))
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(beam_options=PipelineOptions(flags=[]))
    )

    dataset = open_tfds("web_graph/de-dense", data_dir)
    assert (dataset.num_rows, dataset.num_cols) == (NUM_NODES, NUM_NODES) and not dataset.bipartite
    assert set(dataset.files) == {"train", "train_t", "test"}
    source_test = dataset_reader.read_split(str(DUMMY_DIR), "test")
    assert sorted(r for r, _, _ in dataset_reader.read_records(dataset.files["test"])) == [
        r for r, _, _ in source_test
    ]
    # the trainer's reader on TFDS-written files: as tf.data parses them
    for files in dataset.files.values():
        assert [
            (r, c.tolist(), g.tolist()) for r, c, g in dataset_reader.read_records(files)
        ] == tf_rows(files)

    model_dir = tmp_path / "m"
    argv = [
        "--data",
        "web_graph/de-dense",
        "--tfds_data_dir",
        data_dir,
        "--model_dir",
        str(model_dir),
        "--dim",
        "4",
        "--epochs",
        "2",
        "--no-progress",
        "--eval_k",
        "1,3",
        "--solver",
        "cholesky",
        "--reg",
        "0.1",
    ]
    assert commands.main_train(argv) == 0, capsys.readouterr().err
    record = [json.loads(x) for x in (model_dir / "metrics.jsonl").read_text().splitlines()][-1]
    rows_solved = len(dataset_reader.read_split(str(DUMMY_DIR), "train"))
    assert record["rows_solved"] == rows_solved and np.isfinite(record["loss"])
    assert 0 <= record["recall@3"] <= 1
    assert 0 <= record["popularity/recall@3"] <= 1  # the same loader as `eval`: the baseline too


def test_unknown_tfds_name_is_a_clear_error(tmp_path, capsys):
    argv = [
        "--data",
        "web_graph/de-dense",
        "--tfds_data_dir",
        str(tmp_path),
        "--model_dir",
        str(tmp_path / "m"),
    ]
    assert commands.main_train(argv) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "web_graph/de-dense:1.0.0" in err
