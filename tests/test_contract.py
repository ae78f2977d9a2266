"""The dataset contract: shard names, record round trip through real TFRecords, stats.json
errors."""

import json

import pytest
import tensorflow as tf

from webgraph_contract import layout, record_codec, stats_json


def test_shard_names_match_public_layout():
    assert layout.shard_name("train", 3, 10, ".tfr") == "train.tfr-00003-of-00010"
    assert layout.split_glob("/d", "train_t") == "/d/train.transpose.tfr-*-of-*"
    assert (
        layout.split_glob("/d", "validation_train_t") == "/d/validation.train.transpose.tfr-*-of-*"
    )
    with pytest.raises(ValueError, match="unknown split"):
        layout.split_glob("/d", "valid")


def test_records_round_trip_through_tfrecord_and_feature_spec(tmp_path):
    rows = [(0, [3, 1], []), (7, [2], [5, 6]), (2, [], [])]
    path = str(tmp_path / layout.shard_name("test", 0, 1, ".tfr"))
    with tf.io.TFRecordWriter(path) as w:
        for r in rows:
            w.write(record_codec.encode_row(*r))
    assert layout.iter_split_files(str(tmp_path), "test") == [path]
    spec = record_codec.feature_spec()
    parsed = [tf.io.parse_single_example(s, spec) for s in tf.data.TFRecordDataset(path)]
    assert [
        (
            int(p["row_tag"]),
            p["col_tag"].values.numpy().tolist(),
            p["gt_tag"].values.numpy().tolist(),
        )
        for p in parsed
    ] == rows
    assert [record_codec.decode_row(s.numpy()) for s in tf.data.TFRecordDataset(path)] == rows


def test_stats_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="stats.json"):
        stats_json.read_stats(str(tmp_path))
    (tmp_path / "stats.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        stats_json.read_stats(str(tmp_path))
    stats_json.write_stats(str(tmp_path), {"nodes": 5, "num_rows": 3, "num_cols": 4})
    assert json.loads((tmp_path / "stats.json").read_text())["nodes"] == 5
    assert stats_json.matrix_shape(stats_json.read_stats(str(tmp_path))) == (3, 4)
    assert stats_json.matrix_shape({"nodes": 9}) == (9, 9)
