"""The whole job on WAT input (written by `wat_writer`): a graph worked out by hand, the real
Common Crawl sample, and bad input flowing through without loss."""

from __future__ import annotations

import json

import pytest

from webgraph_pipeline import contract
from webgraph_pipeline.cli import main
from webgraph_pipeline.wat_writer import write_wat_files

from test_pipeline_graph import read_split, read_vocab  # noqa: E402  (tests/ is on sys.path)

A, B, C = "http://a.de/", "http://a.de/b/x.html", "http://a.de/b/y.html"
D, E, F, H = "http://d.de/", "http://e.com/", "http://f.de/", "http://h.de/p?q=1"

# The hand graph. Same-host links (A, B, C) are written relative by the WAT writer; B links to A
# through a URL that only normalization makes equal to A; every page also carries an image, a
# stylesheet and a `#top` link that must not become edges.
HAND_PAGES = [
    (A, [B, C, E, H]),
    (B, ["HTTP://A.DE:80/", C]),
    (C, [A, B, F]),
    (D, [A, B, H]),
    (E, [A, B]),
    (F, [C]),
    (H, [A, D]),
]
# Worked out by hand (see the module docstring of this test for the rules):
# TLD filter {de}: drops A->E, E->A, E->B (3 edges); 14 edges remain.
# Degrees then (out, in): A (3, 4), B (2, 3), C (3, 3), D (3, 1), F (1, 1), H (2, 2).
# K=2, one pass: D and F go; edges among {A, B, C, H}: 8 (6 dropped: C->F, D->A, D->B, D->H, F->C, H->D).
# After that pass H has one out-link and one in-link (the paper's one-pass approximation);
# a second pass drops H and its 2 edges, leaving the triangle A, B, C.
ONE_PASS_IDS = {A: 0, B: 1, C: 2, H: 3}  # id_buckets=1: ids in sorted URL order
ONE_PASS_ROWS = {0: (1, 2, 3), 1: (0, 2), 2: (0, 1), 3: (0,)}
TWO_PASS_ROWS = {0: (1, 2), 1: (0, 2), 2: (0, 1)}


@pytest.fixture(scope="module")
def hand_wat(tmp_path_factory):
    out = tmp_path_factory.mktemp("hand_wat")
    write_wat_files(HAND_PAGES, str(out), records_per_file=3)
    return out


def run_job(args, capsys):
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    assert code == 0, captured.err[-2000:]
    return captured.out


@pytest.mark.parametrize("passes, rows", [(1, ONE_PASS_ROWS), (2, TWO_PASS_ROWS)])
def test_hand_graph_through_wat(hand_wat, tmp_path, capsys, passes, rows):
    out = tmp_path / "out"
    run_job(["--input", hand_wat / "*.warc.wat.gz", "--output", out, "--tlds", "de", "--min_links", "2",
             "--degree_passes", passes, "--id_buckets", "1", "--test_fraction", "0", "--num_shards", "2"], capsys)
    vocab = read_vocab(out)
    assert vocab == {i: url for url, i in ONE_PASS_IDS.items() if i in rows}
    train = read_split(out, "train")
    assert {r: c for r, c, _ in train} == rows
    assert read_split(out, "test") == []
    expected_t = {}
    for r, cols in rows.items():
        for c in cols:
            expected_t.setdefault(c, []).append(r)
    assert {r: c for r, c, _ in read_split(out, "train_t")} == {c: tuple(sorted(r)) for c, r in expected_t.items()}
    stats = json.loads((out / contract.STATS_FILE).read_text())
    assert stats["counters"]["dropped_edges.tld_filter"] == 3
    assert stats["counters"]["dropped_nodes.degree_filter"] == (2 if passes == 1 else 3)
    assert stats["counters"]["dropped_edges.degree_filter"] == (6 if passes == 1 else 8)
    assert stats["nodes"] == len(rows) and stats["edges"] == sum(len(c) for c in rows.values())
