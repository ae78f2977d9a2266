"""The planted graph's validation splits (`planted.validation_split`, `dataset_writer`'s
`validation`): the holdout rule on the training rows against a brute force from the same
uniforms, the directory through the contract, and a sweep on it."""

from __future__ import annotations

import csv
import math
import os

import numpy as np
import pytest
from alx_cli import run_cli

from alx_trainer import loading
from alx_trainer.data.dataset import check_dataset, open_dataset, validation_view
from webgraph_contract import dataset_reader, dataset_writer, layout, planted, stats_json
from webgraph_contract.ragged import RaggedRows

PARAMS = planted.Params(pages=3000, seed=7, communities=10, degree_min=12.0, degree_cap=300)
FRACTION = 0.2
VALIDATION_FILES = ("validation.train.tfr", "validation.train.transpose.tfr", "validation.tfr")


@pytest.fixture(scope="module")
def graph() -> planted.Graph:
    return planted.host_graph(planted.structure(PARAMS), threads=2)


@pytest.fixture(scope="module")
def written(graph, tmp_path_factory) -> tuple[str, dict, str, dict]:
    """(directory with validation splits, its stats, one without, its stats)."""
    root = tmp_path_factory.mktemp("planted_validation")
    with_v, without = str(root / "with"), str(root / "without")
    stats = planted.write(with_v, graph, num_shards=3, workers=2, validation_fraction=FRACTION)
    plain = planted.write(without, graph, num_shards=3, workers=2)
    return with_v, stats, without, plain


def brute_force(g: planted.Graph, fraction: float, block_pages: int) -> dict[int, tuple]:
    """{validation row: (kept ids, held ids)} by the rule of the module's docstring, row by row
    from the uniforms of the seeds it names."""
    p = PARAMS
    rng = np.random.default_rng([p.seed, 2])
    candidate, rounding = rng.random(p.pages), rng.random(p.pages)
    train = {r: ids.tolist() for r, ids in g.train}
    out = {}
    for b in range(math.ceil(p.pages / block_pages)):
        rows = [
            r
            for r in range(b * block_pages, min((b + 1) * block_pages, p.pages))
            if r in train and len(train[r]) >= 2 and candidate[r] < fraction
        ]
        keys = np.random.default_rng([p.seed, 3, b]).integers(
            0, 1 << 32, sum(len(train[r]) for r in rows)
        )
        at = 0
        for r in rows:
            ids = train[r]
            n = len(ids)
            h = min(max(math.floor(p.holdout_fraction * n + rounding[r]), 1), n - 1)
            mine = keys[at : at + n].tolist()
            at += n
            ranked = sorted(range(n), key=lambda j: (mine[j], ids[j]))
            held = sorted(ids[j] for j in ranked[:h])
            out[r] = ([c for c in ids if c not in held], held)
    return out


@pytest.mark.parametrize("block_pages", [planted.BLOCK_PAGES, 700])
def test_validation_rows_follow_the_holdout_rule(graph, monkeypatch, block_pages):
    monkeypatch.setattr(planted, "BLOCK_PAGES", block_pages)
    kept, held = planted.validation_split(graph, FRACTION, threads=3)
    expected = brute_force(graph, FRACTION, block_pages)
    assert kept.row_ids.tolist() == held.row_ids.tolist() == sorted(expected)
    assert [(a.tolist(), b.tolist()) for (_, a), (_, b) in zip(kept, held)] == [
        expected[r] for r in kept.row_ids.tolist()
    ]
    # about the fraction of the training rows with two links or more, a share of their links held
    eligible = int((graph.train.lengths >= 2).sum())
    assert abs(len(kept) - FRACTION * eligible) < 4 * math.sqrt(eligible * FRACTION)
    assert 0.2 < held.nnz / (kept.nnz + held.nnz) < 0.3
    assert planted.validation_split(graph, FRACTION, threads=1)[1].ids.tolist() == held.ids.tolist()


def test_validation_rows_are_training_rows_split_in_two(graph):
    kept, held = planted.validation_split(graph, FRACTION)
    train = dict(graph.train)
    assert set(kept.row_ids.tolist()) <= set(train)
    assert not set(kept.row_ids.tolist()) & set(graph.test.row_ids.tolist())
    for (r, a), (_, b) in zip(kept, held):
        assert len(a) >= 1 and len(b) >= 1 and not set(a.tolist()) & set(b.tolist())
        assert np.array_equal(np.sort(np.concatenate([a, b])), train[r])
    with pytest.raises(ValueError, match="validation_fraction"):
        planted.validation_split(graph, 0.0)


def links(records) -> set[tuple[int, int]]:
    """(row, column) of every `col_tag` link of (row, col_tag, gt_tag) records."""
    return {(int(r), int(c)) for r, cols, _ in records for c in cols}


def test_directory_with_validation_passes_the_contract(graph, written):
    out, stats, plain_dir, plain = written
    kept, held = planted.validation_split(graph, FRACTION)
    validation = dataset_reader.read_split(out, "validation")
    assert [r for r, _, _ in validation] == kept.row_ids.tolist()
    assert all(
        np.array_equal(c, a) and np.array_equal(g, b)
        for (_, c, g), (_, a), (_, b) in zip(validation, kept, held)
    )
    fit = dataset_reader.read_split(out, "validation_train")
    train = dataset_reader.read_split(out, "train")
    # validation_train: the training rows less the validation rows, whole; so validation_train
    # + validation (kept and held) = train
    assert [r for r, _, _ in fit] == sorted(set(graph.train.row_ids.tolist()) - set(kept.row_ids))
    val_links = links(validation) | {(r, int(c)) for r, _, gt in validation for c in gt}
    assert not links(fit) & val_links
    assert links(fit) | val_links == links(train)
    fit_t = dataset_reader.read_split(out, "validation_train_t")
    assert {(int(r), c) for c, rows, _ in fit_t for r in rows} == links(fit)
    assert [c for c, _, _ in fit_t] == sorted({c for _, c in links(fit)})
    assert all(list(rows) == sorted(rows) for _, rows, _ in fit_t)
    # the other splits' bytes do not change with the flag
    assert {n: d for n, d in stats["file_sha256"].items() if not n.startswith("validation")} == (
        plain["file_sha256"]
    )
    assert sum(n.startswith(VALIDATION_FILES) for n in stats["file_sha256"]) == 9
    assert stats["splits"] == {
        **plain["splits"],
        "validation_train": len(fit),
        "validation_train_t": len(fit_t),
        "validation": len(kept),
    }
    assert stats["split_edges"]["validation_train"] == len(links(fit))
    assert stats["validation_links"] == {"col_tag": kept.nnz, "gt_tag": held.nnz}
    assert stats["config"]["validation_fraction"] == FRACTION
    assert "validation_fraction" not in plain["config"]
    assert planted.params_of(stats) == PARAMS
    # the trainer's reader and checks, and the evaluator's view of the validation rows
    dataset = loading.open_checked(out)
    check_dataset(dataset)
    view = validation_view(dataset)
    assert view.splits == {"train": len(fit), "train_t": len(fit_t), "test": len(kept)}
    rows = loading.eval_data(out, "validation")
    assert rows.known.row_ids.tolist() == kept.row_ids.tolist() and rows.shared
    assert rows.gt.nnz == held.nnz
    popularity = np.bincount([c for _, c in links(fit)], minlength=PARAMS.pages)
    assert np.array_equal(rows.popularity, popularity.astype(np.float32))
    assert stats_json.fingerprint_dataset(out)["dataset_fingerprint"] == dataset.fingerprint
    with pytest.raises(FileNotFoundError, match="validation"):
        validation_view(open_dataset(plain_dir))


def test_rewriting_without_validation_removes_its_files(graph, tmp_path):
    out = str(tmp_path / "d")
    planted.write(out, graph, num_shards=2, workers=1, validation_fraction=FRACTION)
    assert len(layout.iter_split_files(out, "validation")) == 2
    stats = planted.write(out, graph, num_shards=2, workers=1)
    assert not [n for n in os.listdir(out) if n.startswith("validation")]
    assert "validation" not in stats["splits"]
    check_dataset(loading.open_checked(out))


def test_writer_refuses_validation_rows_that_break_the_contract(tmp_path, graph):
    kept, held = planted.validation_split(graph, FRACTION)
    args = (str(tmp_path / "x"), PARAMS.pages, graph.train, graph.test, graph.held, {}, 1)
    with pytest.raises(ValueError, match="same rows"):
        dataset_writer.write_dataset(*args, validation=(kept, held.take(0, 3)))
    with pytest.raises(ValueError, match="not a training row"):
        test_rows = RaggedRows(graph.test.row_ids[:2], np.array([0, 1, 2]), np.array([0, 1]))
        dataset_writer.write_dataset(*args, validation=(test_rows, test_rows))
    with pytest.raises(ValueError, match="not its training links"):
        dataset_writer.write_dataset(*args, validation=(kept, kept))


def test_command_line_flag_and_a_sweep_on_the_directory(tmp_path, capsys):
    out = str(tmp_path / "d")
    argv = ["--out", out, "--scale", "0.0001", "--seed", "2", "--shards", "2", "--workers", "2"]
    assert planted.main(argv + ["--validation_fraction", "0.1"]) == 0
    assert "validation rows" in capsys.readouterr().out
    stats = stats_json.read_stats(out)
    assert stats["splits"]["validation"] > 0 and stats["config"]["validation_fraction"] == 0.1
    assert planted.main(argv + ["--validation_fraction", "1.5"]) == 2
    sweep_dir = str(tmp_path / "sweep")
    rc, _, err = run_cli(
        [
            "sweep",
            "--data",
            out,
            "--out_dir",
            sweep_dir,
            "--dims",
            "8",
            "--alphas",
            "0.01",
            "--lambdas",
            "0.1,0.01",
            "--epochs",
            "2",
            "--eval_every",
            "2",
            "--eval_k",
            "20",
            "--ndcg_k",
            "20",
            "--no_final",
            "--no-progress",
        ]
    )
    assert rc == 0, err
    with open(os.path.join(sweep_dir, "sweep.csv")) as f:
        table = list(csv.DictReader(f))
    assert sorted(float(r["lambda"]) for r in table) == [0.01, 0.1]
    assert all(0 <= float(r["recall_gt@20"]) <= 1 for r in table)
