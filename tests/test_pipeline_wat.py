"""The whole job on WAT input (written by `wat_writer`): a graph worked out by hand, the real
Common Crawl sample, and bad input flowing through without loss."""

from __future__ import annotations

import json

import pytest

from webgraph_contract import stats_json
from webgraph_pipeline.cli import main
from webgraph_pipeline.wat_writer import write_wat_files

from extract_fixtures import a_links, envelope, wat_bytes  # noqa: E402  (part 1's helpers)
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
# K=2, one pass: D and F go; edges among {A, B, C, H}: 8 (6 dropped: C->F, D->A, D->B, D->H, F->C,
# H->D).
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
    run_job(
        [
            "--input",
            hand_wat / "*.warc.wat.gz",
            "--output",
            out,
            "--tlds",
            "de",
            "--min_links",
            "2",
            "--degree_passes",
            passes,
            "--id_buckets",
            "1",
            "--test_fraction",
            "0",
            "--num_shards",
            "2",
        ],
        capsys,
    )
    vocab = read_vocab(out)
    assert vocab == {i: url for url, i in ONE_PASS_IDS.items() if i in rows}
    train = read_split(out, "train")
    assert {r: c for r, c, _ in train} == rows
    assert read_split(out, "test") == []
    expected_t = {}
    for r, cols in rows.items():
        for c in cols:
            expected_t.setdefault(c, []).append(r)
    assert {r: c for r, c, _ in read_split(out, "train_t")} == {
        c: tuple(sorted(r)) for c, r in expected_t.items()
    }
    stats = json.loads((out / stats_json.STATS_FILE).read_text())
    assert stats["counters"]["dropped_edges.tld_filter"] == 3
    assert stats["counters"]["dropped_nodes.degree_filter"] == (2 if passes == 1 else 3)
    assert stats["counters"]["dropped_edges.degree_filter"] == (6 if passes == 1 else 8)
    assert stats["nodes"] == len(rows) and stats["edges"] == sum(len(c) for c in rows.values())


# --- part 1's bad-input cases, each in its own file between valid pages, through the whole job ----


def _good(i):
    before = envelope(f"http://before{i}.de/", a_links(f"http://x{i}.de/1", "/2"))
    after = envelope(f"http://after{i}.de/", a_links(f"http://y{i}.de/1"))
    edges = {
        (f"http://before{i}.de/", f"http://x{i}.de/1"),
        (f"http://before{i}.de/", f"http://before{i}.de/2"),
        (f"http://after{i}.de/", f"http://y{i}.de/1"),
    }
    return before, after, edges


def _flip(data, start, end):
    damaged = bytearray(data)
    for i in range(start, end):
        damaged[i] ^= 0x5A
    return bytes(damaged)


BAD_URLS = {
    "javascript:void(0)": "javascript_scheme",
    "mailto:a@b.de": "mailto_scheme",
    "http://": "no_host",
    "http://a.de/with space": "whitespace",
    "http://a.de:99999/": "bad_port",
    "http://" + "x" * 64 + ".de/": "label_too_long",
    "http://[::1": "bad_ipv6",
}
GOOD_URLS = {
    "http://bücher.de/": "http://xn--bcher-kva.de/",
    "HTTP://UPPER.DE/Path": "http://upper.de/Path",
    "https://port.de:443/": "https://port.de/",
}


def bad_input_files(directory):
    """Write one WAT file per bad-input case; return every edge the valid records hold."""
    expected = set()
    lost = envelope("http://lost.de/", a_links("http://z.de/"))
    cases = {}
    b, a, e = _good(0)
    data, offs = wat_bytes([b, lost, a])
    cases["corrupt_member"] = (_flip(data, offs[1] + 30, offs[1] + 60), e)
    b, a, e = _good(1)
    data, offs = wat_bytes(
        [b, a, envelope("http://cut.de/", a_links(*[f"http://c.de/{i}" for i in range(50)]))]
    )
    cases["cut_mid_record"] = (data[: (offs[2] + len(data)) // 2], e)
    b, a, e = _good(2)
    data, offs = wat_bytes([b, lost, a])
    cases["truncated_member"] = (data[: (offs[1] + offs[2]) // 2] + data[offs[2] :], e)
    b, a, e = _good(3)
    data, offs = wat_bytes([b, a], gzip=False)
    cases["garbage_between"] = (
        data[: offs[1]] + b"this is not a WARC record\r\n\r\n" + data[offs[1] :],
        e,
    )
    b, a, e = _good(4)
    cases["not_json"] = (wat_bytes([b, b'{"Envelope": {"truncated', b"\xff\xfe", a])[0], e)
    b, a, e = _good(5)
    cases["missing_keys"] = (wat_bytes([b, {"Envelope": {}}, {"Container": 1}, a])[0], e)
    b, a, e = _good(6)
    others = [("warcinfo", b"software: x\r\n"), ("resource", b"abc")]
    cases["other_types"] = (
        wat_bytes([others[0], b, others[1], envelope("http://req.de/", warc_type="request"), a])[0],
        e,
    )
    b, a, e = _good(7)
    cases["no_html"] = (wat_bytes([b, envelope("http://bare.de/", html=False), a])[0], e)
    b, a, e = _good(8)
    page = envelope("http://page.de/", a_links(*BAD_URLS, *GOOD_URLS))
    cases["bad_urls"] = (
        wat_bytes([b, page, a])[0],
        e | {("http://page.de/", v) for v in GOOD_URLS.values()},
    )
    for name, (data, edges) in cases.items():
        (directory / f"{name}.warc.wat.gz").write_bytes(data)
        expected |= edges
    return expected


def test_every_bad_input_case_flows_through_the_job_without_loss(tmp_path, capsys):
    wat_dir = tmp_path / "wat"
    wat_dir.mkdir()
    expected = bad_input_files(wat_dir)
    out = tmp_path / "out"
    run_job(
        [
            "--input",
            wat_dir / "*.warc.wat.gz",
            "--output",
            out,
            "--test_fraction",
            "0",
            "--num_shards",
            "2",
        ],
        capsys,
    )
    vocab = read_vocab(out)
    got = {(vocab[r], vocab[c]) for r, cols, _ in read_split(out, "train") for c in cols}
    assert got == expected
    stats = json.loads((out / stats_json.STATS_FILE).read_text())
    counts = stats["counters"]
    damaged = ["corrupt_member", "cut_mid_record", "garbage_between", "truncated_member"]
    assert (
        counts["files.read"] == 5
        and counts["files.partly_read"] == 4
        and stats["unreadable_files"] == []
    )
    assert stats["partly_read_files"] == [str(wat_dir / f"{name}.warc.wat.gz") for name in damaged]
    assert counts["damage.corrupt_region"] + counts.get("damage.truncated_record", 0) == 4
    assert counts["dropped_records.not_json"] == 2 and counts["dropped_records.missing_keys"] == 2
    assert (
        counts["dropped_records.other_warc_type"] == 2
        and counts["dropped_records.not_response"] == 1
    )
    assert counts["dropped_records.no_html_metadata"] == 1
    for reason in BAD_URLS.values():
        assert counts[f"dropped_links.{reason}"] == 1, reason
    assert all(v > 0 for v in stats["dropped"].values()) and "links.kept" not in stats["dropped"]


def test_junk_and_empty_files_among_good_ones(tmp_path, capsys):
    wat_dir = tmp_path / "wat"
    wat_dir.mkdir()
    b, a, expected = _good(0)
    (wat_dir / "good.warc.wat.gz").write_bytes(wat_bytes([b, a])[0])
    (wat_dir / "junk.warc.wat.gz").write_bytes(b"\x1f\x8b\x08" + bytes(range(256)) * 20)
    (wat_dir / "empty.warc.wat.gz").write_bytes(b"")
    out = tmp_path / "out"
    run_job(["--input", wat_dir / "*.warc.wat.gz", "--output", out, "--test_fraction", "0"], capsys)
    stats = json.loads((out / stats_json.STATS_FILE).read_text())
    vocab = read_vocab(out)
    assert {
        (vocab[r], vocab[c]) for r, cols, _ in read_split(out, "train") for c in cols
    } == expected
    assert stats["counters"]["files.read"] == 1 and stats["counters"]["files.unreadable"] == 2
    assert stats["dropped"] == {"unreadable_files.bad_gzip": 1, "unreadable_files.empty": 1}
    assert stats["unreadable_files"] == [
        str(wat_dir / "empty.warc.wat.gz"),
        str(wat_dir / "junk.warc.wat.gz"),
    ]
    assert len(stats["input_files"]) == 3


def test_real_common_crawl_sample(data_dir, tmp_path, capsys):
    """The bundled real WAT: one page with hyperlinks (0pointer.de/photos/, 13 distinct targets)."""
    out = tmp_path / "cc"
    # One source page: no test row, so the job needs --allow_empty to keep the dataset.
    run_job(
        [
            "--input",
            data_dir / "commoncrawl" / "*.wat",
            "--output",
            out,
            "--num_shards",
            "1",
            "--allow_empty",
        ],
        capsys,
    )
    stats = json.loads((out / stats_json.STATS_FILE).read_text())
    assert stats["nodes"] == 14 and stats["edges"] == 13
    assert stats["splits"]["train"] + stats["splits"]["test"] == 1 and stats["splits"][
        "train_t"
    ] in (0, 13)
    assert stats["counters"]["dropped_records.no_html_metadata"] == 1


def test_hollins_crawl_as_wat_equals_hollins_edge_list(data_dir, tmp_path, capsys):
    """The real hollins.edu graph read two ways, packed into WAT by wat_writer (relative links, base
    hrefs, noise entries) and as an id edge list joined with its URL list, gives identical files."""
    from webgraph_pipeline.wat_writer import read_edge_list

    hollins = data_dir / "hollins"
    wat_dir = tmp_path / "wat"
    write_wat_files(
        read_edge_list(str(hollins / "edges.txt"), str(hollins / "urls.txt"), header=True),
        str(wat_dir),
        2500,
    )
    common = ["--min_links", "3", "--num_shards", "2"]
    run_job(
        ["--input", wat_dir / "*.warc.wat.gz", "--output", tmp_path / "from_wat", *common], capsys
    )
    run_job(
        [
            "--edge_format",
            "pairs",
            "--header",
            "--input",
            hollins / "edges.txt",
            "--urls",
            hollins / "urls.txt",
            "--output",
            tmp_path / "from_edges",
            *common,
        ],
        capsys,
    )
    names = sorted(p.name for p in (tmp_path / "from_wat").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "from_edges").iterdir())
    for name in names:
        if name.endswith((".json", ".png")):
            continue
        assert (tmp_path / "from_wat" / name).read_bytes() == (
            tmp_path / "from_edges" / name
        ).read_bytes(), name
    stats = json.loads((tmp_path / "from_edges" / stats_json.STATS_FILE).read_text())
    assert stats["nodes"] > 1000 and stats["edges"] > 10_000
    # Both equal the plain-Python reference of the rules (ids, rows, test rows, held-out links).
    from reference_graph import reference_dataset

    pages = read_edge_list(str(hollins / "edges.txt"), str(hollins / "urls.txt"))
    ref = reference_dataset([(u, t) for u, targets in pages for t in targets], min_links=3)
    assert read_vocab(tmp_path / "from_wat") == ref["vocab"]
    for split in ("train", "train_t", "test"):
        assert sorted(read_split(tmp_path / "from_wat", split)) == ref[split], split
