"""The dataset contract: shard names, record round trip through real TFRecords, stats.json errors."""

import json

import pytest
import tensorflow as tf

from webgraph_pipeline import contract


def test_shard_names_match_public_layout():
    assert contract.shard_name("train", 3, 10, ".tfr") == "train.tfr-00003-of-00010"
    assert contract.split_glob("/d", "train_t") == "/d/train.transpose.tfr-*-of-*"
    assert contract.split_glob("/d", "validation_train_t") == "/d/validation.train.transpose.tfr-*-of-*"
    with pytest.raises(ValueError, match="unknown split"):
        contract.split_glob("/d", "valid")


def test_records_round_trip_through_tfrecord_and_feature_spec(tmp_path):
    rows = [(0, [3, 1], []), (7, [2], [5, 6]), (2, [], [])]
    path = str(tmp_path / contract.shard_name("test", 0, 1, ".tfr"))
    with tf.io.TFRecordWriter(path) as w:
        for r in rows:
            w.write(contract.encode_row(*r))
    assert contract.iter_split_files(str(tmp_path), "test") == [path]
    spec = contract.feature_spec()
    parsed = [tf.io.parse_single_example(s, spec) for s in tf.data.TFRecordDataset(path)]
    assert [
        (int(p["row_tag"]), p["col_tag"].values.numpy().tolist(), p["gt_tag"].values.numpy().tolist())
        for p in parsed
    ] == rows
    assert [contract.decode_row(s.numpy()) for s in tf.data.TFRecordDataset(path)] == rows


def test_stats_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="stats.json"):
        contract.read_stats(str(tmp_path))
    (tmp_path / "stats.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        contract.read_stats(str(tmp_path))
    contract.write_stats(str(tmp_path), {"nodes": 5, "num_rows": 3, "num_cols": 4})
    assert json.loads((tmp_path / "stats.json").read_text())["nodes"] == 5
    assert contract.matrix_shape(contract.read_stats(str(tmp_path))) == (3, 4)
    assert contract.matrix_shape({"nodes": 9}) == (9, 9)
