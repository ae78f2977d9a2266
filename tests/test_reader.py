"""The reader without TensorFlow (tfrecord framing, record_codec decoding, dataset.read_chunks)
against TensorFlow's own writer and parser, on datasets the tests make and on edge cases; damaged
files are one-line errors naming the file, before epoch 1."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

from alx_trainer.cli import commands
from alx_trainer.data.dataset import read_chunks
from webgraph_contract import dataset_reader, fileio, layout, record_codec, tfrecord

import reference_ials as ref
from pipeline_data import gowalla_dataset, hollins_dataset

MAX = np.iinfo(np.int64).max


def tf_rows(files: list[str]) -> list[tuple[int, list[int], list[int]]]:
    """Every record of `files` as tf.data and tf.io.parse_example read them (the reference)."""
    out = []
    for batch in tf.data.TFRecordDataset(files).batch(7):
        parsed = tf.io.parse_example(batch, record_codec.feature_spec())
        cols = tf.RaggedTensor.from_sparse(parsed["col_tag"]).to_list()
        gts = tf.RaggedTensor.from_sparse(parsed["gt_tag"]).to_list()
        out += [(int(r), c, g) for r, c, g in zip(parsed["row_tag"].numpy(), cols, gts)]
    return out


def ours(files: list[str]) -> list[tuple[int, list[int], list[int]]]:
    return [(r, c.tolist(), g.tolist()) for r, c, g in dataset_reader.read_records(files)]


def chunk_rows(files: list[str], chunk: int) -> list[tuple[int, list[int]]]:
    """The rows `read_chunks` streams (what the trainer consumes)."""
    out = []
    for c in read_chunks(files, chunk, MAX, MAX):
        assert len(c) <= chunk and c.indptr[0] == 0 and c.indptr[-1] == len(c.ids)
        out += [
            (int(r), c.ids[c.indptr[k] : c.indptr[k + 1]].tolist()) for k, r in enumerate(c.row_ids)
        ]
    return out


def write_tf(path: str, records_: list[bytes]) -> None:
    with tf.io.TFRecordWriter(path) as w:
        for r in records_:
            w.write(r)


def tf_example(
    row: int, cols, gt, order=("col_tag", "gt_tag", "row_tag"), extra: bool = False
) -> bytes:
    """An Example built by TensorFlow's protobuf, features inserted in `order` (serialized as upb
    orders them)."""
    values = {"row_tag": [row], "col_tag": list(cols), "gt_tag": list(gt)}
    feature = {k: tf.train.Feature(int64_list=tf.train.Int64List(value=values[k])) for k in order}
    if extra:
        feature["weight"] = tf.train.Feature(float_list=tf.train.FloatList(value=[0.5]))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def assert_same(files: list[str]) -> None:
    expected = tf_rows(files)
    assert ours(files) == expected
    assert chunk_rows(files, 3) == [(r, c) for r, c, _ in expected]


def test_every_split_of_pipeline_datasets_equals_tf_parse(tmp_path):
    hollins, gowalla = tmp_path / "hollins", tmp_path / "gowalla"
    hollins_dataset(hollins, test_fraction=0.2, num_shards=2, urls=False)
    gowalla_dataset(gowalla, num_shards=2, validation_fraction=0.25)
    for out, expected in ((hollins, layout.SPLIT_PREFIXES), (gowalla, layout.ALL_SPLIT_PREFIXES)):
        splits = [
            s for s in layout.ALL_SPLIT_PREFIXES if fileio.glob(layout.split_glob(str(out), s))
        ]
        assert splits == list(expected)
        for split in splits:
            assert_same(list(layout.iter_split_files(str(out), split)))


def test_reference_and_synthetic_datasets_equal_tf_parse(tmp_path):
    rng = np.random.default_rng(3)
    rows = {
        r: sorted(set(rng.integers(0, 40, rng.integers(1, 9)).tolist())) for r in range(0, 60, 2)
    }
    test = {1: ([2, 3], [4]), 5: ([], [7, 8])}
    data = ref.write_dataset(str(tmp_path / "ref"), rows, 60, 40, shards=3, test=test)
    for split in ("train", "train_t", "test"):
        assert_same(list(layout.iter_split_files(data, split)))
    from webgraph_contract.synthetic_matrix import write_matrix

    write_matrix(str(tmp_path / "syn"), 300, 200, 3000, seed=1, num_shards=2)
    for split in ("train", "train_t"):
        assert_same(list(layout.iter_split_files(str(tmp_path / "syn"), split)))


def test_edge_cases_equal_tf_parse(tmp_path):
    """Empty rows (also last in a file), a row of 200k columns, ids of every varint width, negative
    ids, features in other orders, an unknown feature, and an absent gt_tag."""
    wide = list(range(0, 400_000, 2))
    big = [0, 127, 128, 2**28 - 1, 2**28, 2**35, 2**56, 2**62, MAX - 1]
    encode = record_codec.encode_row
    examples = [
        encode(3, [], []),
        encode(4, wide, [1]),
        encode(2**40, big, big),
        tf_example(9, [5, 0, 7], [2**40], order=("row_tag", "gt_tag", "col_tag"), extra=True),
        tf_example(10, [1, 2], [], order=("row_tag", "col_tag")),
        encode(11, [], []),
    ]
    path = str(tmp_path / "edge.tfr")
    write_tf(path, examples)
    assert_same([path])
    assert ours([path])[1][1] == wide and ours([path])[-1] == (11, [], [])
    # ids the trainer refuses (negative, int64's largest) still decode as TensorFlow parses them
    extreme = str(tmp_path / "extreme.tfr")
    write_tf(
        extreme,
        [tf_example(-5, [-1, MAX, -(2**63)], [-(2**40)]), record_codec.encode_row(1, [MAX])],
    )
    assert ours([extreme]) == tf_rows([extreme])
    # the same records split over blocks of every size: records straddle block ends
    whole = b"".join(examples)
    assert b"".join(fileio.read_records(path)) == whole
    for block in (1, 13, 100, 1 << 20):
        with open(path, "rb") as f:
            pieces = list(tfrecord.read_blocks(f, path, block_bytes=block))
        assert (
            b"".join(p.data[a : a + n] for p in pieces for a, n in zip(p.starts, p.lengths))
            == whole
        )


def test_split_rows_read_select_and_concat_agree_with_tf_parse(tmp_path):
    """`read_rows` (one `SplitRows` of several files) holds the records TensorFlow parses; its
    `select` and `concat` give the records picked from those lists, the two parts' row ids one
    array."""
    rng = np.random.default_rng(5)
    files = []
    for f in range(3):
        examples = [
            record_codec.encode_row(
                int(r), rng.integers(0, 2**40, rng.integers(0, 9)), rng.integers(0, 99, r % 3)
            )
            for r in rng.integers(0, 2**33, 40)
        ]
        files.append(str(tmp_path / f"part{f}.tfr"))
        write_tf(files[-1], examples)
    expected = tf_rows(files)
    rows = dataset_reader.read_rows(files)
    assert rows.col_tag.row_ids is rows.gt_tag.row_ids
    listed = lambda split: [(r, c.tolist(), g.tolist()) for r, c, g in split.tuples()]  # noqa: E731
    assert listed(rows) == expected
    at = rng.permutation(len(expected))[:50]
    picked = rows.select(at)
    assert picked.col_tag.row_ids is picked.gt_tag.row_ids
    assert listed(picked) == [expected[i] for i in at]
    joined = record_codec.SplitRows.concat([rows.select(at[:20]), rows.select(at[20:])])
    assert listed(joined) == [expected[i] for i in at]
    assert joined.col_tag.row_ids is joined.gt_tag.row_ids


def test_encoders_equal_tensorflow_serialization():
    rng = np.random.default_rng(5)
    for _ in range(50):
        cols = rng.integers(0, 2 ** rng.integers(1, 63), rng.integers(0, 20)).tolist()
        gt = rng.integers(0, 1000, rng.integers(0, 4)).tolist()
        row = int(rng.integers(0, 2**40))
        example = tf.train.Example()
        for key, value in (("row_tag", [row]), ("col_tag", cols), ("gt_tag", gt)):
            example.features.feature[key].int64_list.value.extend(value)
        assert record_codec.encode_row(row, cols, gt) == example.SerializeToString(
            deterministic=True
        )
    vector = rng.standard_normal(5).astype(np.float32)
    example = tf.train.Example(
        features=tf.train.Features(
            feature={
                "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[7])),
                "embedding": tf.train.Feature(float_list=tf.train.FloatList(value=vector.tolist())),
                "name": tf.train.Feature(bytes_list=tf.train.BytesList(value=["é/x".encode()])),
            }
        )
    )
    ours_ = record_codec.encode_example(
        {"id": np.array([7]), "embedding": vector, "name": ["é/x".encode()]}
    )
    assert ours_ == example.SerializeToString(deterministic=True)


def _damage(path: str, how: str) -> None:
    data = bytearray(open(path, "rb").read())
    if how == "corrupt_byte":
        data[len(data) // 2] ^= 0x01
    elif how == "corrupt_length":
        data[0] ^= 0x01
    elif how == "truncated":
        data = data[: len(data) - 3]
    elif how == "not_tfrecord":
        data = b"id\tname\n0\thttp://a.example/\n" * 20
    with open(path, "wb") as f:
        f.write(data)


@pytest.mark.parametrize("how", ["corrupt_byte", "corrupt_length", "truncated", "not_tfrecord"])
def test_damaged_files_stop_training_before_epoch_one(tmp_path, capsys, how):
    rows = {r: [(r * 7 + k) % 30 for k in range(5)] for r in range(40)}
    data = ref.write_dataset(str(tmp_path / "d"), rows, 40, 30)
    shard = os.path.join(data, "train.tfr-00001-of-00002")
    _damage(shard, how)
    with pytest.raises(ValueError, match="train.tfr-00001-of-00002"):
        list(read_chunks([shard], 8, 40, 30))
    model_dir = tmp_path / "m"
    argv = [
        "--data",
        data,
        "--model_dir",
        str(model_dir),
        "--dim",
        "4",
        "--epochs",
        "2",
        "--no-progress",
    ]
    assert commands.main_train(argv) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "train.tfr-00001-of-00002" in err, err
    word = {"truncated": "truncated", "not_tfrecord": "not a TFRecord"}.get(how, "corrupt")
    assert word in err, err
    saved = (
        list((model_dir / "checkpoints").iterdir()) if (model_dir / "checkpoints").exists() else []
    )
    assert not (model_dir / "metrics.jsonl").exists() and saved == []  # no epoch ran


def test_a_record_that_is_not_a_contract_example_names_file_and_offset(tmp_path):
    path = str(tmp_path / "x.tfr")
    write_tf(path, [record_codec.encode_row(1, [2]), b"\x0a\x03\x0a\x01\xff"])
    with pytest.raises(ValueError, match=r"x.tfr: the record at byte \d+ is not a web_graph") as e:
        dataset_reader.read_records([path])
    at = int(str(e.value).split("at byte ")[1].split()[0])
    assert at == 16 + len(record_codec.encode_row(1, [2]))


def test_remote_paths_go_through_fsspec():
    root = "memory://wt28-reader/d"
    fileio.makedirs(root)
    fileio.write_records(
        f"{root}/train.tfr-00000-of-00001",
        [record_codec.encode_row(1, [2, 3]), record_codec.encode_row(2, [])],
    )
    files = list(layout.iter_split_files(root, "train"))
    assert [f.startswith("memory://") for f in files] == [True]
    assert ours(files) == [(1, [2, 3], []), (2, [], [])]
    fileio.rmtree(root)
    assert not fileio.exists(root)


def test_a_bad_vocabulary_line_is_named_by_file_and_line(tmp_path):
    shard = tmp_path / layout.shard_name(layout.VOCAB_PREFIX, 0, 1)
    shard.write_bytes(b"0\thttp://a.example/\n1\thttp://b.example/\xe9t\xe9\n2\tc\n")
    with pytest.raises(ValueError) as e:
        dataset_reader.read_vocab(str(tmp_path))
    assert str(e.value) == f"{shard}:2: not UTF-8 (byte 0xe9 at column 20)"
    shard.write_bytes(b"0\thttp://a.example/\n1 http://b.example/\n")
    with pytest.raises(ValueError, match=rf"{shard}:2: expected `id<TAB>name`"):
        dataset_reader.read_vocab(str(tmp_path))
