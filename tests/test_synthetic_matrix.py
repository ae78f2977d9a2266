"""The synthetic power-law matrix: contract records byte-identical to encode_row, counts read back,
seeded."""

import numpy as np
import pytest

from webgraph_contract import dataset_reader, layout, record_codec, stats_json, synthetic_matrix


# varints of 1-4 bytes (one uint32 word), 1-6, 1-9
@pytest.mark.parametrize("top_bits", [28, 40, 63])
def test_encode_rows_is_byte_identical_to_encode_row(top_bits):
    rng = np.random.default_rng(3)
    lengths = rng.integers(0, 30, 300)
    lengths[:3] = 0
    lengths[10] = 2000  # a payload length needing a two-byte varint
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    cols = rng.integers(0, 2**top_bits, indptr[-1]) >> rng.integers(0, top_bits, indptr[-1])
    cols[:3] = [0, 2**top_bits - 1, 2 ** (top_bits - 1)]
    rows = rng.integers(0, 2**35, len(lengths)) >> rng.integers(0, 35, len(lengths))
    got = record_codec.encode_rows(record_codec.SplitRows.of(rows, indptr, cols))
    expected = [
        record_codec.encode_row(int(r), cols[indptr[k] : indptr[k + 1]].tolist())
        for k, r in enumerate(rows)
    ]
    assert got == expected


def test_encode_rows_with_gt_tag_is_byte_identical_to_encode_row():
    rng = np.random.default_rng(4)
    ptrs, values = [], []
    for _ in range(2):  # col_tag and gt_tag, each with empty rows and a two-byte payload length
        lengths = rng.integers(0, 6, 200)
        lengths[rng.integers(0, 200, 40)] = 0
        lengths[7] = 300
        ptrs.append(np.concatenate([[0], np.cumsum(lengths)]))
        values.append(rng.integers(0, 2**40, ptrs[-1][-1]) >> rng.integers(0, 40, ptrs[-1][-1]))
    rows = rng.integers(0, 2**35, 200) >> rng.integers(0, 35, 200)
    split = record_codec.SplitRows.of(rows, ptrs[0], values[0], ptrs[1], values[1])
    got = record_codec.encode_rows(split)
    expected = [
        record_codec.encode_row(
            int(r),
            values[0][ptrs[0][k] : ptrs[0][k + 1]].tolist(),
            values[1][ptrs[1][k] : ptrs[1][k + 1]].tolist(),
        )
        for k, r in enumerate(rows)
    ]
    assert got == expected
    # a view of rows 50..119 (pointers not from 0) encodes as those rows alone
    part = record_codec.SplitRows(split.col_tag.take(50, 120), split.gt_tag.take(50, 120))
    part.col_tag.indptr = ptrs[0][50:121]
    part.col_tag.ids = values[0]
    assert record_codec.encode_rows(part) == expected[50:120]


def test_generated_matrix_reads_back_through_the_contract(tmp_path):
    out = str(tmp_path / "m")
    code = synthetic_matrix.main(
        [
            "--out",
            out,
            "--rows",
            "300",
            "--cols",
            "120",
            "--nnz",
            "4000",
            "--seed",
            "7",
            "--shards",
            "3",
        ]
    )
    assert code == 0
    stats = stats_json.read_stats(out)
    assert stats_json.matrix_shape(stats) == (300, 120)
    train = dataset_reader.read_split(out, "train")
    train_t = dataset_reader.read_split(out, "train_t")
    pairs = {(r, int(c)) for r, cols, _ in train for c in cols}
    pairs_t = {(int(r), c) for c, rows, _ in train_t for r in rows}
    # distinct pairs, exactly nnz
    assert sum(len(cols) for _, cols, _ in train) == 4000 == len(pairs)
    assert pairs == pairs_t  # the transpose holds the same matrix
    assert stats["edges"] == 4000
    assert stats["splits"] == {"train": len(train), "train_t": len(train_t)}
    assert all(0 <= r < 300 and 0 <= c < 120 for r, c in pairs)
    assert len(layout.iter_split_files(out, "train")) == 3
    assert [r for r, _, _ in train] == sorted(r for r, _, _ in train)  # rows in id order, each once
    assert all(list(cols) == sorted(cols) for _, cols, _ in train)
    # power law: the busiest tenth of the columns holds far more than a tenth of the edges
    col_degree = np.bincount([c for _, c in pairs], minlength=120)
    assert np.sort(col_degree)[::-1][:12].sum() > 0.25 * 4000


def test_generator_is_deterministic_by_seed(tmp_path):
    def files(seed: int, name: str) -> dict[str, bytes]:
        out = tmp_path / name
        synthetic_matrix.write_matrix(str(out), 500, 200, 3000, seed=seed, num_shards=2)
        return {p.name: p.read_bytes() for p in sorted(out.glob("train*"))}

    first = files(1, "a")
    assert first == files(1, "b")
    assert first != files(2, "c")


def test_rows_get_their_degrees_in_distinct_columns_across_blocks_and_buckets(
    tmp_path, monkeypatch
):
    # small blocks and buckets: many row blocks per shard, many column buckets per transpose shard
    monkeypatch.setattr(synthetic_matrix, "BLOCK_EDGES", 97)
    monkeypatch.setattr(synthetic_matrix, "BUCKET_COLS", 7)
    out = str(tmp_path / "m")
    synthetic_matrix.write_matrix(out, 300, 40, 3000, seed=5, num_shards=3)
    degrees = synthetic_matrix.row_degrees(np.random.default_rng(5), 300, 40, 3000, 0.5)
    train = {r: list(c) for r, c, _ in dataset_reader.read_split(out, "train")}
    assert {r: len(c) for r, c in train.items()} == {r: int(d) for r, d in enumerate(degrees) if d}
    assert all(c == sorted(set(c)) and all(0 <= x < 40 for x in c) for c in train.values())
    assert max(len(c) for c in train.values()) <= 20  # at most half of the columns
    transpose = {}
    for c, rows, _ in dataset_reader.read_split(out, "train_t"):
        assert list(rows) == sorted(set(rows))
        transpose[c] = list(rows)
    assert {(r, c) for c, rows in transpose.items() for r in rows} == {
        (r, c) for r, cs in train.items() for c in cs
    }
    assert not list((tmp_path / "m").glob(".transpose*"))  # the buckets are removed


def test_bad_arguments_exit_non_zero(tmp_path, capsys):
    assert (
        synthetic_matrix.main(["--out", str(tmp_path), "--rows", "0", "--cols", "5", "--nnz", "3"])
        == 2
    )
    assert "--rows must be positive" in capsys.readouterr().err
    assert (
        synthetic_matrix.main(["--out", str(tmp_path), "--rows", "2", "--cols", "2", "--nnz", "5"])
        == 2
    )
    assert "exceeds rows x cols / 2" in capsys.readouterr().err
