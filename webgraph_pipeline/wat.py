"""Streaming WAT reading that survives damaged input, and WAT files to edges (plain functions).

Public API:

- `WAT_READERS = ("warcio", "fastwarc")`: warcio is the default; FastWARC (optional extra `fast`)
  is offered because it is measured faster (`python -m benchmarks.pipeline --wat_records N`;
  figures in docs/figures.md) and passes the same damaged-input tests; it needs a
  seekable stream (all Beam filesystems give one), so on a non-seekable stream warcio is used
  instead.
- `check_reader(name)`: raise a clear error for an unknown or uninstalled reader.
- `iter_wat_payloads(fileobj, inc, reader="warcio") -> Iterator[(target_uri, payload_bytes)]`:
  every WARC `metadata` record of a WAT stream (plain, gzip, or one gzip member per record),
  record by record; other WARC types are counted `dropped_records.other_warc_type`.
- `wat_edges(fileobj, inc, link_types=DEFAULT_LINK_TYPES, reader="warcio", report=None)
  -> Iterator[(source_url, target_url)]`: the edges of every page of a WAT stream
  (deduplicated within a record, self-loops dropped).
- `WatFileReport`: what reading one file found; `.verdict()` says whether it was read, partly
  read (the first damage: reason, byte offset, record number) or unreadable (empty, bad gzip, not
  WARC, or WARC without WAT metadata, e.g. a WARC of HTTP responses).

Damage (corrupt or truncated gzip member, a file cut mid-record, bytes that are no WARC record):
every record before the damage is kept; a record whose payload is shorter than its
Content-Length is counted `damage.truncated_record` and dropped; an unreadable region is counted
`damage.corrupt_region`, and when the stream is seekable reading resumes at the next gzip member
(per-record gzip) or `WARC/1.x` line (plain files) after it, so one bad record loses nothing else.
A whole-file gzip (one stream, which warcio refuses to seek in) is read through a streaming
decompressor: damage there ends the file, keeping everything before it.
Both readers name damage alike: the byte where the damaged record starts (FastWARC does not say
where a failing record starts: it is where the last intact one ends, found by reading that one
again) and its record number; FastWARC reads a whole-file gzip itself and has no record offsets
there, so the place is given as unknown (with the record number).
"""

from __future__ import annotations

import collections
import dataclasses
import io
import logging
import re
import zlib
from typing import IO, Iterable, Iterator, Optional

from webgraph_pipeline.counters import Inc
from webgraph_pipeline.file_accounting import PARTLY_READ, READ, UNREADABLE
from webgraph_pipeline.gunzip import Gunzip
from webgraph_pipeline.links import DEFAULT_LINK_TYPES, decode_payload, page_links

WAT_READERS = ("warcio", "fastwarc")

_GZIP_MAGIC = b"\x1f\x8b\x08"
_WARC_LINE = b"\nWARC/1."
_SCAN_CHUNK = 1 << 20
_PROBE_BYTES = 1 << 16  # read to tell an empty file or a bad gzip stream, or a record's header
_CONTENT_LENGTH = re.compile(rb"(?im)^content-length:[ \t]*(\d+)[ \t]*$")


# One record as the readers see it: (target URI, declared Content-Length, payload of metadata
# records else None, offset of the record in the file, WARC-Type).
_RawRecord = tuple[Optional[str], Optional[int], Optional[bytes], int, str]


class _DamagedAt(Exception):
    """A reader failure at a known byte offset (where the record that failed starts)."""

    def __init__(self, offset: int, error: Exception):
        super().__init__(f"{type(error).__name__}: {error}")
        self.offset = offset


def _warcio_records(fileobj: IO[bytes]) -> Iterator[_RawRecord]:
    from warcio.archiveiterator import ArchiveIterator

    records = ArchiveIterator(fileobj)
    try:
        for record in records:
            # warcio reads any text line as an ARC header: a WAT is WARC
            if record.format != "warc":
                raise ValueError(f"not a WARC record (first line parsed as {record.format})")
            is_metadata = record.rec_type == "metadata"
            yield (
                record.rec_headers.get_header("WARC-Target-URI") if is_metadata else None,
                record.length,  # Content-Length as int, None when the header is missing
                record.raw_stream.read() if is_metadata else None,
                records.get_record_offset(),
                record.rec_type or "",
            )
    except Exception as error:  # noqa: BLE001 - named with where it happened, handled by the caller
        raise _DamagedAt(records.offset, error) from error


def _fastwarc_records(fileobj: IO[bytes]) -> Iterator[_RawRecord]:
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    metadata = WarcRecordType.metadata
    for record in ArchiveIterator(fileobj, parse_http=False, fsspec_args=False):
        headers = record.headers
        # The declared Content-Length, None when the header is missing: FastWARC gives a record cut
        # inside its header (a gzip member cut short) as one with no Content-Length header and a
        # `content_length` of 0, which would read as an intact empty record.
        length = headers.get("Content-Length")
        declared = int(length) if length and length.isdigit() else None
        is_metadata = record.record_type == metadata
        yield (
            headers.get("WARC-Target-URI") if is_metadata else None,
            declared,
            record.reader.read() if is_metadata else None,
            record.stream_pos,
            "metadata" if is_metadata else headers.get("WARC-Type") or "",
        )


_READERS = {"warcio": _warcio_records, "fastwarc": _fastwarc_records}


def check_reader(reader: str):
    """The record function of a WAT reader name; a clear error if unknown or not installed."""
    if reader not in _READERS:
        raise ValueError(f"unknown WAT reader {reader!r}; expected one of {WAT_READERS}")
    if reader == "fastwarc":
        try:
            import fastwarc  # noqa: F401
        except ImportError:
            raise ImportError(
                "wat_reader 'fastwarc' needs FastWARC: pip install 'webgraph-alx[fast]'"
            ) from None
    return _READERS[reader]


def _next_sync_point(fileobj: IO[bytes], position: int, marker: bytes) -> Optional[int]:
    """Offset of the first `marker` at or after `position` (a record start), or None."""
    fileobj.seek(position)
    carry = b""
    chunk_start = position
    while True:
        chunk = fileobj.read(_SCAN_CHUNK)
        if not chunk:
            return None
        window = carry + chunk
        found = window.find(marker)
        if found >= 0:
            start = chunk_start - len(carry) + found
            return start + 1 if marker == _WARC_LINE else start
        carry = window[-(len(marker) - 1) :]
        chunk_start += len(chunk)


@dataclasses.dataclass
class WatFileReport:
    """What reading one WAT file found, filled in as it is read; `verdict()` once it is done.

    records: WARC records parsed, by WARC-Type. wat_records: metadata records whose payload is JSON
    (pages or requests: what makes a WARC file a WAT file). damage: the first damage seen, (reason,
    `byte N` or `after byte N`, record number counted from 1). decompressed: offsets count bytes of
    the decompressed stream (a whole-file gzip). empty / bad_gzip: what the first bytes showed.
    """

    records: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    wat_records: int = 0
    damage: Optional[tuple[str, str, int]] = None
    decompressed: bool = False
    empty: bool = False
    bad_gzip: bool = False

    def damaged(self, reason: str, at: str, record: int) -> None:
        if self.damage is None:
            self.damage = (reason, at, record)

    def verdict(self) -> tuple[str, str, str]:
        """(READ | PARTLY_READ | UNREADABLE, reason, where or why) of the file."""
        if not self.records:
            if self.empty:
                return UNREADABLE, "empty", "the file is empty"
            if self.bad_gzip:
                return UNREADABLE, "bad_gzip", "gzip header, but the data does not decompress"
            return UNREADABLE, "not_warc", "no WARC record: not a WAT file"
        if not self.wat_records:
            types = ", ".join(f"{t or '?'} {n}" for t, n in sorted(self.records.items()))
            return (
                UNREADABLE,
                "not_wat",
                f"WARC records ({types}) but no WAT metadata record with a JSON payload",
            )
        if self.damage is not None:
            reason, at, record = self.damage
            stream = " of the decompressed stream" if self.decompressed else ""
            return PARTLY_READ, reason, f"{at}{stream} (record {record})"
        return READ, "", ""


def _probe(fileobj: IO[bytes], report: WatFileReport) -> None:
    """Note whether a seekable stream is empty, or starts like gzip but does not decompress."""
    position = fileobj.tell()
    head = fileobj.read(_PROBE_BYTES)
    fileobj.seek(position)
    report.empty = not head
    if head.startswith(_GZIP_MAGIC):
        try:
            zlib.decompressobj(31).decompress(head)
        except zlib.error:
            report.bad_gzip = True


def iter_wat_payloads(
    fileobj: IO[bytes], inc: Inc, reader: str = "warcio", report: Optional[WatFileReport] = None
) -> Iterator[tuple[Optional[str], bytes]]:
    """`(WARC-Target-URI, payload)` of every intact metadata record, surviving damage; what was
    found is noted in `report` when one is given."""
    read_records = check_reader(reader)
    if not fileobj.seekable() and reader == "fastwarc":
        # FastWARC needs seek() on Python streams (it panics without); warcio does not.
        read_records = _warcio_records
    report = report if report is not None else WatFileReport()
    if fileobj.seekable():
        _probe(fileobj, report)
    return _resilient_payloads(fileobj, inc, read_records, skip=0, report=report)


def _byte(fileobj: IO[bytes], offset: int, marker: bytes) -> str:
    """`byte N` for a record's offset, unless it is no gzip member start in a gzip file: FastWARC
    reading a whole-file gzip gives how far it has read the compressed file, not where the record
    starts, so the record's place is unknown."""
    if marker == _GZIP_MAGIC and fileobj.seekable():
        position = fileobj.tell()
        fileobj.seek(offset)
        member_start = fileobj.read(len(_GZIP_MAGIC)) == _GZIP_MAGIC
        fileobj.seek(position)
        if not member_start:
            return "an unknown byte of the whole-file gzip"
    return f"byte {offset}"


def _record_end(fileobj: IO[bytes], offset: int, marker: bytes) -> Optional[int]:
    """Where the intact record at `offset` of a seekable stream ends (the next one starts): the end
    of its gzip member (`marker` is `_GZIP_MAGIC`), else of its header, Content-Length payload
    and CRLF CRLF; None when that cannot be told (a stream that is not seekable, damage)."""
    if not fileobj.seekable():
        return None
    fileobj.seek(offset)
    if marker == _GZIP_MAGIC:
        inflate, fed = zlib.decompressobj(31), 0
        try:
            while not inflate.eof:
                chunk = fileobj.read(_SCAN_CHUNK)
                if not chunk:
                    return None
                inflate.decompress(chunk)
                fed += len(chunk)
        except zlib.error:
            return None
        return offset + fed - len(inflate.unused_data)
    head = fileobj.read(_PROBE_BYTES)
    header_end = head.find(b"\r\n\r\n")
    length = _CONTENT_LENGTH.search(head[: max(header_end, 0)])
    if header_end < 0 or not length:
        return None
    return offset + header_end + 4 + int(length.group(1)) + 4


def _is_whole_file_gzip(error: Exception) -> bool:
    """warcio refuses a gzip file that is one stream rather than one member per record."""
    return "non-chunked gzip" in str(error)


def _resilient_payloads(
    fileobj: IO[bytes], inc: Inc, read_records, skip: int, report: WatFileReport
) -> Iterator[tuple[Optional[str], bytes]]:
    """`iter_wat_payloads` with a reader function; the first `skip` records are passed over."""
    seekable = fileobj.seekable()
    origin = start = fileobj.tell() if seekable else 0
    head = fileobj.read(len(_GZIP_MAGIC)) if seekable else b""
    marker = _GZIP_MAGIC if head == _GZIP_MAGIC else _WARC_LINE
    resumed = False
    seen = 0
    while True:
        if seekable:
            fileobj.seek(start)
        last_offset: Optional[int] = None
        try:
            for uri, length, payload, offset, warc_type in read_records(fileobj):
                first_after_resume = resumed and last_offset is None
                last_offset = offset
                seen += 1
                if seen <= skip:
                    continue
                if length is None or (payload is not None and len(payload) < length):
                    # Cut short: the file ends here, or a damaged gzip member ran into the next.
                    if not first_after_resume:  # else: part of the region already counted
                        inc("damage.truncated_record")
                        report.damaged("truncated_record", _byte(fileobj, offset, marker), seen)
                    if seekable:
                        break
                else:
                    report.records[warc_type] += 1
                    if payload is None:
                        inc("dropped_records.other_warc_type")
                    else:
                        yield uri, payload
            else:
                return
        except Exception as error:  # noqa: BLE001 - any reader failure is damage to survive
            if seekable and not resumed and marker == _GZIP_MAGIC and _is_whole_file_gzip(error):
                # One gzip stream for the whole file: read it decompressed, after the records
                # already seen.
                fileobj.seek(origin)
                plain = io.BufferedReader(Gunzip(fileobj))
                report.decompressed = True
                yield from _resilient_payloads(plain, inc, read_records, skip=seen, report=report)
                return
            # A failure right where reading resumed is the same damaged region: count it once.
            if not (resumed and last_offset is None):
                inc("damage.corrupt_region")
                if isinstance(error, _DamagedAt):
                    report.damaged("corrupt_region", f"byte {error.offset}", seen + 1)
                else:  # the reader does not say where the failing record starts: where the last
                    # good one ends, found by reading it again
                    if last_offset is None:
                        where = f"byte {start}"
                    else:
                        where = _byte(fileobj, last_offset, marker)
                        if where == f"byte {last_offset}":  # a record start: find its end
                            end = _record_end(fileobj, last_offset, marker)
                            where = f"a record after {where}" if end is None else f"byte {end}"
                    report.damaged("corrupt_region", where, seen + 1)
                logging.debug("damaged WAT data after offset %d: %.200r", start, str(error))
            if not seekable:
                return
        damaged_at = last_offset if last_offset is not None else start
        try:
            next_start = _next_sync_point(fileobj, damaged_at + 1, marker)
        except Exception:  # noqa: BLE001 - e.g. a cut whole-file gzip: nothing more to read
            next_start = None
        if next_start is None:
            return
        start, resumed = next_start, True


def wat_edges(
    fileobj: IO[bytes],
    inc: Inc,
    link_types: Iterable[str] = DEFAULT_LINK_TYPES,
    reader: str = "warcio",
    report: Optional[WatFileReport] = None,
) -> Iterator[tuple[str, str]]:
    """Every `(source_url, target_url)` edge of a WAT stream (unique within each record); what was
    found is noted in `report` when one is given."""
    link_types = frozenset(link_types)
    report = report if report is not None else WatFileReport()
    for uri, payload in iter_wat_payloads(fileobj, inc, reader, report):
        doc = decode_payload(payload, inc)
        if doc is None:
            continue
        report.wat_records += 1
        found = page_links(doc, link_types, inc, fallback_url=uri)
        if found is None:
            continue
        page_url, targets = found
        for target in targets:
            yield page_url, target
