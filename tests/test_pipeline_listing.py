"""A Common Crawl style listing (wat.paths.gz + prefix) as the job's input, with either WAT
reader."""

import gzip
import json

import pytest

from webgraph_pipeline import cli

from conftest import DATA

SAMPLE = "CC-MAIN-20140820021334-00006.head.warc.wat"


@pytest.mark.parametrize("reader", ["warcio", "fastwarc"])
def test_listing_reads_listed_files_and_counts_a_missing_one(tmp_path, reader):
    listing = tmp_path / "wat.paths.gz"
    with gzip.open(listing, "wt") as f:
        f.write(f"{SAMPLE}\nmissing/file.warc.wat.gz\n\n")
    out = tmp_path / "out"
    code = cli.main(
        [
            "--input_listing",
            str(listing),
            "--listing_prefix",
            str(DATA / "commoncrawl"),
            "--output",
            str(out),
            "--wat_reader",
            reader,
            "--num_shards",
            "1",
            "--allow_empty",
        ]
    )
    assert code == 0
    stats = json.loads((out / "stats.json").read_text())
    # Same graph as reading the sample by glob: the 0pointer.de page's 13 outlinks.
    assert (stats["nodes"], stats["edges"]) == (14, 13)
    assert stats["unreadable_files"] == [str(DATA / "commoncrawl" / "missing/file.warc.wat.gz")]
    assert stats["counters"]["unreadable_files.not_found"] == 1
    counters = stats["counters"]
    assert counters["files.matched"] == 2 == counters["files.read"] + counters["files.unreadable"]


def test_no_input_at_all_is_a_one_line_error(tmp_path, capsys):
    assert cli.main(["--output", str(tmp_path)]) == 2
    assert (
        capsys.readouterr().err.strip()
        == "webgraph_pipeline: error: give --input GLOB or --input_listing FILE"
    )


def test_unreadable_listing_is_named(tmp_path, capsys):
    assert (
        cli.main(["--input_listing", str(tmp_path / "nope.gz"), "--output", str(tmp_path / "o")])
        == 2
    )
    assert "--input_listing" in capsys.readouterr().err
