"""Strong-generalization splits of interaction data, written in and read back from the contract."""

import os

import numpy as np
import pytest

from alx_trainer import interactions as it
from alx_trainer.cli_eval import main_split
from webgraph_pipeline import contract


@pytest.fixture(scope="module")
def ml1m(data_dir):
    d = data_dir / "ml-1m-implicit"
    return it.build_matrix(it.read_interactions([str(d / "train.txt"), str(d / "test.txt")], "ml1m"))


def test_ml1m_has_the_published_counts(ml1m):
    assert (ml1m.num_rows, ml1m.num_cols, ml1m.num_pairs) == (6040, 3706, 1_000_209)
    assert ml1m.dropped == {"duplicate": 0}


def test_ml100k_has_the_published_counts(data_dir):
    m = it.build_matrix(it.read_interactions([str(data_dir / "ml-100k" / "u.data")], "udata"))
    assert (m.num_rows, m.num_cols, m.num_pairs) == (943, 1682, 100_000)


def test_split_counts_fractions_and_no_leakage(ml1m):
    split = it.split_rows(ml1m, test_rows=600, fold_in_fraction=0.8, seed=3)
    assert len(split.test) == 600
    assert len(split.train) == 6040 - 600
    assert not set(split.test) & set(split.train)
    for r, (kept, gt) in split.test.items():
        items = ml1m.items[r]
        assert len(kept) == min(len(items) - 1, max(1, round(0.8 * len(items))))
        assert not np.intersect1d(kept, gt).size
        np.testing.assert_array_equal(np.sort(np.concatenate([kept, gt])), items)
    # the held-out fraction of pairs is close to 20% of the held-out rows' pairs
    held = sum(len(g) for _, g in split.test.values()) / sum(len(ml1m.items[r]) for r in split.test)
    assert 0.19 < held < 0.21
    # no test row is a training row of the transpose either
    train_t = it.transpose(split.train, ml1m.num_cols)
    all_t_rows = np.concatenate(list(train_t.values()))
    assert not np.isin(list(split.test), all_t_rows).any()
    assert len(all_t_rows) == sum(len(v) for v in split.train.values())


def test_split_is_deterministic_by_seed(ml1m):
    a = it.split_rows(ml1m, test_rows=50, seed=7)
    b = it.split_rows(ml1m, test_rows=50, seed=7)
    c = it.split_rows(ml1m, test_rows=50, seed=8)
    assert list(a.test) == list(b.test) and list(a.test) != list(c.test)
    for r in a.test:
        np.testing.assert_array_equal(a.test[r][1], b.test[r][1])


def test_fraction_and_bad_requests():
    m = it.build_matrix(it.Pairs(np.array([0, 0, 1, 1, 2, 3, 3]), np.array([1, 2, 1, 3, 0, 0, 2]), False))
    assert len(it.split_rows(m, test_fraction=0.5, seed=0).test) == 2
    with pytest.raises(ValueError, match="only 3 rows have >= 2 items"):
        it.split_rows(m, test_rows=4)
    with pytest.raises(ValueError, match="exactly one"):
        it.split_rows(m, test_rows=1, test_fraction=0.5)


def test_graph_pairs_share_one_id_space_and_drop_self_loops(tmp_path):
    path = tmp_path / "edges.txt"
    path.write_text("src dst\n10 20\n20 10\n20 20\n10 20\n30 10\n")
    m = it.build_matrix(it.read_interactions([str(path)], "edges"))
    assert m.num_rows == m.num_cols == 3 and list(m.row_ids) == [10, 20, 30]
    assert m.dropped == {"self_loop": 1, "duplicate": 1}
    assert [list(i) for i in m.items] == [[1], [0], [0]]


def test_bad_line_names_file_and_line(tmp_path):
    path = tmp_path / "u.data"
    path.write_text("1\t2\t3\t4\n1\tx\t3\t4\n")
    with pytest.raises(ValueError, match=r"u.data:2: not an integer"):
        it.read_interactions([str(path)], "udata")
    assert main_split(["--input", str(path), "--format", "udata", "--output", str(tmp_path / "o"),
                       "--test_rows", "1"]) == 1
    with pytest.raises(FileNotFoundError, match="not found"):
        it.read_interactions([str(tmp_path / "missing")], "pairs")


def test_written_dataset_round_trips_through_the_contract(tmp_path, data_dir):
    out = tmp_path / "ml100k"
    rc = main_split(["--input", str(data_dir / "ml-100k" / "u.data"), "--format", "udata", "--output", str(out),
                     "--test_rows", "100", "--seed", "5", "--num_shards", "3"])
    assert rc == 0
    stats = contract.read_stats(str(out))
    assert contract.matrix_shape(stats) == (943, 1682)
    assert stats["splits"]["test"] == 100 and stats["splits"]["train"] == 843
    assert len(list(contract.iter_split_files(str(out), "train_t"))) == 3
    test = contract.read_split(str(out), "test")
    train = contract.read_split(str(out), "train")
    train_t = contract.read_split(str(out), "train_t")
    pairs = {(r, c) for r, cols, _ in train for c in cols}
    assert pairs == {(r, c) for c, rows, _ in train_t for r in rows}
    assert all(len(g) == 0 for _, _, g in train)
    folded = {(r, c) for r, cols, _ in test for c in cols} | {(r, c) for r, _, g in test for c in g}
    assert not {r for r, _ in pairs} & {r for r, _ in folded}
    assert len(pairs) + len(folded) == stats["edges"] == 100_000
    # the same command again gives byte-identical files
    first = {p: open(os.path.join(out, p), "rb").read() for p in os.listdir(out)}
    assert main_split(["--input", str(data_dir / "ml-100k" / "u.data"), "--format", "udata", "--output",
                       str(out), "--test_rows", "100", "--seed", "5", "--num_shards", "3"]) == 0
    assert first == {p: open(os.path.join(out, p), "rb").read() for p in os.listdir(out)}
    assert contract.read_vocab(str(out), columns=True)[0] == "1"  # item ids are dense, named by original id
