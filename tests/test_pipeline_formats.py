"""Explicit edge-list formats: block parsing on real files, bad bytes and lines counted by reason,
ids of any kind, and published splits used as given (`--edge_format given_split`)."""

from __future__ import annotations

import collections
import gzip
import io
import json
import pathlib
import zlib

import numpy as np
import pytest

from webgraph_contract import dataset_reader, stats_json
from webgraph_pipeline.cli import main
from webgraph_pipeline.edge_formats import EdgeFormat, parse_block
from webgraph_pipeline.edges_input import read_line_blocks

TESTS_DATA = pathlib.Path(__file__).resolve().parent / "data"
SHARED_GOWALLA = pathlib.Path(__file__).resolve().parents[1] / "data" / "gowalla"


def parse_file(data: bytes, fmt: EdgeFormat, block_bytes: int = 1 << 20):
    """All edges, counts and first line numbers of a file parsed block by block, as the job does."""
    src, dst, counts, examples = [], [], collections.Counter(), {}
    for first, block_data in read_line_blocks(io.BytesIO(data), block_bytes):
        block = parse_block(block_data, first, fmt)
        src += block.src
        dst += block.dst
        counts.update(block.counts)
        for reason, numbers in block.examples.items():
            examples.setdefault(reason, []).extend(numbers)
    return list(zip(src, dst)), counts, {r: v[:5] for r, v in examples.items()}


def run_cli(args, capsys):
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


# ---- each format on a real file, edge counts worked out from the raw text
# -------------------------


def test_pairs_with_header_on_hollins(data_dir):
    text = (data_dir / "hollins" / "edges.txt").read_text()
    edges, counts, _ = parse_file(text.encode(), EdgeFormat("pairs", header=True))
    lines = text.splitlines()
    assert len(edges) == len(lines) - 1 == 23_875
    assert edges[0] == tuple(lines[1].split()) and edges[-1] == tuple(lines[-1].split())
    assert counts == {"skipped_lines.header": 1}
    # without --header the header is data: ids are any token, no line is guessed to be a header
    edges, counts, _ = parse_file(text.encode(), EdgeFormat("pairs"))
    assert edges[0] == ("start", "end") and len(edges) == 23_876 and not counts


def test_adjacency_on_ml1m_implicit(data_dir):
    text = (data_dir / "ml-1m-implicit" / "train.txt").read_text()
    edges, counts, _ = parse_file(text.encode(), EdgeFormat("adjacency"), block_bytes=1 << 16)
    want = [(line.split()[0], item) for line in text.splitlines() for item in line.split()[1:]]
    assert edges == want and not counts


def test_movielens_u_data_and_ratings_dat(data_dir):
    raw = (data_dir / "ml-100k" / "u.data").read_bytes()
    rows = [line.split("\t") for line in raw.decode().splitlines()]
    edges, counts, _ = parse_file(raw, EdgeFormat("movielens"), block_bytes=1 << 15)
    assert len(edges) == 100_000 and edges == [(r[0], r[1]) for r in rows] and not counts
    # the same ratings in the ML-1M `ratings.dat` layout, kept from rating 4 up
    dat = "".join("::".join(r) + "\n" for r in rows).encode()
    edges, counts, _ = parse_file(dat, EdgeFormat("movielens", min_rating=4))
    assert edges == [(r[0], r[1]) for r in rows if int(r[2]) >= 4]
    assert counts == {"dropped_lines.below_min_rating": sum(int(r[2]) < 4 for r in rows)}
    # a u.data file read as given_split or a given-split file read as movielens is refused line by
    # line
    _, counts, _ = parse_file(
        (data_dir / "ml-1m-implicit" / "test.txt").read_bytes(), EdgeFormat("movielens")
    )
    assert counts["dropped_lines.wrong_field_count"] > 5000


def test_csv_with_header_and_delimiter(data_dir):
    rows = [line.split("\t") for line in (data_dir / "ml-100k" / "u.data").read_text().splitlines()]
    text = "userId;movieId;rating;timestamp\n" + "".join(";".join(r) + "\n" for r in rows)
    text += "a b;c;5;0\n;d;5;0\n"  # a field with a space, an empty field: malformed, counted
    edges, counts, examples = parse_file(
        text.encode(), EdgeFormat("csv", delimiter=";", header=True)
    )
    assert edges == [(r[0], r[1]) for r in rows]
    assert counts == {"skipped_lines.header": 1, "dropped_lines.bad_field": 2}
    assert examples["dropped_lines.bad_field"] == [100_002, 100_003]


@pytest.mark.parametrize("name", ["csv", "movielens"])
def test_a_rating_must_be_a_finite_number(name):
    sep = ";" if name == "csv" else "\t"
    rows = [("a", "b", "5"), ("c", "d", "inf"), ("e", "f", "nan"), ("g", "h", "-Infinity")]
    text = "".join(sep.join((*r, "0")) + "\n" for r in rows).encode()
    for min_rating in (None, 4.0) if name == "movielens" else (4.0,):  # csv: checked with it
        fmt = EdgeFormat(name, delimiter=sep, min_rating=min_rating)
        edges, counts, examples = parse_file(text, fmt)
        assert edges == [("a", "b")]
        assert counts == {"dropped_lines.bad_rating": 3} and examples == {
            "dropped_lines.bad_rating": [2, 3, 4]
        }


def test_csv_strips_whitespace_around_fields_only():
    text = b"c; d;4\n e ;f \t; 5\ng h;i;1\n"
    edges, counts, examples = parse_file(text, EdgeFormat("csv", delimiter=";"))
    assert edges == [("c", "d"), ("e", "f")]
    assert counts == {"dropped_lines.bad_field": 1} and examples == {"dropped_lines.bad_field": [3]}


def test_given_split_excerpt_of_gowalla():
    text = (TESTS_DATA / "gowalla" / "train.txt").read_text()
    edges, counts, _ = parse_file(text.encode(), EdgeFormat("given_split"))
    assert len(edges) == sum(len(line.split()) - 1 for line in text.splitlines()) and not counts
    assert {u for u, _ in edges} == {str(u) for u in range(40)}


# ---- bad bytes and odd lines: counted by reason, with line numbers -------------------------------

ODD = (
    b"\xef\xbb\xbf% KONECT-style header\n# comment\nu1\tm1\r\nu2 m2\n\n  u3   m1  \r\nbad\n"
    b"caf\xe9 m3\nu1 m1\n"
)


@pytest.mark.parametrize("block_bytes", [7, 16, 1 << 20])
def test_bom_comments_crlf_tabs_latin1_counted_at_any_block_size(block_bytes):
    edges, counts, examples = parse_file(ODD, EdgeFormat("pairs"), block_bytes)
    assert edges == [("u1", "m1"), ("u2", "m2"), ("u3", "m1"), ("u1", "m1")]  # no phantom BOM node
    assert counts == {
        "input_files.bom_stripped": 1,
        "skipped_lines.comment": 2,
        "skipped_lines.blank": 1,
        "dropped_lines.too_few_fields": 1,
        "dropped_lines.undecodable": 1,
    }
    assert examples == {
        "skipped_lines.comment": [1, 2],
        "skipped_lines.blank": [5],
        "dropped_lines.too_few_fields": [7],
        "dropped_lines.undecodable": [8],
    }


def test_non_ascii_ids_split_on_ascii_whitespace_only():
    edges, counts, _ = parse_file("café naïve\u00a0x\nЖ 東京\n".encode(), EdgeFormat("pairs"))
    assert edges == [("café", "naïve\u00a0x"), ("Ж", "東京")] and not counts


def test_odd_file_through_the_job(tmp_path, capsys):
    path = tmp_path / "odd.txt"
    path.write_bytes(ODD)
    out = tmp_path / "out"
    code, stdout, _ = run_cli(
        [
            "--edge_format",
            "pairs",
            "--bipartite",
            "--input",
            path,
            "--output",
            out,
            "--num_shards",
            "1",
            "--test_fraction",
            "0",
        ],
        capsys,
    )
    assert code == 0
    stats = json.loads((out / stats_json.STATS_FILE).read_text())
    assert sorted(dataset_reader.read_vocab(str(out)).values()) == ["u1", "u2", "u3"]
    assert sorted(dataset_reader.read_vocab(str(out), columns=True).values()) == ["m1", "m2"]
    assert stats["edges"] == 3 and stats["dropped"]["dropped_edges.duplicate"] == 1
    assert stats["dropped"]["dropped_lines.undecodable"] == 1
    assert stats["counters"]["skipped_lines.comment"] == 2
    assert stats["line_examples"]["dropped_lines.undecodable"] == [f"{path}:8"]
    assert f"first lines of dropped_lines.undecodable: {path}:8" in stdout


@pytest.mark.parametrize(
    "content, flags, reason",
    [
        (b"", [], "no line"),
        (b"start end\n", ["--header"], "skipped_lines.header (1 lines)"),
        (b"% only\n% comments\n", [], "skipped_lines.comment (2 lines)"),
        # ratings.dat read as pairs
        (b"1::2::5::9\n1::3::4::9\n", [], "dropped_lines.too_few_fields (2 lines)"),
    ],
)
def test_a_file_that_yields_no_edge_is_an_error(content, flags, reason, tmp_path, capsys):
    good, bad = tmp_path / "good.txt", tmp_path / "bad.txt"
    good.write_text("a b\n")
    bad.write_bytes(content)
    out = tmp_path / "out"
    code, _, err = run_cli(
        ["--edge_format", "pairs", "--input", good, "--input", bad, "--output", out, *flags], capsys
    )
    last = err.strip().splitlines()[-1]
    assert (
        code == 1
        and last.startswith(f"webgraph_pipeline: error: {bad}: no edge read")
        and reason in last
    )
    assert not (out / stats_json.STATS_FILE).exists()


CR_ONLY = b"a b\rb c\r\n\rc\rd a\r"  # lone CR line ends, one CRLF: lines 3 blank, 4 too short


@pytest.mark.parametrize("block_bytes", [1, 2, 5, 1 << 20])
def test_lone_cr_ends_a_line_and_crlf_still_does(block_bytes):
    edges, counts, examples = parse_file(CR_ONLY, EdgeFormat("pairs"), block_bytes)
    assert edges == [("a", "b"), ("b", "c"), ("d", "a")]
    assert counts == {"skipped_lines.blank": 1, "dropped_lines.too_few_fields": 1}
    assert examples == {"skipped_lines.blank": [3], "dropped_lines.too_few_fields": [4]}
    edges, _, _ = parse_file(b"a b\rb c\rc a\rd a\r", EdgeFormat("adjacency"), block_bytes)
    assert edges == [("a", "b"), ("b", "c"), ("c", "a"), ("d", "a")]  # one row a line


def _cut_gzip(tmp_path: pathlib.Path) -> tuple[pathlib.Path, int]:
    """A gzip edge list of 2,000 lines cut short inside its data; the lines before the cut."""
    text = "".join(f"node{i} target{i * 7919 % 100000:05d}\n" for i in range(2000)).encode()
    packed = gzip.compress(text, mtime=0)
    cut = packed[: len(packed) // 2]
    whole_lines = zlib.decompressobj(31).decompress(cut).count(b"\n")
    assert 0 < whole_lines < 2000
    path = tmp_path / "cut.txt.gz"
    path.write_bytes(cut)
    return path, whole_lines


def test_a_gzip_edge_list_cut_short_is_partly_read(tmp_path, capsys):
    """The lines before the cut are kept, the cut line is no edge, the file is named partly read
    at that line; a file holding only a gzip header is unreadable (bad_gzip)."""
    cut, whole_lines = _cut_gzip(tmp_path)
    header_only = tmp_path / "header.txt.gz"
    header_only.write_bytes(gzip.compress(b"a b\n", mtime=0)[:10])  # the header alone
    out = tmp_path / "out"
    flags = ["--edge_format", "pairs", "--input", cut, "--input", header_only, "--output", out]
    code, stdout, _ = run_cli([*flags, "--test_fraction", "0"], capsys)
    assert code == 0
    stats = json.loads((out / stats_json.STATS_FILE).read_text())
    assert stats["counters"]["edges.parsed"] == stats["edges"] == whole_lines
    assert stats["counters"]["files.partly_read"] == stats["counters"]["files.unreadable"] == 1
    assert "files.read" not in stats["counters"]
    assert stats["file_problems"] == [
        {
            "file": str(cut),
            "status": "partly_read",
            "reason": "bad_gzip",
            "detail": f"line {whole_lines + 1}",
        },
        {
            "file": str(header_only),
            "status": "unreadable",
            "reason": "bad_gzip",
            "detail": "EOFError: Compressed file ended before the end-of-stream marker was reached",
        },
    ]
    assert f"partly read input file {cut}: bad_gzip at line {whole_lines + 1}" in stdout
    assert "target" not in set(dataset_reader.read_vocab(str(out)).values())
    code, _, err = run_cli([*flags, "--fail_on_unreadable"], capsys)
    assert code == 1 and f"partly read input file {cut}: bad_gzip" in err


def test_a_gzip_url_list_is_read_like_a_gzip_edge_list(tmp_path, capsys):
    urls = tmp_path / "urls.txt.gz"
    urls.write_bytes(gzip.compress(b"id url\r\n1 http://a.example/\r\n2 http://b.example/\r\n"))
    edges = tmp_path / "edges.txt"
    edges.write_text("src dst\n1 2\n2 1\n")
    out = tmp_path / "out"
    flags = ["--edge_format", "pairs", "--header", "--input", edges, "--urls", urls]
    code, _, err = run_cli([*flags, "--output", out, "--test_fraction", "0"], capsys)
    assert code == 0, err
    assert sorted(dataset_reader.read_vocab(str(out)).values()) == [
        "http://a.example/",
        "http://b.example/",
    ]
    cut, whole_lines = _cut_gzip(tmp_path)  # a URL list must be read whole
    code, _, err = run_cli([*flags[:-1], cut, "--output", tmp_path / "out2"], capsys)
    assert code == 1 and f"--urls {cut}: cannot be read after line {whole_lines}" in err


# ---- ids of any kind: the same graph up to renaming ----------------------------------------------


def _all_links(out: pathlib.Path) -> set[tuple[str, str]]:
    """Every (row name, column name) link of a dataset: train rows and both parts of test rows."""
    rows, cols = (
        dataset_reader.read_vocab(str(out)),
        dataset_reader.read_vocab(str(out), columns=True),
    )
    links = set()
    for split in ("train", "test"):
        for r, kept, held in dataset_reader.read_split(str(out), split):
            links |= {(rows[r], cols[int(c)]) for c in np.concatenate([kept, held])}
    return links


def test_named_numeric_and_url_ids_give_the_same_graph(data_dir, tmp_path, capsys):
    rows = [
        line.split("\t")[:2]
        for line in (data_dir / "ml-100k" / "u.data").read_text().splitlines()[:4000]
    ]
    rng = np.random.default_rng(0)
    users, items = sorted({u for u, _ in rows}), sorted({i for _, i in rows})
    user_name = dict(zip(users, rng.permutation(len(users)).astype(str)))
    item_name = dict(zip(items, rng.permutation(len(items)).astype(str)))
    order = rng.permutation(len(rows))
    renamings = {
        "numeric": (lambda u: u, lambda i: i),
        "named": (lambda u: f"u{user_name[u]}", lambda i: f"m{item_name[i]}"),
        "url": (
            lambda u: f"http://User{user_name[u]}.example.com/",
            lambda i: f"https://shop.example.org/i/{item_name[i]}",
        ),
    }
    results = {}
    for kind, (ru, ri) in renamings.items():
        path = tmp_path / f"{kind}.txt"
        path.write_text("".join(f"{ru(rows[k][0])} {ri(rows[k][1])}\n" for k in order))
        out = tmp_path / kind
        code, _, _ = run_cli(
            [
                "--edge_format",
                "pairs",
                "--bipartite",
                "--input",
                path,
                "--output",
                out,
                "--num_shards",
                "1",
                "--min_links",
                "2",
            ],
            capsys,
        )
        assert code == 0
        # hosts are lower-cased
        back_u = {ru(u).lower() if kind == "url" else ru(u): u for u in users}
        back_i = {ri(i): i for i in items}
        results[kind] = {(back_u[u], back_i[i]) for u, i in _all_links(out)}
        stats = json.loads((out / stats_json.STATS_FILE).read_text())
        results[kind + "_shape"] = (stats["num_rows"], stats["num_cols"], stats["edges"])
    assert results["numeric"] == results["named"] == results["url"]
    assert results["numeric_shape"] == results["named_shape"] == results["url_shape"]
    assert results["numeric_shape"][2] == len(results["numeric"]) > 3000


# ---- given splits
# ---------------------------------------------------------------------------------


def _given(out: pathlib.Path):
    rows, cols = (
        dataset_reader.read_vocab(str(out)),
        dataset_reader.read_vocab(str(out), columns=True),
    )
    named = lambda ids, names: {names[int(i)] for i in ids}  # noqa: E731
    train = {rows[r]: named(c, cols) for r, c, _ in dataset_reader.read_split(str(out), "train")}
    train_t = {
        cols[c]: named(r, rows) for c, r, _ in dataset_reader.read_split(str(out), "train_t")
    }
    test = {
        rows[r]: (named(c, cols), named(g, cols))
        for r, c, g in dataset_reader.read_split(str(out), "test")
    }
    return train, train_t, test


def test_hand_made_given_split_link_by_link(tmp_path, capsys):
    (tmp_path / "train.txt").write_text("# published split\nu1 a b\nu2 b c d b\nu3 a\nu4 c\n")
    (tmp_path / "test.txt").write_text("u1 c\nu2 a\nu4 e\n")
    out = tmp_path / "out"
    code, stdout, _ = run_cli(
        [
            "--edge_format",
            "given_split",
            "--input",
            tmp_path / "train.txt",
            "--test_input",
            tmp_path / "test.txt",
            "--output",
            out,
            "--num_shards",
            "2",
        ],
        capsys,
    )
    assert code == 0
    train, train_t, test = _given(out)
    assert train == {"u1": {"a", "b"}, "u2": {"b", "c", "d"}, "u3": {"a"}, "u4": {"c"}}
    assert train_t == {"a": {"u1", "u3"}, "b": {"u1", "u2"}, "c": {"u2", "u4"}, "d": {"u2"}}
    assert test == {"u1": ({"a", "b"}, {"c"}), "u2": ({"b", "c", "d"}, {"a"}), "u4": ({"c"}, {"e"})}
    stats = json.loads((out / stats_json.STATS_FILE).read_text())
    assert stats["protocol"] == "given_split" and stats["bipartite"] is True
    assert (stats["num_rows"], stats["num_cols"], stats["edges"]) == (4, 5, 7)
    assert stats["splits"] == {"train": 4, "train_t": 4, "test": 3}
    assert stats["test_links"] == {"col_tag": 2 + 3 + 1, "gt_tag": 3}
    assert (
        stats["dropped"]["dropped_edges.duplicate"] == 1
        and stats["counters"]["skipped_lines.comment"] == 1
    )
    assert "(given_split)" in stdout


def _user_items(path: pathlib.Path) -> dict[str, set[str]]:
    out = {}
    for line in path.read_text().splitlines():
        user, *items = line.split()
        out.setdefault(user, set()).update(items)
    return out


def check_given_split(train_file: pathlib.Path, test_file: pathlib.Path, out: pathlib.Path) -> dict:
    """The dataset equals the files: train and train_t hold train.txt, test rows' gt_tag
    test.txt."""
    want_train, want_test = _user_items(train_file), _user_items(test_file)
    train, train_t, test = _given(out)
    assert train == {u: i for u, i in want_train.items() if i}
    transposed = collections.defaultdict(set)
    for user, items in want_train.items():
        for item in items:
            transposed[item].add(user)
    assert train_t == transposed
    assert {u: g for u, (_, g) in test.items()} == {u: i for u, i in want_test.items() if i}
    assert all(kept == want_train.get(u, set()) for u, (kept, _) in test.items())
    stats = json.loads((out / stats_json.STATS_FILE).read_text())
    users = set(want_train) | set(want_test)
    items = set(transposed) | {i for v in want_test.values() for i in v}
    assert (stats["num_rows"], stats["num_cols"]) == (len(users), len(items))
    assert stats["edges"] == sum(map(len, want_train.values()))
    assert stats["test_links"]["gt_tag"] == sum(map(len, want_test.values()))
    return stats


def test_gowalla_excerpt_through_the_cli(tmp_path, capsys):
    train, test = TESTS_DATA / "gowalla" / "train.txt", TESTS_DATA / "gowalla" / "test.txt"
    out = tmp_path / "gowalla"
    code, _, _ = run_cli(
        [
            "--edge_format",
            "given_split",
            "--input",
            train,
            "--test_input",
            test,
            "--output",
            out,
            "--num_shards",
            "2",
        ],
        capsys,
    )
    assert code == 0
    stats = check_given_split(train, test, out)
    assert stats["splits"]["test"] == stats["num_rows"] == 40


@pytest.mark.skipif(not SHARED_GOWALLA.exists(), reason="data/gowalla is missing")
def test_whole_gowalla_split_has_the_published_counts(tmp_path, capsys):
    train, test = SHARED_GOWALLA / "train.txt", SHARED_GOWALLA / "test.txt"
    out = tmp_path / "gowalla"
    code, _, _ = run_cli(
        [
            "--edge_format",
            "given_split",
            "--input",
            train,
            "--test_input",
            test,
            "--output",
            out,
            "--num_shards",
            "4",
        ],
        capsys,
    )
    assert code == 0
    stats = check_given_split(train, test, out)
    assert (
        stats["num_rows"],
        stats["num_cols"],
        stats["edges"],
        stats["test_links"]["gt_tag"],
    ) == (29_858, 40_981, 810_128, 217_242)
