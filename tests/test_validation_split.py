"""The validation split a given split carries for tuning (`--validation_fraction`), read from the
raw files."""

import filecmp
import pathlib

import pytest

from webgraph_contract import dataset_reader
from webgraph_pipeline.cli import main
from webgraph_pipeline.given_split import carve_validation

from pipeline_data import GOWALLA, gowalla_dataset


def _raw(path: pathlib.Path) -> dict[str, set[str]]:
    """`user item item ...` lines -> {user: items}, by name, straight from the text."""
    out = {}
    for line in path.read_text().splitlines():
        user, *items = line.split()
        out.setdefault(user, set()).update(items)
    return out


def _named(data: str, split: str) -> dict[str, tuple[set[str], set[str]]]:
    """{user name: (col_tag names, gt_tag names)} of one split."""
    rows, cols = dataset_reader.read_vocab(data), dataset_reader.read_vocab(data, columns=True)
    return {
        rows[r]: ({cols[c] for c in ct}, {cols[c] for c in gt})
        for r, ct, gt in dataset_reader.read_split(data, split)
    }


@pytest.fixture(scope="module")
def excerpt(tmp_path_factory):
    root = tmp_path_factory.mktemp("gowalla_validation")
    stats = gowalla_dataset(root / "a", num_shards=2, validation_fraction=0.2)
    gowalla_dataset(root / "b", num_shards=2, validation_fraction=0.2)
    return str(root / "a"), str(root / "b"), stats


def test_validation_never_overlaps_test_and_with_its_training_rows_is_exactly_train(excerpt):
    data, _, stats = excerpt
    train, test = _raw(GOWALLA / "train.txt"), _raw(GOWALLA / "test.txt")
    fit = {u: ct for u, (ct, _) in _named(data, "validation_train").items()}
    validation = _named(data, "validation")
    assert set(fit) == set(train)  # every training user keeps a training row
    held_total = 0
    for user, items in train.items():
        kept, held = validation.get(user, (fit[user], set()))
        assert kept == fit[user]  # a validation row folds in from the user's validation_train items
        assert (
            held and kept and not held & kept and kept | held == items
        )  # union is the user's training items
        assert not held & test.get(user, set())  # never a test item
        # the held share is floor(0.2 n + u) with u in [0, 1), clamped to [1, n - 1]
        assert max(1, int(0.2 * len(items))) <= len(held) <= int(0.2 * len(items)) + 1
        held_total += len(held)
    assert stats["splits"]["validation"] == len(validation) == len(train)
    assert stats["splits"]["validation_train"] == len(train)
    transposed = {}
    for user, items in fit.items():
        for item in items:
            transposed.setdefault(item, set()).add(user)
    rows = dataset_reader.read_vocab(data)
    cols = dataset_reader.read_vocab(data, columns=True)
    got_t = {
        cols[c]: {rows[r] for r in rs}
        for c, rs, _ in dataset_reader.read_split(data, "validation_train_t")
    }
    assert got_t == transposed
    assert held_total == sum(len(v) for v in train.values()) - sum(len(v) for v in fit.values())


def test_validation_split_is_identical_across_runs(excerpt):
    a, b, _ = excerpt
    names = [p.name for p in pathlib.Path(a).glob("validation*")]
    assert len(names) == 6  # 3 splits x 2 shards
    match, mismatch, errors = filecmp.cmpfiles(a, b, names, shallow=False)
    assert not mismatch and not errors and len(match) == 6


def test_the_test_split_and_train_are_unchanged_by_the_flag(excerpt, tmp_path):
    data, _, _ = excerpt
    plain = tmp_path / "plain"
    gowalla_dataset(plain, num_shards=2)
    assert not list(plain.glob("validation*"))
    names = [p.name for p in plain.glob("*.tfr-*")]
    assert len(names) == 6  # train, train.transpose, test x 2 shards
    match, mismatch, errors = filecmp.cmpfiles(str(plain), data, names, shallow=False)
    assert not mismatch and not errors and len(match) == 6


def test_carve_keeps_test_overlap_in_training_and_small_rows_whole():
    # items 1..10, 3 and 7 also test items: only the other 8 can be held out
    fit, validation = carve_validation(
        "u", (0, tuple(range(1, 11)), ()), (3, 7), seed=0, fraction=0.5
    )
    kept, held = validation[1], validation[2]
    assert {3, 7} <= set(kept) and not {3, 7} & set(held) and len(held) in (4, 5)
    assert fit == (0, kept, ()) and sorted(kept + held) == list(range(1, 11))
    # fewer than two items that could be held: the row stays whole, no validation row
    assert carve_validation("v", (1, (4, 5), ()), (5,), seed=0, fraction=0.5) == (
        (1, (4, 5), ()),
        None,
    )


def test_validation_fraction_needs_a_given_split(tmp_path, capsys, data_dir):
    code = main(
        [
            "--edge_format",
            "pairs",
            "--header",
            "--input",
            str(data_dir / "hollins" / "edges.txt"),
            "--validation_fraction",
            "0.2",
            "--output",
            str(tmp_path / "x"),
        ]
    )
    assert code != 0
    assert "--validation_fraction: only with --edge_format given_split" in capsys.readouterr().err
