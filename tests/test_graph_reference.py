"""The columnar graph stage (`BuildWebGraph` on edge batches) against the plain-Python reference of
the rules (reference_graph.py): the same vocabulary, rows, test rows, held-out links, counters and
summary; and fingerprint collisions forced by a narrowed fingerprint."""

from __future__ import annotations

import json
import random

import apache_beam as beam
import numpy as np
import pytest
from reference_graph import reference_dataset

from webgraph_contract import dataset_reader, stats_json
from webgraph_pipeline.counters import collect_counters
from webgraph_pipeline.fingerprints import (
    FingerprintCollision,
    distinct_entries,
    fingerprint,
    merge_vocabulary,
)
from webgraph_pipeline.graph import BuildWebGraph
from webgraph_pipeline.graph_config import GraphConfig
from webgraph_pipeline.wat_writer import synthetic_pages
from webgraph_pipeline.write import WriteTfRecords

GRAPH_COUNTERS = ("dropped_edges.", "dropped_nodes.")


def batches_of(edges, size):
    return [
        ([s for s, _ in edges[i : i + size]], [t for _, t in edges[i : i + size]])
        for i in range(0, len(edges), size)
    ]


def read_dataset(out_dir, bipartite):
    read = lambda s: sorted(
        (r, tuple(c.tolist()), tuple(g.tolist()))  # noqa: E731
        for r, c, g in dataset_reader.read_split(str(out_dir), s)
    )
    got = {s: read(s) for s in ("train", "train_t", "test")}
    got["vocab"] = dataset_reader.read_vocab(str(out_dir))
    got["col_vocab"] = (
        dataset_reader.read_vocab(str(out_dir), columns=True) if bipartite else got["vocab"]
    )
    return got


def run_stage(edges, config, out_dir, num_buckets=8, batch=700, bits=64):
    out_dir.mkdir(exist_ok=True)
    p = beam.Pipeline()
    graph = (
        p
        | beam.Create(batches_of(edges, batch))
        | BuildWebGraph(config, num_buckets=num_buckets, fingerprint_bits=bits)
    )
    graph | WriteTfRecords(str(out_dir), config.to_dict(), ["in-memory"], num_shards=3)
    result = p.run()
    result.wait_until_finish()
    counters = {k: v for k, v in collect_counters(result).items() if k.startswith(GRAPH_COUNTERS)}
    return json.loads((out_dir / stats_json.STATS_FILE).read_text()), counters


def assert_same_as_reference(edges, config, out_dir, **kwargs):
    stats, counters = run_stage(edges, config, out_dir, **kwargs)
    ref = reference_dataset(
        edges,
        config.tlds,
        config.min_links,
        config.degree_passes,
        config.bipartite,
        config.id_buckets,
        config.seed,
        config.test_fraction,
        config.holdout_fraction,
    )
    got = read_dataset(out_dir, config.bipartite)
    for key in ("vocab", "col_vocab", "train", "train_t", "test"):
        assert got[key] == ref[key], key
    assert counters == ref["counters"]
    assert stats["edges"] == ref["edges"]
    assert stats["out_degree_histogram"] == ref["out_degree_histogram"]
    assert stats["in_degree_histogram"] == ref["in_degree_histogram"]
    assert stats["splits"] == {s: len(ref[s]) for s in ("train", "train_t", "test")}
    return ref


@pytest.fixture(scope="module")
def noisy_edges():
    """A synthetic web graph with every edge's order shuffled, 10% repeated and some self-loops."""
    edges = [(u, t) for u, links in synthetic_pages(2500, mean_out=8, seed=3) for t in links]
    rng = random.Random(1)
    edges += rng.sample(edges, len(edges) // 10) + [(u, u) for u, _ in edges[::97]]
    rng.shuffle(edges)
    return edges


@pytest.mark.parametrize(
    "config",
    [
        GraphConfig(tlds=("com", "de"), min_links=3, degree_passes=2, test_fraction=0.2, seed=5),
        GraphConfig(min_links=4, test_fraction=0.3, id_buckets=1),
        GraphConfig(min_links=0, test_fraction=0.1, id_buckets=7, seed=2),
    ],
    ids=["tld_two_passes", "one_pass_one_id_bucket", "no_filter"],
)
def test_graph_stage_equals_reference(noisy_edges, config, tmp_path):
    ref = assert_same_as_reference(noisy_edges, config, tmp_path)
    assert ref["test"] and ref["counters"]["dropped_edges.duplicate"] > 0


def test_bipartite_equals_reference(tmp_path):
    rng = random.Random(4)
    edges = [(str(u), str(rng.randrange(60))) for u in range(80) for _ in range(2 + u % 7)]
    edges += [("5", "5"), ("5", "5")]  # a user and an item that share a name: no self-loop
    config = GraphConfig(min_links=3, bipartite=True, test_fraction=0.3, degree_passes=2)
    ref = assert_same_as_reference(edges, config, tmp_path, num_buckets=3, batch=50)
    assert "dropped_edges.self_loop" not in ref["counters"]


def test_one_bucket_and_one_batch_give_the_same_bytes(noisy_edges, tmp_path):
    config = GraphConfig(min_links=3, test_fraction=0.2)
    run_stage(noisy_edges, config, tmp_path / "a", num_buckets=16, batch=500)
    run_stage(noisy_edges, config, tmp_path / "b", num_buckets=1, batch=len(noisy_edges))
    for path in sorted((tmp_path / "a").iterdir()):
        assert path.read_bytes() == (tmp_path / "b" / path.name).read_bytes(), path.name


# one batch: the two names meet inside `Fingerprint`
@pytest.mark.parametrize("one_batch", [False, True])
def test_collision_is_fatal_and_names_both(noisy_edges, tmp_path, one_batch):
    batch = len(noisy_edges) if one_batch else 700
    with pytest.raises(
        Exception, match="fingerprint collision: 'http.*' and 'http.*' share"
    ) as error:
        run_stage(noisy_edges, GraphConfig(), tmp_path, bits=12, batch=batch)
    names = str(error.value).split("'")[1::2][:2]
    assert names[0] != names[1]
    assert (fingerprint(names, 12) == fingerprint(names, 12)[0]).all()


def test_distinct_entries_keeps_one_entry_per_name_and_refuses_collisions():
    names = np.array(["b", "a", "b", "c", "a", "b"], dtype=object)
    fps, at = distinct_entries(fingerprint(names), names)
    assert sorted(names[at]) == ["a", "b", "c"] and list(fps) == sorted(fps)
    assert (fingerprint(names[at]) == fps).all()
    with pytest.raises(FingerprintCollision, match="'a' and 'b' share fingerprint 0x7"):
        distinct_entries(
            np.array([7, 3, 7], dtype=np.uint64), np.array(["a", "c", "b"], dtype=object)
        )


def test_merge_vocabulary_keeps_repeats_and_refuses_collisions():
    names = np.array(["b", "a", "b", "c", "a"], dtype=object)
    fps, merged = merge_vocabulary(fingerprint(names), names)
    merged = merged.to_pylist()
    assert sorted(merged) == ["a", "b", "c"] and len(set(fps.tolist())) == 3
    assert fingerprint(merged).tolist() == fps.tolist()
    with pytest.raises(FingerprintCollision, match="'a' and 'b' share fingerprint 0x7"):
        merge_vocabulary(np.array([7, 7], dtype=np.uint64), np.array(["a", "b"], dtype=object))
