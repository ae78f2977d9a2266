"""The extraction stage as a Beam composite: WAT files -> deduplicated absolute edges.

Public API:

- `ExtractEdges(file_patterns, link_types=DEFAULT_LINK_TYPES, fail_on_unreadable=False,
  wat_reader="warcio")`: `pipeline | ExtractEdges([...])` is a pair of PCollections: edge
  batches, and the (name, entry) notes for stats.json (`counters.NOTES`: the files not read
  whole). An edge batch is a tuple `(sources, targets)` of two equal-length lists of normalized
  URLs (at most `BATCH_EDGES`
  edges, from one file). Links are deduplicated within a record and self-loops dropped there;
  edges repeated across records (a page seen in several records keeps the union of its links) are
  deduplicated, and counted, by the graph stage (graph.py). `file_patterns` is a path, glob or
  list of them that Beam's FileSystems can open (local, gs://, s3://). Files are streamed record
  by record; gzip (whole-file or one member per record) is detected from the bytes, not the name.
  Counters: namespace `webgraph`
  (see counters.py). Every file ends read, partly read or unreadable (`file_accounting.py`): a
  pattern matching nothing, a file that cannot be opened, is empty, is no gzip, no WARC or a
  WARC without WAT records is unreadable; damage inside a WAT file (a corrupt region, a truncated
  record) makes it partly read, with the byte offset and record number of the first damage. Each
  is counted by reason, logged and named in stats.json, and the rest goes on;
  `fail_on_unreadable=True` stops the job at the first such file instead.
- `expand_listing(listing_path, prefix) -> list[str]`: the file URLs of a listing such as Common
  Crawl's `wat.paths.gz` (one relative path per line, plain or gzip), each joined to `prefix`.

Steps: ListPatterns -> MatchFiles -> SpreadFiles (reshuffle, one file per work item) ->
ReadWatEdges (wat.wat_edges under a per-file local counter, edges cut into batches); the notes
of MatchFiles and ReadWatEdges flattened.
"""

from __future__ import annotations

from itertools import islice
from typing import Iterable, Iterator, Sequence, Union

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from webgraph_pipeline.counters import NOTES, LocalCounts, flush_to_beam, tagged_notes
from webgraph_pipeline.file_accounting import UNREADABLE, account_file
from webgraph_pipeline.links import DEFAULT_LINK_TYPES
from webgraph_pipeline.wat import WatFileReport, check_reader, wat_edges

BATCH_EDGES = 50_000
EdgeBatch = tuple[list[str], list[str]]


def expand_listing(listing_path: str, prefix: str) -> list[str]:
    """`prefix` joined to every non-empty line of a listing file (plain or gzip, any filesystem).

    `expand_listing("wat.paths.gz", "s3://commoncrawl/")` gives the WAT files of a crawl in
    Common Crawl's bucket (Beam's S3 filesystem needs `apache-beam[aws]`); a local directory or a
    `gs://` prefix gives the paths of a mirror. (Beam has no http filesystem, so an
    `https://data.commoncrawl.org/` prefix gives names that cannot be opened.)
    """
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    with FileSystems.open(listing_path, compression_type=CompressionTypes.AUTO) as listing:
        lines = listing.read().decode("utf-8").splitlines()
    return [prefix + line.strip().lstrip("/") for line in lines if line.strip()]


class MatchFilesFn(beam.DoFn):
    """A path or glob -> the paths of the files it matches (counting patterns that match none)."""

    def __init__(self, fail_on_unreadable: bool):
        self._fail = fail_on_unreadable

    def process(self, pattern: str) -> Iterator[str]:
        counts = LocalCounts()
        try:
            matches = FileSystems.match([pattern])[0].metadata_list
        except Exception as error:  # noqa: BLE001 - any filesystem error makes the input unreadable
            matches = None
            account_file(pattern, UNREADABLE, "match_failed", str(error), self._fail, counts)
        if matches is not None and not matches:
            account_file(pattern, UNREADABLE, "not_found", "no file matches", self._fail, counts)
        for metadata in matches or ():
            yield metadata.path
        flush_to_beam(counts)
        yield from tagged_notes(counts)


def edge_batches(edges: Iterable[tuple[str, str]], size: int = BATCH_EDGES) -> Iterator[EdgeBatch]:
    """(sources, targets) lists of up to `size` edges each, in the order of `edges`."""
    edges = iter(edges)
    while chunk := list(islice(edges, size)):
        sources, targets = zip(*chunk)
        yield list(sources), list(targets)


class ReadWatEdgesFn(beam.DoFn):
    """One WAT file -> its edge batches, streamed record by record, then the file accounted for
    (read, partly read or unreadable); counters flushed once per file."""

    def __init__(self, link_types: Sequence[str], fail_on_unreadable: bool, wat_reader: str):
        self._link_types = tuple(link_types)
        self._fail = fail_on_unreadable
        self._reader = wat_reader

    def process(self, path: str) -> Iterator[EdgeBatch]:
        counts = LocalCounts()
        try:
            yield from self._read(path, counts)
        finally:
            flush_to_beam(counts)
        yield from tagged_notes(counts)

    def _read(self, path: str, counts: LocalCounts) -> Iterator[EdgeBatch]:
        try:
            stream = FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
        except Exception as error:  # noqa: BLE001 - any open error makes the file unreadable
            account_file(path, UNREADABLE, "open_failed", str(error), self._fail, counts)
            return
        report = WatFileReport()
        with stream:
            yield from edge_batches(
                wat_edges(stream, counts.inc, self._link_types, self._reader, report)
            )
        account_file(path, *report.verdict(), self._fail, counts)


class ExtractEdges(beam.PTransform):
    """WAT files -> (edge batches `(sources, targets)` of absolute URLs, notes) (DESIGN rules 1-3;
    rule 4 is the graph stage's)."""

    def __init__(
        self,
        file_patterns: Union[str, Iterable[str]],
        link_types: Sequence[str] = DEFAULT_LINK_TYPES,
        fail_on_unreadable: bool = False,
        wat_reader: str = "warcio",
    ):
        super().__init__()
        patterns = [file_patterns] if isinstance(file_patterns, str) else list(file_patterns)
        if not patterns:
            raise ValueError("ExtractEdges needs at least one input path or glob")
        check_reader(wat_reader)
        if not link_types:
            raise ValueError("ExtractEdges needs at least one link type, e.g. 'A@/href'")
        self._patterns = patterns
        self._link_types = tuple(link_types)
        self._fail = fail_on_unreadable
        self._reader = wat_reader

    def expand(self, pbegin: beam.pvalue.PBegin) -> tuple[beam.PCollection, beam.PCollection]:
        matched = (
            pbegin
            | "ListPatterns" >> beam.Create(self._patterns)
            | "MatchFiles" >> beam.ParDo(MatchFilesFn(self._fail)).with_outputs(NOTES, main="files")
        )
        read = (
            matched.files
            | "SpreadFiles" >> beam.Reshuffle()
            | "ReadWatEdges"
            >> beam.ParDo(ReadWatEdgesFn(self._link_types, self._fail, self._reader)).with_outputs(
                NOTES, main="batches"
            )
        )
        return read.batches, (matched[NOTES], read[NOTES]) | "Notes" >> beam.Flatten()
