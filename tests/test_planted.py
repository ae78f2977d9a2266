"""The planted graph (`webgraph_contract.planted`): its structure, its links against the stated
probabilities (host and device), the oracle against a brute-force ranking, and its dataset
directory through the contract (`dataset_writer`)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from alx_trainer import loading
from alx_trainer.data.dataset import open_dataset
from webgraph_contract import (
    dataset_reader,
    dataset_writer,
    layout,
    planted,
    stats_json,
    synthetic_matrix,
)
from webgraph_contract.ragged import RaggedRows
from webgraph_pipeline import splits

# small enough for an N x N matrix of probabilities, ten communities to see the structure
PARAMS = planted.Params(pages=3000, seed=5, communities=10, degree_min=12.0, degree_cap=300)


@pytest.fixture(scope="module")
def structure() -> planted.Structure:
    return planted.structure(PARAMS)


@pytest.fixture(scope="module")
def host(structure) -> planted.Graph:
    return planted.host_graph(structure, threads=2)


@pytest.fixture(scope="module")
def device(structure) -> planted.Graph:
    return planted.device_graph(structure)[0]


@pytest.fixture(scope="module")
def device_chunks(structure) -> planted.Graph:
    """Drawn in chunks of at most 4096 draws (a few pages each), not in one."""
    return planted.device_graph(structure, chunk_draws=4096)[0]


def law(rank: np.ndarray, n, a: float) -> np.ndarray:
    """q(r; n, a) as the module's docstring states it, written directly in float64."""
    rank = np.asarray(rank, np.float64)
    return ((rank + 1) ** (1 - a) - (rank + 2) ** (1 - a)) / (1 - (np.asarray(n) + 1.0) ** (1 - a))


def draw_probabilities(s: planted.Structure) -> np.ndarray:
    """P[i, t]: one draw of page i reaches page t (float64 [N, N]), from the stated law."""
    p = s.params
    c = s.community
    same = c[:, None] == c[None, :]
    q_in = law(s.community_rank[None, :], s.sizes[c][:, None], p.community_popularity)
    q_out = law(s.global_rank, p.pages, p.global_popularity)[None, :]
    return p.in_share * np.where(same, q_in, 0.0) + (1 - p.in_share) * q_out


def all_links(g: planted.Graph) -> RaggedRows:
    """Every page's links (train, or fold-in and held out together), rows in id order."""
    rows = [np.zeros(0, np.int64)] * g.structure.params.pages
    for r, ids in g.train:
        rows[r] = ids
    for (r, fold), (_, held) in zip(g.test, g.held):
        rows[r] = np.sort(np.concatenate([fold, held]))
    return RaggedRows.from_lists(rows)


def test_structure_is_exact_and_seeded(structure):
    s, n = structure, PARAMS.pages
    share = synthetic_matrix.rank_probabilities(PARAMS.communities, PARAMS.community_exponent)
    want = 1 + share / share.sum() * (n - PARAMS.communities)
    assert s.sizes.sum() == n and np.all(np.abs(s.sizes - want) < 1)
    assert np.array_equal(np.bincount(s.community, minlength=PARAMS.communities), s.sizes)
    for c in range(PARAMS.communities):  # ranks 0..size-1 inside each community
        members = np.flatnonzero(s.community == c)
        assert sorted(s.community_rank[members]) == list(range(s.sizes[c]))
        assert np.array_equal(s.page_of_slot[s.starts[c] + s.community_rank[members]], members)
    assert sorted(s.global_rank) == list(range(n))
    assert np.array_equal(s.page_of_rank[s.global_rank], np.arange(n))
    assert s.draws.min() >= 12 and s.draws.max() <= 300
    again, other = planted.structure(PARAMS), planted.structure(planted.Params(3000, seed=6))
    assert np.array_equal(again.page_of_slot, s.page_of_slot)
    assert not np.array_equal(other.page_of_slot, s.page_of_slot)


def test_law_sums_to_one_and_probability_matches_it(structure):
    for n, a in ((1, 1.2), (17, 1.1), (5000, 1.5)):
        assert planted.rank_mass(np.arange(n), n, a).sum() == pytest.approx(1, abs=1e-12)
        assert np.allclose(planted.rank_mass(np.arange(n), n, a), law(np.arange(n), n, a))
    full = draw_probabilities(structure)
    assert np.allclose(full.sum(axis=1), 1)
    i, t = np.random.default_rng(0).integers(0, PARAMS.pages, (2, 500))
    assert np.allclose(structure.probability(i, t), full[i, t], rtol=1e-12)


@pytest.mark.parametrize("backend", ["host", "device", "device_chunks"])
def test_links_follow_the_stated_probabilities(structure, backend, request):
    # page i links t (i != t) with probability 1 - (1 - P[i, t])^draws[i], independently over i:
    # each page's in-degree against its expectation over its variance (a chi-square); the links
    # counted by where they go (inside the community or not, log2 of the target's rank there), a
    # chi-square at most its degrees of freedom (a page's links are negatively correlated, so
    # sum p(1 - p) bounds the variance), which a law off by 0.05 in an exponent or 0.03 in
    # in_share exceeds several times over
    g = request.getfixturevalue(backend)
    s, n = structure, PARAMS.pages
    links = all_links(g)
    include = 1 - (1 - draw_probabilities(s)) ** s.draws[:, None]
    np.fill_diagonal(include, 0)
    var = include * (1 - include)
    observed = np.bincount(links.ids, minlength=n)
    live = var.sum(axis=0) > 1e-9
    chi2 = float((((observed - include.sum(axis=0)) ** 2 / var.sum(axis=0))[live]).sum())
    dof = int(live.sum())
    assert abs(chi2 - dof) < 6 * np.sqrt(2 * dof), (chi2, dof)
    same = s.community[:, None] == s.community[None, :]
    log_rank = lambda r: np.log2(r + 1).astype(np.int64)[None, :]
    group = np.where(same, log_rank(s.community_rank), 32 + log_rank(s.global_rank)).ravel()
    linked = np.zeros((n, n), bool)
    linked[np.repeat(np.arange(n), links.lengths), links.ids] = True
    o = np.bincount(group[linked.ravel()], minlength=64)
    e, v = np.bincount(group, include.ravel(), 64), np.bincount(group, var.ravel(), 64)
    live = v > 0
    chi2 = float(((o - e)[live] ** 2 / v[live]).sum())
    assert chi2 < live.sum() + 6 * np.sqrt(2 * live.sum()), (chi2, live.sum())
    assert o[~live].sum() == 0
    assert all(np.all(np.diff(ids) > 0) and r not in ids for r, ids in links)  # distinct, no self


@pytest.mark.parametrize("backend", ["host", "device", "device_chunks"])
def test_split_follows_the_contract(structure, backend, request):
    g = request.getfixturevalue(backend)
    p = PARAMS
    n = g.test.lengths + g.held.lengths
    assert np.array_equal(g.test.row_ids, g.held.row_ids)
    assert not np.intersect1d(g.test.row_ids, g.train.row_ids).size
    assert np.all(structure.test_u[g.test.row_ids] < p.test_fraction) and np.all(n >= 2)
    h = np.clip(np.floor(0.25 * n + structure.round_u[g.test.row_ids]), 1, n - 1)
    # the device rounds f n + u in float32: a row on the boundary may fall either way
    assert np.mean(g.held.lengths != h) <= (0 if backend == "host" else 0.002)
    for (_, fold), (_, held) in zip(g.test, g.held):
        assert not np.intersect1d(fold, held).size
    candidates = np.flatnonzero(structure.test_u < p.test_fraction)
    lengths = np.zeros(p.pages, np.int64)
    lengths[g.train.row_ids] = g.train.lengths
    assert np.all(lengths[candidates] <= 1)  # a candidate stays in train only with < 2 links


def test_the_pipeline_splits_planteds_rows_as_planted_does(structure, host, monkeypatch):
    """The same input to both: the planted graph's pages with all their links and planted's own
    uniforms (the pipeline's name hashes replaced by them). The pipeline's split
    (`splits.split_block`) picks the same test rows and holds out as many links of each; which
    links are held follows each one's own order keys (name hashes, random bits)."""
    p = PARAMS
    rows = {int(r): ids for r, ids in host.train}
    for (r, fold), (_, held) in zip(host.test, host.held):
        rows[int(r)] = np.sort(np.concatenate([fold, held]))
    pages = np.array(sorted(rows), np.int64)
    names = np.array([str(r) for r in pages], object)
    ptr = np.concatenate([[0], np.cumsum([len(rows[r]) for r in pages])]).astype(np.int64)
    cols = np.concatenate([rows[r] for r in pages]).astype(np.int64)
    real = splits.unit_hashes
    uniforms = {"row": structure.test_u, "round": structure.round_u}

    def planted_uniforms(seed, tag, row_names, link_cols=()):
        if tag in uniforms:
            return uniforms[tag][np.array(row_names, np.int64)]
        return real(seed, tag, row_names, link_cols)

    monkeypatch.setattr(splits, "unit_hashes", planted_uniforms)
    is_test, held = splits.split_block(
        names, ptr, cols, p.seed, p.test_fraction, p.holdout_fraction
    )
    assert np.array_equal(pages[is_test], host.test.row_ids)
    held_per_row = np.add.reduceat(held, ptr[:-1])[np.diff(ptr) > 0]
    test_rows = is_test[np.diff(ptr) > 0]
    assert np.array_equal(held_per_row[test_rows], host.held.lengths)
    assert not held_per_row[~test_rows].any()


def test_row_blocks_cut_rows_into_whole_rows_of_at_most_size_entries():
    rng = np.random.default_rng(3)
    for _ in range(50):
        lengths = rng.integers(0, 9, rng.integers(1, 40))
        ptr = np.concatenate([[0], np.cumsum(lengths)])
        lo = int(rng.integers(0, len(lengths)))
        hi = int(rng.integers(lo, len(lengths) + 1))
        size = int(rng.integers(1, 20))
        # the reference: rows taken one at a time while they fit, a too-long row alone
        want, start, total = [], lo, 0
        for r in range(lo, hi):
            if r > start and total + lengths[r] > size:
                want.append((start, r))
                start, total = r, 0
            total += lengths[r]
        if hi > lo:
            want.append((start, hi))
        assert list(layout.row_blocks(ptr, lo, hi, size)) == want


def test_host_and_device_agree_in_distribution(host, device):
    for a, b in ((host.train, device.train), (host.test, device.test), (host.held, device.held)):
        sa, sb = a.lengths.astype(float), b.lengths.astype(float)
        se = np.sqrt(sa.var() / len(sa) + sb.var() / len(sb))
        assert abs(sa.mean() - sb.mean()) < 4 * se
    # the same pages are test rows, but for those whose few draws gave fewer than two links
    assert len(np.setxor1d(host.test.row_ids, device.test.row_ids)) <= 2
    assert host.train.nnz != device.train.nnz or not np.array_equal(
        host.train.ids, device.train.ids
    )


def test_host_graph_does_not_depend_on_threads(structure, host):
    again = planted.host_graph(structure, threads=1)
    for a, b in ((host.train, again.train), (host.test, again.test), (host.held, again.held)):
        assert np.array_equal(a.row_ids, b.row_ids) and np.array_equal(a.indptr, b.indptr)
        assert np.array_equal(a.ids, b.ids)


def brute_force(score: np.ndarray, g: planted.Graph, k: int) -> np.ndarray:
    """Each test row's top k of `score(row)` over all pages (ties to the lower id), its fold-in
    links and itself excluded."""
    out = np.full((len(g.test), k), -1, np.int64)
    for j, (r, fold) in enumerate(g.test):
        s = score(r).astype(np.float64).copy()
        s[fold] = s[r] = -np.inf
        ranked = np.lexsort((np.arange(len(s)), -s))
        ranked = ranked[np.isfinite(s[ranked])]
        out[j, : min(k, len(ranked))] = ranked[:k]
    return out


@pytest.mark.parametrize("k", [5, 50])
@pytest.mark.parametrize("in_share", [PARAMS.in_share, 0.1])
def test_oracle_is_the_brute_force_ranking_by_the_stated_probabilities(
    structure, host, k, in_share
):
    # in_share 0.1: most of a row's top k are other communities' pages (popular ones)
    if in_share != PARAMS.in_share:
        structure = planted.structure(dataclasses.replace(PARAMS, in_share=in_share))
        host = planted.host_graph(structure)
    full = draw_probabilities(structure)
    expected = brute_force(lambda r: full[r], host, k)
    assert np.array_equal(planted.oracle_top_k(structure, host.test, k), expected)


def test_popularity_is_the_brute_force_ranking_by_training_in_degree(host):
    degree = planted.in_degree(host)
    assert np.array_equal(degree, np.bincount(host.train.ids, minlength=PARAMS.pages))
    expected = brute_force(lambda r: degree, host, 50)
    assert np.array_equal(planted.popularity_top_k(degree, host.test, 50), expected)


def test_dataset_directory_passes_the_contract(tmp_path, host):
    out = str(tmp_path / "planted")
    (tmp_path / "planted").mkdir()
    (tmp_path / "planted" / "vocab.tsv-00000-of-00001").write_text("0\tstale\n")
    # 7 shards of 3000 ids: k * 3000 / 7 is no whole number, so cutting at its floor or at its
    # ceiling would place some ids elsewhere
    stats = planted.write(out, host, num_shards=7, workers=2, scale=3000 / 19_700_000)
    assert json.loads((tmp_path / "planted" / "stats.json").read_text()) == stats
    # an earlier write's shards go
    assert not list((tmp_path / "planted").glob("vocab*"))
    dataset = open_dataset(out)
    assert (dataset.num_rows, dataset.num_cols, dataset.bipartite) == (3000, 3000, False)
    assert dataset.protocol == "strong_generalization"
    assert dataset.fingerprint == stats_json.fingerprint_dataset(out)["dataset_fingerprint"]
    assert planted.params_of(stats) == PARAMS
    read_back = {}
    for split, rows in (("train", host.train), ("test", host.test)):
        files = layout.iter_split_files(out, split)
        assert len(files) == 7 and layout.missing_shards(files) == ([], None)
        read = [dataset_reader.read_records([f]) for f in files]
        # shard k holds the ids with id * 7 // 3000 == k, the pipeline's rule (`layout.shard_of`)
        assert all(
            r * 7 // 3000 == layout.shard_of(r, 3000, 7) == k
            for k, part in enumerate(read)
            for r, _, _ in part
        )
        records = read_back[split] = [rec for part in read for rec in part]
        assert [r for r, _, _ in records] == rows.row_ids.tolist()
        assert all(np.array_equal(c, ids) for (_, c, _), (_, ids) in zip(records, rows))
        if split == "test":
            assert all(np.array_equal(gt, ids) for (_, _, gt), (_, ids) in zip(records, host.held))
    pairs = {(r, int(c)) for r, ids in host.train for c in ids}
    transpose = dataset_reader.read_split(out, "train_t")
    assert [c for c, _, _ in transpose] == sorted({c for _, c in pairs})
    assert all(list(rows) == sorted(rows) for _, rows, _ in transpose)
    assert {(int(r), c) for c, rows, _ in transpose for r in rows} == pairs
    assert stats["splits"] == {
        "train": len(host.train),
        "train_t": len(transpose),
        "test": len(host.test),
    }
    # the links and out-degrees counted from the records read back: a training row's links and a
    # test row's fold-in and held-out ones
    out_degree = np.zeros(PARAMS.pages, np.int64)
    for r, cols, gt in read_back["train"] + read_back["test"]:
        out_degree[r] += len(cols) + len(gt)
    assert stats["edges"] == int(out_degree.sum())
    assert stats["out_degree_histogram"] == [
        [d, int(n)] for d, n in enumerate(np.bincount(out_degree)) if d and n
    ]
    assert stats["test_links"] == {"col_tag": host.test.nnz, "gt_tag": host.held.nnz}
    links = all_links(host)
    assert stats["in_degree_histogram"] == [
        [d, int(n)] for d, n in enumerate(np.bincount(np.bincount(links.ids))) if d and n
    ]
    # the evaluator's view of it
    rows = loading.eval_data(out)
    assert rows.shared and len(rows.known) == len(host.test)
    assert np.array_equal(rows.popularity, planted.in_degree(host).astype(np.float32))
    planted.write(out, host, num_shards=2, workers=1)
    # the 7-shard files are gone
    assert len(layout.iter_split_files(out, "train_t")) == 2


def test_command_line_writes_a_dataset(tmp_path, capsys):
    out = str(tmp_path / "d")
    assert planted.main(["--out", out, "--scale", "0.0002", "--seed", "3", "--shards", "2"]) == 0
    assert "3,940 pages" in capsys.readouterr().out
    stats = stats_json.read_stats(out)
    assert planted.params_of(stats) == planted.Params.at_scale(0.0002, 3)
    assert stats["config"]["scale"] == 0.0002
    assert planted.main(["--out", out, "--scale", "0"]) == 2
    argv = ["--out", out, "--scale", "0.0002", "--seed", "3", "--workers", "2", "--json"]
    assert planted.main(argv) == 0
    figures = json.loads(capsys.readouterr().out)
    again = stats_json.read_stats(out)
    assert figures["shards"] == again["num_shards"] == 2  # --shards 0: one per writing process
    assert (figures["links"], figures["test_rows"]) == (stats["edges"], stats["splits"]["test"])
    assert again["dataset_fingerprint"] == stats["dataset_fingerprint"]  # the same graph again


def test_writer_output_does_not_depend_on_blocks_or_workers(tmp_path, host):
    config = planted.config_of(PARAMS)
    args = (PARAMS.pages, host.train, host.test, host.held, config)
    a = dataset_writer.write_dataset(str(tmp_path / "a"), *args, num_shards=2, workers=2)
    b = dataset_writer.write_dataset(str(tmp_path / "b"), *args, 2, workers=1, block_ids=37)
    assert a["file_sha256"] == b["file_sha256"] and len(a["file_sha256"]) == 6


def test_writer_refuses_rows_that_break_the_contract(tmp_path, host):
    out, n = str(tmp_path / "x"), PARAMS.pages
    config = planted.config_of(PARAMS)
    with pytest.raises(ValueError, match="same rows"):
        dataset_writer.write_dataset(out, n, host.train, host.test, host.held.take(0, 3), config, 1)
    with pytest.raises(ValueError, match="in both"):
        both = RaggedRows.concat([host.train, host.test]).select(
            np.argsort(np.concatenate([host.train.row_ids, host.test.row_ids]))
        )
        dataset_writer.write_dataset(out, n, both, host.test, host.held, config, 1)
    with pytest.raises(ValueError, match="outside"):
        dataset_writer.write_dataset(out, n - 1, host.train, host.test, host.held, config, 1)
