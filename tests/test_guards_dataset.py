"""A dataset is checked whole by every command: a missing vocabulary shard, a stats.json whose
`nodes` or split counts disagree with the files are refused with one line naming the file, exit
1, before any work (issue 44)."""

from __future__ import annotations

import json
import os
import re
import shutil

import pytest
from alx_cli import run_cli

from alx_trainer.data.dataset import DataError, check_dataset, open_directory
from tests.guard_data import small_dataset, small_model
from tests.pipeline_data import gowalla_dataset


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A graph and a model of it; users x items with validation splits (for `sweep`)."""
    base = tmp_path_factory.mktemp("guard_dataset")
    data = small_dataset(base, "data")
    small_model(data, base / "model")
    gowalla_dataset(base / "gowalla", num_shards=2, validation_fraction=0.25)
    return base


def copy(work, tmp_path, name: str):
    """A copy of the command's dataset as `tmp_path/data`."""
    data = tmp_path / "data"
    shutil.copytree(work / ("gowalla" if name == "sweep" else "data"), data)
    return data


def command(name: str, data, work, tmp_path) -> list[str]:
    model = str(work / "model")
    return {
        "train": ["train", "--data", data, "--model_dir", tmp_path / "m", "--dim", "4"],
        "eval": ["eval", "--data", data, "--model_dir", model],
        "predict": ["predict", "--data", data, "--model_dir", model, "http://n1.example/p"],
        "export": ["export", "--data", data, "--model_dir", model, "--out_dir", tmp_path / "x"],
        "export --top_k": [
            "export",
            "--data",
            data,
            "--model_dir",
            model,
            "--out_dir",
            tmp_path / "x",
            "--top_k",
            "3",
        ],
        "sweep": [
            "sweep",
            "--data",
            data,
            "--out_dir",
            tmp_path / "s",
            "--dims",
            "4",
            "--lambdas",
            "0.1",
            "--alphas",
            "0.1",
            "--epochs",
            "1",
            "--no_final",
        ],
    }[name]


def refused(argv, tmp_path) -> str:
    """The one error line of a command that must exit 1 having written nothing."""
    rc, out, err = run_cli([str(a) for a in argv])
    lines = [line for line in err.splitlines() if "error" in line]
    assert rc == 1 and out == "" and len(lines) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]
    return lines[0]


COMMANDS = ["train", "eval", "predict", "export", "export --top_k", "sweep"]


@pytest.mark.parametrize("name", COMMANDS)
def test_a_missing_vocabulary_shard_is_refused(work, tmp_path, name):
    data = copy(work, tmp_path, name)
    os.remove(data / "vocab.tsv-00001-of-00002")
    line = refused(command(name, data, work, tmp_path), tmp_path)
    assert (
        f"{data}: the dataset is incomplete: vocabulary shard(s) vocab.tsv-00001-of-00002 "
        "missing (1 of 2 present)"
    ) in line


@pytest.mark.parametrize("name", COMMANDS)
def test_raised_nodes_are_refused(work, tmp_path, name):
    data = copy(work, tmp_path, name)
    stats = json.loads((data / "stats.json").read_text())
    # users x items: the users (rows), and `nodes` their sum with the items
    real = stats.get("num_rows", stats["nodes"])
    stats["nodes"] += 10
    if "num_rows" in stats:
        stats["num_rows"] += 10
    (data / "stats.json").write_text(json.dumps(stats))
    line = refused(command(name, data, work, tmp_path), tmp_path)
    assert (
        f"{data / 'vocab.tsv-00001-of-00002'}: the vocabulary names {real} rows but "
        f"{data / 'stats.json'} says {real + 10}"
    ) in line


def test_eval_refuses_a_test_count_other_than_the_files(work, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(work / "data", data)
    stats = json.loads((data / "stats.json").read_text())
    stats["splits"]["test"] += 1
    (data / "stats.json").write_text(json.dumps(stats))
    line = refused(command("eval", data, work, tmp_path), tmp_path)
    assert f"the 'test' shards hold {stats['splits']['test'] - 1} rows" in line


def test_vocabulary_shards_of_two_shard_counts_are_refused(work, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(work / "data", data)
    shutil.copy(data / "vocab.tsv-00000-of-00002", data / "vocab.tsv-00000-of-00001")
    dataset = open_directory(str(data))
    with pytest.raises(
        DataError,
        match=r"the vocabulary shards are inconsistent: shard names disagree on the shard count "
        r"\(1, 2\)",
    ):
        check_dataset(dataset)


def rewrite_stats(data, change) -> dict:
    """stats.json of `data` changed in place by `change(stats)`; the new stats."""
    stats = json.loads((data / "stats.json").read_text())
    change(stats)
    (data / "stats.json").write_text(json.dumps(stats))
    return stats


def test_a_file_stats_json_lists_but_the_directory_lacks_is_refused(work, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(work / "data", data)
    name = "train.tfr-00007-of-00008"
    rewrite_stats(data, lambda stats: stats["file_sha256"].update({name: "0" * 64}))
    # the splits themselves are whole: only the listing names the file
    dataset = open_directory(str(data))
    with pytest.raises(
        DataError,
        match="^"
        + re.escape(
            f"{data / name}: missing; {data / 'stats.json'} lists it among the dataset's files"
        ),
    ):
        check_dataset(dataset)


def test_a_file_stats_json_does_not_list_is_refused(work, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(work / "data", data)
    name = "test.tfr-00001-of-00002"
    stats = rewrite_stats(data, lambda stats: stats["file_sha256"].pop(name))
    assert name not in stats["file_sha256"] and (data / name).exists()
    dataset = open_directory(str(data))
    with pytest.raises(
        DataError,
        match="^"
        + re.escape(
            f"{data / name}: not a file of this dataset ({data / 'stats.json'} does not list it)"
        ),
    ):
        check_dataset(dataset)


def test_nodes_other_than_rows_plus_columns_are_refused(work, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(work / "gowalla", data)
    stats = rewrite_stats(data, lambda stats: stats.update(nodes=stats["nodes"] + 1))
    total = stats["num_rows"] + stats["num_cols"]
    # opening reads the shape only: the check of `nodes` is check_dataset's
    dataset = open_directory(str(data))
    with pytest.raises(
        DataError,
        match="^"
        + re.escape(
            f"{data / 'stats.json'}: nodes = {total + 1}, not num_rows + num_cols = {total}; "
            "the file is damaged"
        ),
    ):
        check_dataset(dataset)


def test_a_vocabulary_with_a_gap_is_refused(work, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(work / "data", data)
    path = data / "vocab.tsv-00000-of-00002"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:2] + lines[3:]))
    with pytest.raises(DataError, match=f"{path}: its {len(lines) - 1} names are of ids"):
        check_dataset(open_directory(str(data)))
    # the directory as the pipeline wrote it passes
    check_dataset(open_directory(str(work / "data")))
