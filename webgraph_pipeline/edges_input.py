"""`--input_format edges`: text edge lists in, edge batches out.

`ReadEdgeList` reads each file in blocks of whole lines and parses a block at a time with
`edge_formats.parse_block` (the layouts are described there), so no Beam element is made per line.
It emits EDGE BATCHES: `(src, dst)`, two equal-length lists of node names, not deduplicated and
with self-loops kept (the graph stage drops and counts both). URL tokens are normalized like WAT
links; with a URL list (`id url` lines) integer ids are replaced by their URLs.

Everything dropped or skipped is counted in the `webgraph` namespace (`dropped_lines.<reason>`,
`skipped_lines.<reason>`, `dropped_urls.<reason>`, `dropped_url_list.<reason>`,
`dropped_edges.<reason>`); the first line numbers of each line reason are noted in the list
`line_examples`, and a readable file that yields no edge in `empty_files` (notes: a second output
tagged `counters.NOTES`, see counters.py). Every file is accounted
for (`file_accounting.py`): read, partly read (a read error after some blocks: bad gzip data, a cut
file; the line where it happened) or unreadable (it cannot be opened, or its first block fails).
"""

from __future__ import annotations

import collections
import zlib
from typing import BinaryIO, Iterator, Optional, Sequence

import apache_beam as beam
from apache_beam.metrics import Metrics

from webgraph_pipeline.counters import NAMESPACE, NOTES, LocalCounts, flush_to_beam, tagged_notes
from webgraph_pipeline.edge_formats import (
    INT_TOKEN,
    MAX_EXAMPLES,
    EdgeFormat,
    ParsedBlock,
    header_hint,
    parse_block,
    parse_url_line,
)
from webgraph_pipeline.file_accounting import (
    PARTLY_READ,
    READ,
    UNREADABLE,
    UnreadableFileError,
    account_file,
)
from webgraph_pipeline.gunzip import Gunzip

BLOCK_BYTES = 1 << 20  # about 10^4-10^5 edges of a text edge list per block
URL_BATCH = 50_000  # edges per batch after the URL-list join
LINE_EXAMPLES = "line_examples"  # notes `reason<TAB>path:line`
EMPTY_FILES = "empty_files"  # notes `path<TAB>commonest reason<TAB>lines`
HEADER_HINTS = "header_hints"  # notes `path:line<TAB>the line<TAB>why it looks like a header`

PAIRS = EdgeFormat("pairs")
EdgeBatch = tuple[list[str], list[str]]
Edge = tuple[str, str]


def _to_lf(data: bytes) -> bytes:
    """CRLF and lone CR line ends as LF (Python's universal newlines)."""
    return data.replace(b"\r\n", b"\n").replace(b"\r", b"\n") if b"\r" in data else data


def read_line_blocks(f: BinaryIO, size: int = BLOCK_BYTES) -> Iterator[tuple[int, bytes]]:
    """(number of the first line, whole lines) blocks of about `size` bytes from a binary file.

    Lines end at LF, CRLF or a lone CR; each ends with LF in the blocks. A read error of `f`
    propagates, and the line it cut is not yielded.
    """
    line, rest = 1, b""
    while True:
        chunk = f.read(size)
        if not chunk:
            if rest:
                yield line, _to_lf(rest)
            return
        data = rest + chunk
        held = data[-1:] if data.endswith(b"\r") else b""  # its LF may start the next chunk
        data = _to_lf(data[: len(data) - len(held)])
        cut = data.rfind(b"\n") + 1
        if cut == 0:  # a line longer than the block: read on
            rest = data + held
            continue
        yield line, data[:cut]
        line += data.count(b"\n", 0, cut)
        rest = data[cut:] + held


def open_edge_file(path: str) -> BinaryIO:
    """An edge list or URL list opened for `read_line_blocks`: a `.gz` file through `Gunzip`, so
    a file cut short raises `EOFError` at its end instead of reading as a whole (shorter) file;
    other names as Beam opens them (by their extension)."""
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    if CompressionTypes.detect_compression_type(path) == CompressionTypes.GZIP:
        raw = FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
        return Gunzip(raw, cut_short_ok=False)
    return FileSystems.open(path)


def normalize_token(token: str) -> tuple[Optional[str], Optional[str]]:
    """A URL token normalized like WAT links ((url, None) or (None, reason)); other tokens as they
    are."""
    if "://" not in token:
        return token, None
    from webgraph_contract import urls

    return urls.normalize_url(token)


def normalize_batch(src: list[str], dst: list[str], inc) -> EdgeBatch:
    """Normalize the URL tokens of a batch; an edge with an invalid endpoint is dropped and
    counted."""
    cache: dict[str, tuple[Optional[str], Optional[str]]] = {}
    out_src, out_dst = [], []
    for s, d in zip(src, dst):
        ends = []
        for token in (s, d):
            if token not in cache:
                cache[token] = normalize_token(token)
            name, reason = cache[token]
            if reason:
                inc(f"dropped_urls.{reason}")
                inc("dropped_edges.invalid_endpoint")
                break
            ends.append(name)
        else:
            out_src.append(ends[0])
            out_dst.append(ends[1])
    return out_src, out_dst


def file_summary(counts: collections.Counter) -> str:
    """The commonest reason a file's lines were dropped or skipped, with its count."""
    reasons = {
        k: v for k, v in counts.items() if k.split(".")[0] in ("dropped_lines", "skipped_lines")
    }
    if not reasons:
        return "no line\t0"
    reason = max(sorted(reasons), key=reasons.get)
    return f"{reason}\t{reasons[reason]}"


def read_error_reason(error: Exception) -> str:
    """The reason an edge-list file could not be read on: `bad_gzip` for compressed data that does
    not decompress (or ends early), else `read_failed`."""
    return "bad_gzip" if isinstance(error, (zlib.error, EOFError)) else "read_failed"


class _ReadEdgeFileFn(beam.DoFn):
    """A file path -> its edge batches, one per block; then the file is accounted for (its notes
    tagged `NOTES`)."""

    def __init__(
        self, fmt: EdgeFormat, block_bytes: int, fail_on_unreadable: bool, url_ids: bool = False
    ):
        self._fmt, self._block_bytes, self._fail = fmt, block_bytes, fail_on_unreadable
        self._url_ids = url_ids  # ids are named by a --urls list (integers)

    def process(self, path: str) -> Iterator[EdgeBatch]:
        counts = LocalCounts()
        examples: dict[str, list[int]] = {}
        edges = blocks = 0
        next_line = 1
        status, reason, where = READ, "", ""
        try:
            f = open_edge_file(path)
        except Exception as e:  # noqa: BLE001 - any open error makes the file unreadable
            status, reason, where = UNREADABLE, "open_failed", str(e)
        else:
            try:
                with f:
                    for first_line, data in read_line_blocks(f, self._block_bytes):
                        if first_line == 1:
                            hint = header_hint(data, self._fmt, self._url_ids)
                            report_header_hint(counts, path, hint)
                        block = parse_block(data, first_line, self._fmt)
                        _merge(block, counts, examples)
                        src, dst = block.src, block.dst
                        if b"://" in data:
                            src, dst = normalize_batch(src, dst, counts.inc)
                        if src:
                            edges += len(src)
                            yield src, dst
                        blocks, next_line = blocks + 1, first_line + data.count(b"\n")
            # damaged compressed data, a failing disk or bucket
            except (OSError, zlib.error, EOFError) as e:
                status, reason = (PARTLY_READ if blocks else UNREADABLE), read_error_reason(e)
                where = f"line {next_line}" if blocks else f"{type(e).__name__}: {e}"
        try:
            account_file(path, status, reason, where, self._fail, counts)
            if status != UNREADABLE:
                self._report_lines(path, edges, counts, examples)
        finally:
            flush_to_beam(counts)
        yield from tagged_notes(counts)

    @staticmethod
    def _report_lines(
        path: str, edges: int, counts: LocalCounts, examples: dict[str, list[int]]
    ) -> None:
        counts.inc("edges.parsed", edges)
        for reason, numbers in examples.items():
            for n in numbers:
                counts.note(LINE_EXAMPLES, f"{reason}\t{path}:{n}")
        if not edges:
            counts.note(EMPTY_FILES, f"{path}\t{file_summary(counts)}")


def report_header_hint(
    counts: LocalCounts, path: str, hint: Optional[tuple[int, str, str]]
) -> None:
    """Note a first line that looks like a header (`edge_formats.header_hint`) for the driver."""
    if hint:
        number, text, why = hint
        counts.note(HEADER_HINTS, f"{path}:{number}\t{text}\t{why}")


def _merge(block: ParsedBlock, counts: LocalCounts, examples: dict[str, list[int]]) -> None:
    counts.update(block.counts)
    for reason, numbers in block.examples.items():
        kept = examples.setdefault(reason, [])
        kept.extend(numbers[: MAX_EXAMPLES - len(kept)])


class _ReadUrlListFn(beam.DoFn):
    """The URL-list path -> (id, normalized URL or None); bad lines counted by reason (a header
    hint tagged `NOTES`)."""

    def __init__(self, header: bool):
        self._header = header

    def process(self, path: str) -> Iterator[tuple[str, Optional[str]]]:
        counts = LocalCounts()
        n = 0
        head = b""  # the first lines, for `header_hint`
        try:
            with open_edge_file(path) as f:
                for first_line, data in read_line_blocks(f):
                    if first_line == 1:
                        head = data
                    lines = data.split(b"\n")
                    del lines[-1]  # the empty piece after the block's final LF
                    for n, raw in enumerate(lines, first_line):
                        url = self._url_line(n, raw, counts)
                        if url is not None:
                            yield url
        except (OSError, zlib.error, EOFError) as e:  # the one URL list must be read whole
            raise UnreadableFileError(
                f"--urls {path}: cannot be read after line {n} ({read_error_reason(e)}: {e})"
            ) from None
        hint = header_hint(head, EdgeFormat("pairs", header=self._header))
        report_header_hint(counts, f"--urls {path}", hint)
        flush_to_beam(counts)
        yield from tagged_notes(counts)

    def _url_line(
        self, n: int, raw: bytes, counts: LocalCounts
    ) -> Optional[tuple[str, Optional[str]]]:
        """Line `n` of the list -> (id, normalized URL or None), or None for a line without an
        id (counted)."""
        if n == 1 and self._header:
            counts.inc("skipped_lines.url_list_header")
            return None
        try:
            line = raw.decode("utf-8").lstrip("\ufeff")
        except UnicodeDecodeError:
            counts.inc("dropped_url_list.undecodable")
            return None
        entry, reason = parse_url_line(line)
        if reason:
            counts.inc(f"dropped_url_list.{reason}")
            return None
        node_id, raw_url = entry
        url, reason = normalize_token(raw_url) if "://" in raw_url else (None, "not_a_url")
        if reason:
            counts.inc(f"dropped_urls.{reason}")
        return node_id, url


class _Counted(beam.DoFn):
    """A DoFn that counts drops as `<kind>.<reason>` in the webgraph namespace."""

    def setup(self) -> None:
        self._counters: dict[str, object] = {}

    def count(self, name: str, n: int = 1) -> None:
        if name not in self._counters:
            self._counters[name] = Metrics.counter(NAMESPACE, name)
        self._counters[name].inc(n)


class _JoinUrlFn(_Counted):
    """(id, {'edges': [other...], 'url': [url...]}) -> (other, url): the keyed endpoint's URL.

    Keyed by source it yields (target id, source URL); re-keyed by target, (source URL, target URL).
    An id listed on several lines of the URL list keeps its largest valid URL; `count_duplicates`
    counts each extra line once as `dropped_url_list.duplicate_id` (set on the first join only:
    it sees every id of the list, and the second join would count the same lines again).
    """

    def __init__(self, count_duplicates: bool):
        super().__init__()
        self._count_duplicates = count_duplicates

    def process(self, kv) -> Iterator[Edge]:
        node_id, grouped = kv
        lines = list(grouped["url"])
        others, urls = list(grouped["edges"]), sorted({u or "" for u in lines})
        if self._count_duplicates and len(lines) > 1:
            self.count("dropped_url_list.duplicate_id", len(lines) - 1)
        if not others:
            return
        if not urls:
            self.count("dropped_edges.unknown_id", len(others))
            return
        url = urls[-1]  # a valid URL sorts after the '' of an invalid one
        if not url:
            self.count("dropped_edges.invalid_endpoint", len(others))
            return
        for other in others:
            yield other, url


def unbatch(batch: EdgeBatch) -> Iterator[Edge]:
    """The edges of a batch, one by one."""
    return zip(*batch)


def to_batch(edges: Sequence[Edge]) -> EdgeBatch:
    """A list of edges as an edge batch."""
    return [s for s, _ in edges], [d for _, d in edges]


class ReadEdgeList(beam.PTransform):
    """Edge-list files -> (PCollection of edge batches `(src names, dst names)`, PCollection of
    the (name, entry) notes for stats.json).

    fmt: the `EdgeFormat` of every file. urls_file: an `id url` list (its first line is a header
    when `fmt.header`); integer ids in the edge lists are then replaced by their URLs.
    fail_on_unreadable: stop the job at a file that cannot be read whole.
    """

    def __init__(
        self,
        files: Sequence[str],
        fmt: EdgeFormat = PAIRS,
        urls_file: Optional[str] = None,
        block_bytes: int = BLOCK_BYTES,
        fail_on_unreadable: bool = False,
    ):
        super().__init__()
        self._files, self._fmt, self._urls_file = list(files), fmt, urls_file
        self._block_bytes, self._fail = block_bytes, fail_on_unreadable

    def expand(self, pbegin):
        parsed = (
            pbegin
            | "EdgeFiles" >> beam.Create(self._files)
            | "SpreadFiles" >> beam.Reshuffle()
            | "ParseBlocks"
            >> beam.ParDo(
                _ReadEdgeFileFn(
                    self._fmt, self._block_bytes, self._fail, url_ids=bool(self._urls_file)
                )
            ).with_outputs(NOTES, main="batches")
        )
        if not self._urls_file:
            return parsed.batches, parsed[NOTES]
        url_list = (
            pbegin
            | "UrlListFile" >> beam.Create([self._urls_file])
            | "ReadUrlList"
            >> beam.ParDo(_ReadUrlListFn(self._fmt.header)).with_outputs(NOTES, main="urls")
        )
        url_table = url_list.urls
        by_src = (
            parsed.batches
            | "Unbatch" >> beam.FlatMap(unbatch)
            | "CanonicalIds" >> beam.Map(lambda e: (_canonical_id(e[0]), _canonical_id(e[1])))
        )
        by_dst = (
            {"edges": by_src, "url": url_table}
            | "JoinSourceUrl" >> beam.CoGroupByKey()
            | "SourceUrl" >> beam.ParDo(_JoinUrlFn(count_duplicates=True))
        )
        batches = (
            {"edges": by_dst, "url": url_table}
            | "JoinTargetUrl" >> beam.CoGroupByKey()
            | "TargetUrl" >> beam.ParDo(_JoinUrlFn(count_duplicates=False))
            | "Rebatch" >> beam.BatchElements(min_batch_size=URL_BATCH, max_batch_size=URL_BATCH)
            | "ToBatch" >> beam.Map(to_batch)
        )
        notes = (parsed[NOTES], url_list[NOTES]) | "Notes" >> beam.Flatten()
        return batches, notes


def _canonical_id(token: str) -> str:
    """`007` -> `7`, so ids match the URL list's; a non-integer stays as it is (and finds no
    URL)."""
    return str(int(token)) if INT_TOKEN.match(token) else token
