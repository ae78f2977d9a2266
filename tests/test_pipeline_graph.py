"""BuildWebGraph + WriteTfRecords on the DirectRunner, checked against an independent plain-Python
reference of the rules (TLD filter, one or more degree passes) and against the contract."""

from __future__ import annotations

import collections
import json
import os

import apache_beam as beam
import pytest

from webgraph_contract import dataset_reader, layout, stats_json
from webgraph_pipeline.graph import BuildWebGraph
from webgraph_pipeline.graph_config import GraphConfig
from webgraph_pipeline.wat_writer import synthetic_pages
from webgraph_pipeline.write import DEGREE_PLOT, WriteTfRecords


def reference_graph(edges, tlds=(), min_links=0, passes=1):
    """The WebGraph rules worked out with Python sets."""
    tld = lambda u: u.split("/")[2].split(":")[0].rsplit(".", 1)[-1]  # noqa: E731
    edges = {e for e in edges if not tlds or (tld(e[0]) in tlds and tld(e[1]) in tlds)}
    for _ in range(passes if min_links else 0):
        out_d = collections.Counter(s for s, _ in edges)
        in_d = collections.Counter(t for _, t in edges)
        keep = {n for n in out_d if out_d[n] >= min_links and in_d[n] >= min_links}
        edges = {(s, t) for s, t in edges if s in keep and t in keep}
    return edges


def read_split(data_dir, split):
    """Every record of a split, parsed with the public feature spec, as (row, cols, gt) int
    tuples."""
    return [
        (r, tuple(c.tolist()), tuple(g.tolist()))
        for r, c, g in dataset_reader.read_split(str(data_dir), split)
    ]


def read_vocab(data_dir, prefix=layout.VOCAB_PREFIX):
    return dataset_reader.read_vocab(str(data_dir), columns=prefix == layout.COL_VOCAB_PREFIX)


def build(edges, config, out_dir, num_shards=3):
    with beam.Pipeline() as p:
        edges = sorted(edges)
        batches = [
            ([s for s, _ in edges[i : i + 500]], [t for _, t in edges[i : i + 500]])
            for i in range(0, len(edges), 500)
        ]
        graph = p | beam.Create(batches) | BuildWebGraph(config)
        graph | WriteTfRecords(str(out_dir), config.to_dict(), ["in-memory"], num_shards=num_shards)
    return json.loads((out_dir / stats_json.STATS_FILE).read_text())


def check_dataset(out_dir, expected_edges, stats):
    """The contract's invariants, and the graph equal to `expected_edges` through the vocabulary."""
    vocab = read_vocab(out_dir)
    assert sorted(vocab) == list(range(len(vocab))) and len(set(vocab.values())) == len(vocab)
    train, train_t, test = (read_split(out_dir, s) for s in ("train", "train_t", "test"))
    got = {(vocab[r], vocab[c]) for r, cols, _ in train for c in cols}
    got |= {(vocab[r], vocab[c]) for r, kept, held in test for c in kept + held}
    assert got == expected_edges
    assert set(vocab.values()) == {n for e in expected_edges for n in e}
    # train_t is exactly the transpose of train; no test row appears in it.
    transpose = collections.defaultdict(set)
    for r, cols, gt in train:
        assert gt == () and cols
        for c in cols:
            transpose[c].add(r)
    assert {r: set(c) for r, c, _ in train_t} == dict(transpose)
    test_rows = {r for r, _, _ in test}
    assert not test_rows & {r for _, rows, _ in train_t for r in rows}
    assert not test_rows & {r for r, _, _ in train}
    assert all(kept and held and not set(kept) & set(held) for _, kept, held in test)
    assert stats["nodes"] == len(vocab) and stats["edges"] == len(expected_edges)
    assert stats["splits"] == {"train": len(train), "train_t": len(train_t), "test": len(test)}
    return vocab, train, train_t, test


@pytest.fixture(scope="module")
def synthetic_edges():
    return {(u, t) for u, links in synthetic_pages(3000, mean_out=8, seed=3) for t in links}


def test_filters_ids_and_splits_match_reference(synthetic_edges, tmp_path):
    config = GraphConfig(
        tlds=("com", "de"), min_links=3, degree_passes=2, test_fraction=0.2, seed=5
    )
    stats = build(synthetic_edges, config, tmp_path)
    expected = reference_graph(synthetic_edges, {"com", "de"}, 3, passes=2)
    assert 500 < len(expected) < len(synthetic_edges)
    vocab, train, _, test = check_dataset(tmp_path, expected, stats)
    rows = len(train) + len(test)
    assert 0.15 < len(test) / rows < 0.25
    assert stats["out_degree_histogram"] == sorted(
        [d, n]
        for d, n in collections.Counter(
            collections.Counter(s for s, _ in expected).values()
        ).items()
    )
    assert sum(n for _, n in stats["in_degree_histogram"]) == len({t for _, t in expected})
    assert (tmp_path / DEGREE_PLOT).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    names = sorted(os.listdir(tmp_path))
    assert [n for n in names if n.startswith("train.tfr")] == [
        f"train.tfr-0000{i}-of-00003" for i in range(3)
    ]


def test_one_pass_leaves_nodes_below_k(synthetic_edges, tmp_path):
    config = GraphConfig(min_links=4, test_fraction=0.0)
    stats = build(synthetic_edges, config, tmp_path, num_shards=2)
    expected = reference_graph(synthetic_edges, (), 4, passes=1)
    _, train, _, test = check_dataset(tmp_path, expected, stats)
    assert test == [] and stats["splits"]["test"] == 0
    # As in the paper, one pass is an approximation: some kept nodes end with fewer than K links.
    assert min(len(c) for _, c, _ in train) < 4


def test_bipartite_interactions_have_separate_id_ranges(tmp_path):
    # users u0..u29 rate items; item ids and user ids overlap as strings on purpose.
    edges = {(f"{u}", f"{(u * 7 + k) % 25}") for u in range(30) for k in range(2 + u % 6)}
    config = GraphConfig(min_links=3, bipartite=True, test_fraction=0.3)
    stats = build(edges, config, tmp_path)
    users = {u for u, n in collections.Counter(u for u, _ in edges).items() if n >= 3}
    items = {i for i, n in collections.Counter(i for _, i in edges).items() if n >= 3}
    expected = {(u, i) for u, i in edges if u in users and i in items}
    rows, cols = read_vocab(tmp_path), read_vocab(tmp_path, layout.COL_VOCAB_PREFIX)
    assert set(rows.values()) == {u for u, _ in expected} and sorted(rows) == list(range(len(rows)))
    assert set(cols.values()) == {i for _, i in expected} and sorted(cols) == list(range(len(cols)))
    got = {
        (rows[r], cols[c])
        for s in ("train", "test")
        for r, k, h in read_split(tmp_path, s)
        for c in k + h
    }
    assert got == expected
    assert (stats["num_rows"], stats["num_cols"]) == (len(rows), len(cols))
    assert stats_json.matrix_shape(stats) == (len(rows), len(cols))
