"""The de-sparse section of `benchmarks.speed` and its parts: the device split against a plain NumPy
reading of the pipeline's rule, the evaluation glue against a brute-force ranking (the toy run end
to end is in test_speed_benchmark.py).

(a) `strong_split.device_split` equals a per-row NumPy application of the rule to the same random
draws, and its parts partition the matrix. (b) `evaluate_test` (fold-in, top K, metrics in chunks
over threads, the approximate top K's recall on a sample) equals a NumPy ranking of the same
folded-in rows.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from alx_trainer.config import TrainConfig
from alx_trainer.model import Model, fold_in
from benchmarks.core import de_sparse_children, power_law, strong_split
from webgraph_contract.ragged import RaggedRows


def _reference_split(
    indptr: np.ndarray, cols: np.ndarray, key, test_fraction: float, holdout_fraction: float
) -> dict[str, np.ndarray]:
    """The rule row by row: test rows by their uniform, h = clamp(floor(f n + u), 1, n - 1) held
    links, the first h of the row's links ordered by (random bits, position)."""
    lengths = np.diff(indptr)
    choice, rounding, _ = (np.asarray(x) for x in strong_split.draws(key, len(lengths), 0))
    test = [
        r for r in range(len(lengths)) if lengths[r] >= 2 and choice[r] < np.float32(test_fraction)
    ]
    is_test = set(test)
    links = int(sum(lengths[r] for r in test))
    bits = np.asarray(strong_split.draws(key, len(lengths), links)[2])
    train, fold, gt, at = [], [], [], 0
    for r in range(len(lengths)):
        row = cols[indptr[r] : indptr[r + 1]]
        if r not in is_test:
            train.append(row)
            continue
        train.append(row[:0])
        n = len(row)
        h = int(
            min(max(np.floor(np.float32(holdout_fraction) * np.float32(n) + rounding[r]), 1), n - 1)
        )
        order = sorted(range(n), key=lambda i: (bits[at + i], i))
        held = set(order[:h])
        fold.append(np.array([row[i] for i in range(n) if i not in held], np.int32))
        gt.append(np.array([row[i] for i in range(n) if i in held], np.int32))
        at += n
    out = {"test_rows": np.array(test, np.int32)}
    for name, parts in (("train", train), ("fold", fold), ("gt", gt)):
        out[f"{name}_indptr"] = np.concatenate([[0], np.cumsum([len(p) for p in parts])]).astype(
            np.int32
        )
        out[f"{name}_cols"] = np.concatenate(parts).astype(np.int32)
    return out


@pytest.fixture(scope="module")
def matrix():
    return power_law.device_matrix(4, 600, 300, 9_000)[:2]


@pytest.mark.parametrize("test_fraction,holdout_fraction", [(0.1, 0.25), (0.5, 0.6)])
def test_device_split_is_the_pipelines_rule_on_its_draws(matrix, test_fraction, holdout_fraction):
    indptr, cols = matrix
    key = jax.random.key(11)
    got = {
        k: np.asarray(v)
        for k, v in strong_split.device_split(
            indptr, cols, key, test_fraction, holdout_fraction
        ).items()
    }
    indptr, cols = np.asarray(indptr), np.asarray(cols)
    want = _reference_split(indptr, cols, key, test_fraction, holdout_fraction)
    assert set(got) == set(want) == set(strong_split.SPLIT_ARRAYS)
    for name in want:
        assert np.array_equal(got[name], want[name]), name
    # the parts partition the matrix: every pair once, test rows empty in training
    lengths = np.diff(indptr)
    assert len(got["test_rows"]) > 10 and (lengths[got["test_rows"]] >= 2).all()
    assert (np.diff(got["train_indptr"])[got["test_rows"]] == 0).all()
    kept, held = (np.split(got[f"{p}_cols"], got[f"{p}_indptr"][1:-1]) for p in ("fold", "gt"))
    for i, r in enumerate(got["test_rows"]):
        assert len(kept[i]) >= 1 and len(held[i]) >= 1
        assert sorted(np.concatenate([kept[i], held[i]])) == sorted(cols[indptr[r] : indptr[r + 1]])
    assert len(got["train_cols"]) + len(got["fold_cols"]) + len(got["gt_cols"]) == len(cols)


def _brute_force_ids(queries: np.ndarray, col_table: np.ndarray, known: list[np.ndarray], k: int):
    scores = queries.astype(np.float64) @ col_table.astype(np.float64).T
    for i, row in enumerate(known):
        scores[i, row] = -np.inf
    return np.argsort(-scores, axis=1, kind="stable")[:, :k]


def test_evaluate_test_is_a_brute_force_ranking_of_the_folded_in_rows(monkeypatch):
    rng = np.random.default_rng(3)
    num_cols, dim, n = 300, 6, 70
    col_table = rng.normal(0, 0.5, (num_cols, dim)).astype(np.float32)
    config = TrainConfig(data="x", model_dir="unused", dim=dim, table_dtype="float32")
    model = Model(None, col_table, config, 1)
    sizes = np.where(np.arange(n) % 7 == 0, rng.integers(65, 128, n), rng.integers(1, 12, n))
    # exclusion widths 64 and 128: rows grouped by width, each group compiled apart
    known = [rng.choice(num_cols, size, replace=False) for size in sizes]
    gts = [
        rng.choice(np.setdiff1d(np.arange(num_cols), row), rng.integers(1, 9), replace=False)
        for row in known
    ]
    phases = []
    ranking = {
        "ks": [5, 20],
        "ndcg_k": 30,
        "approx": False,
        "recall_target": 0.95,
        "sample_rows": 16,
    }
    got = de_sparse_children.evaluate_test(
        model,
        RaggedRows.from_lists(known),
        gts,
        ranking,
        lambda name, seconds, **kw: phases.append(name),
    )
    ids = _brute_force_ids(fold_in(col_table, known, config), col_table, known, 30)
    for k in (5, 20):
        hits = [len(set(ids[i, :k]) & set(gts[i])) for i in range(n)]
        assert got[f"recall@{k}"] == pytest.approx(
            np.mean([h / min(k, len(g)) for h, g in zip(hits, gts)])
        )
        assert got[f"recall_gt@{k}"] == pytest.approx(
            np.mean([h / len(g) for h, g in zip(hits, gts)])
        )
    dcg = [sum(1 / np.log2(j + 2) for j in range(30) if ids[i, j] in set(gts[i])) for i in range(n)]
    ideal = [sum(1 / np.log2(j + 2) for j in range(min(30, len(g)))) for g in gts]
    assert got["ndcg@30"] == pytest.approx(np.mean(np.divide(dcg, ideal)))
    assert (got["rows"], got["k"], got["topk"], got["sample_rows"]) == (n, 30, "exact", 16)
    # approx_max_k on CPU: exact or nearly
    assert 0.9 <= got["approx_recall"] <= 1.0
    assert phases == [
        "fold-in",
        "column table to the device",
        "top 30 (exact)",
        "metrics",
        "top 30 (approximate, sample)",
    ]
    # the accelerators' block loop (on CPU with scan=False): the same figures, its blocks counted
    counted = {}
    blocks = de_sparse_children.evaluate_test(
        model,
        RaggedRows.from_lists(known),
        gts,
        dict(ranking, scan=False),
        lambda name, seconds, **kw: counted.update({name: kw}),
    )
    for name in ("recall@5", "recall@20", "recall_gt@20", "ndcg@30"):
        assert blocks[name] == pytest.approx(got[name], abs=1e-12), name
    top = counted["top 30 (exact)"]
    assert 0 < top["blocks_scored"] <= top["blocks"]
    # past its deadline it stops after a chunk of rows, and its figures are those rows'
    monkeypatch.setattr(de_sparse_children, "EVAL_CHUNK", 16)
    cut = de_sparse_children.evaluate_test(
        model, RaggedRows.from_lists(known), gts, ranking, lambda *a, **kw: None, deadline=0.0
    )
    hits = [len(set(ids[i, :5]) & set(gts[i])) for i in range(16)]
    assert (cut["rows"], cut["test_rows"]) == (16, n)
    assert cut["recall@5"] == pytest.approx(
        np.mean([h / min(5, len(g)) for h, g in zip(hits, gts)])
    )
