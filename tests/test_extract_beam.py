"""`ExtractEdges` on the DirectRunner: the same edges as the plain functions, counters queryable,
unreadable inputs named (or fatal on request), and Common Crawl style listings."""

from __future__ import annotations

import gzip
import io
import shutil

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from webgraph_pipeline.counters import NOTES, LocalCounts, collect_counters, take_notes
from webgraph_pipeline.extract import ExtractEdges, expand_listing
from webgraph_pipeline.file_accounting import FILE_PROBLEMS, UnreadableFileError, file_problems
from webgraph_pipeline.pipeline import keep_notes
from webgraph_pipeline.wat import WatFileReport, wat_edges

from extract_fixtures import a_links, envelope, wat_bytes

REAL_WAT = "commoncrawl/CC-MAIN-20140820021334-00006.head.warc.wat"


@pytest.fixture(scope="module")
def wat_dir(tmp_path_factory, data_dir):
    """Three WAT files: the real sample, and two generated ones in which `http://p.de/` appears
    in three records (its edges must be the union) and an edge repeats across files; the last
    generated file has a corrupt gzip member (its second record: the third of the file, after
    the first record and the warcinfo record warcio's writer does not add: so record 2)."""
    out = tmp_path_factory.mktemp("wat")
    shutil.copy(data_dir / REAL_WAT, out / "real.wat")
    one, _ = wat_bytes(
        [
            envelope("http://p.de/", a_links("/a", "/b", "http://q.de/")),
            envelope("http://q.de/", a_links("http://p.de/", "javascript:x()", "#")),
        ]
    )
    (out / "one.wat.gz").write_bytes(one)
    two, offsets = wat_bytes(
        [
            envelope("http://P.DE:80/", a_links("/c", "/a")),
            envelope("http://lost.de/", a_links("/gone")),
            envelope("http://p.de/#x", a_links("http://r.de/", "mailto:a@p.de")),
        ]
    )
    damaged = bytearray(two)
    damaged[offsets[1] + 40 : offsets[1] + 70] = bytes(30)
    (out / "two.wat.gz").write_bytes(bytes(damaged))
    (out / "two.offsets").write_text(" ".join(map(str, offsets)))
    with gzip.open(out / "wat.paths.gz", "wt") as listing:
        listing.write("one.wat.gz\n\ntwo.wat.gz\n")
    return out


def plain_edges_and_counts(paths, reader):
    counts, edges = LocalCounts(), set()
    for path in paths:
        report = WatFileReport()
        with open(path, "rb") as f:
            edges.update(wat_edges(f, counts.inc, reader=reader, report=report))
        counts.inc("files.matched")
        counts.inc(f"files.{report.verdict()[0]}")
    return edges, counts


def test_expand_listing(wat_dir):
    listed = expand_listing(str(wat_dir / "wat.paths.gz"), str(wat_dir))
    assert listed == [str(wat_dir / "one.wat.gz"), str(wat_dir / "two.wat.gz")]
    assert expand_listing(str(wat_dir / "wat.paths.gz"), "s3://bucket/crawl/") == [
        "s3://bucket/crawl/one.wat.gz",
        "s3://bucket/crawl/two.wat.gz",
    ]


@pytest.mark.parametrize("reader", ["warcio", "fastwarc"])
def test_beam_matches_plain_functions_and_counts(wat_dir, reader, tmp_path):
    files = [wat_dir / "real.wat", wat_dir / "one.wat.gz", wat_dir / "two.wat.gz"]
    expected, counts = plain_edges_and_counts(files, reader)
    # Hand-checked facts of the generated files: the union of p.de's three records, no self-loop.
    assert {t for s, t in expected if s == "http://p.de/"} == {
        "http://p.de/a",
        "http://p.de/b",
        "http://p.de/c",
        "http://q.de/",
        "http://r.de/",
    }
    assert not any(s.startswith("http://lost.de") for s, _ in expected)

    missing = str(wat_dir / "missing-*.wat.gz")
    listed = expand_listing(str(wat_dir / "wat.paths.gz"), str(wat_dir))
    patterns = [str(wat_dir / "*.wat"), *listed, missing]
    pipeline = BeamTestPipeline()
    batches, notes = pipeline | "Extract" >> ExtractEdges(patterns, wat_reader=reader)
    notes_dir = tmp_path / "notes"
    notes_dir.mkdir()
    keep_notes(notes, str(notes_dir))
    edges = batches | beam.FlatMap(lambda b: zip(*b))
    # Batches hold every edge of every record; repeats across records are the graph stage's to drop.
    assert_that(edges | beam.Distinct(), equal_to(sorted(expected)))
    assert_that(
        batches | "Sizes" >> beam.Map(lambda b: len(b[0]) == len(b[1]) > 0),
        equal_to([True] * 3),
        label="Batches",
    )
    result = pipeline.run()
    result.wait_until_finish()

    counts.inc("unreadable_files.not_found")
    counts.inc("files.unreadable")
    counts.inc("files.matched")  # every entry accounted for: the pattern that matched none too
    assert collect_counters(result) == dict(counts)
    got = collect_counters(result)
    assert (
        got["damage.corrupt_region"] == 1
        and got["files.read"] == 2
        and got["files.partly_read"] == 1
    )
    damaged_at = int((wat_dir / "two.offsets").read_text().split()[1])
    where = f"byte {damaged_at} (record 2)"  # both readers alike
    assert file_problems(take_notes(str(notes_dir))[FILE_PROBLEMS]) == [
        {
            "file": missing,
            "status": "unreadable",
            "reason": "not_found",
            "detail": "no file matches",
        },
        {
            "file": str(wat_dir / "two.wat.gz"),
            "status": "partly_read",
            "reason": "corrupt_region",
            "detail": where,
        },
    ]


def test_unreadable_input_can_be_fatal(wat_dir):
    missing = str(wat_dir / "nowhere.wat.gz")
    pipeline = BeamTestPipeline()
    _ = pipeline | ExtractEdges([str(wat_dir / "one.wat.gz"), missing], fail_on_unreadable=True)
    with pytest.raises(Exception, match="nowhere.wat.gz") as error:
        pipeline.run().wait_until_finish()
    assert "unreadable input file" in str(error.value) or isinstance(
        error.value, UnreadableFileError
    )


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="at least one input"):
        ExtractEdges([])
    with pytest.raises(ValueError, match="unknown WAT reader"):
        ExtractEdges("x.wat", wat_reader="nope")


def test_gzip_detected_from_bytes_not_name(wat_dir, tmp_path):
    """A per-record gzip file without a .gz name is still read (gzip is detected from bytes)."""
    shutil.copy(wat_dir / "one.wat.gz", tmp_path / "one.wat")
    counts = LocalCounts()
    with open(tmp_path / "one.wat", "rb") as f:
        assert ("http://p.de/", "http://q.de/") in set(wat_edges(io.BufferedReader(f), counts.inc))


def test_file_that_cannot_be_opened_or_matched(tmp_path):
    """Without a runner: the DoFns count, name and go on, or raise when asked to."""
    from webgraph_pipeline.extract import MatchFilesFn, ReadWatEdgesFn

    gone = str(tmp_path / "gone.wat.gz")
    (note,) = ReadWatEdgesFn(["A@/href"], False, "warcio").process(gone)  # no edge, one note
    assert note.tag == NOTES and note.value[0] == FILE_PROBLEMS
    assert note.value[1].startswith(f"unreadable\t{gone}\topen_failed\t")
    with pytest.raises(UnreadableFileError, match="gone.wat.gz: open_failed"):
        list(ReadWatEdgesFn(["A@/href"], True, "warcio").process(gone))
    (tmp_path / "dangling.wat").symlink_to(tmp_path / "nowhere")
    pattern = str(tmp_path / "dangling*.wat")
    (note,) = MatchFilesFn(False).process(pattern)
    assert note.value == (FILE_PROBLEMS, f"unreadable\t{pattern}\tnot_found\tno file matches")
    with pytest.raises(UnreadableFileError, match="dangling"):
        list(MatchFilesFn(True).process(pattern))
