"""Streaming WAT reading that survives damaged input, and WAT files to edges (plain functions).

Public API:

- `WAT_READERS = ("warcio", "fastwarc")`: warcio is the default; FastWARC (optional extra `fast`)
  is offered because it is measured faster (benchmarks/wat_throughput.py, 100k real-record WAT:
  whole extraction 47k records/s per core with FastWARC vs 21k with warcio, whose pure-Python
  header parsing alone caps it at 36k) and passes the same damaged-input tests; it needs a
  seekable stream (all Beam filesystems give one), so on a non-seekable stream warcio is used instead.
- `check_reader(name)`: raise a clear error for an unknown or uninstalled reader.
- `iter_wat_payloads(fileobj, inc, reader="warcio") -> Iterator[(target_uri, payload_bytes)]`:
  every WARC `metadata` record of a WAT stream (plain, gzip, or one gzip member per record),
  record by record; other WARC types are counted `dropped_records.other_warc_type`.
- `wat_edges(fileobj, inc, link_types=DEFAULT_LINK_TYPES, reader="warcio")
  -> Iterator[(source_url, target_url)]`: the edges of every page of a WAT stream
  (deduplicated within a record, self-loops dropped).

Damage (corrupt or truncated gzip member, a file cut mid-record, bytes that are no WARC record):
every record before the damage is kept; a record whose payload is shorter than its
Content-Length is counted `damage.truncated_record` and dropped; an unreadable region is counted
`damage.corrupt_region`, and when the stream is seekable reading resumes at the next gzip member
(per-record gzip) or `WARC/1.x` line (plain files) after it, so one bad record loses nothing else.
A whole-file gzip (one stream, which warcio refuses to seek in) is read through a streaming
decompressor: damage there ends the file, keeping everything before it.
"""

from __future__ import annotations

import io
import logging
import zlib
from typing import IO, Iterable, Iterator, Optional

from webgraph_pipeline.counters import Inc
from webgraph_pipeline.links import DEFAULT_LINK_TYPES, decode_payload, page_links

WAT_READERS = ("warcio", "fastwarc")

_GZIP_MAGIC = b"\x1f\x8b\x08"
_WARC_LINE = b"\nWARC/1."
_SCAN_CHUNK = 1 << 20

# One record as the readers see it: (target URI, declared Content-Length, payload of metadata
# records else None, offset of the record in the file).
_RawRecord = tuple[Optional[str], Optional[int], Optional[bytes], int]


def _warcio_records(fileobj: IO[bytes]) -> Iterator[_RawRecord]:
    from warcio.archiveiterator import ArchiveIterator

    records = ArchiveIterator(fileobj)
    for record in records:
        is_metadata = record.rec_type == "metadata"
        yield (
            record.rec_headers.get_header("WARC-Target-URI") if is_metadata else None,
            record.length,  # Content-Length as int, None when the header is missing
            record.raw_stream.read() if is_metadata else None,
            records.get_record_offset(),
        )


def _fastwarc_records(fileobj: IO[bytes]) -> Iterator[_RawRecord]:
    from fastwarc.warc import ArchiveIterator, WarcRecordType

    metadata = WarcRecordType.metadata
    for record in ArchiveIterator(fileobj, parse_http=False, fsspec_args=False):
        headers = record.headers
        if record.record_type == metadata:
            # A record cut inside its header is typed `unknown` by FastWARC (handled below), so
            # a metadata record here has its Content-Length.
            yield (
                headers.get("WARC-Target-URI"),
                record.content_length,
                record.reader.read(),
                record.stream_pos,
            )
        else:
            length = headers.get("Content-Length")
            yield (
                None,
                int(length) if length and length.isdigit() else None,
                None,
                record.stream_pos,
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
        carry = window[-(len(marker) - 1):]
        chunk_start += len(chunk)


def iter_wat_payloads(
    fileobj: IO[bytes], inc: Inc, reader: str = "warcio"
) -> Iterator[tuple[Optional[str], bytes]]:
    """`(WARC-Target-URI, payload)` of every intact metadata record, surviving damage."""
    read_records = check_reader(reader)
    if not fileobj.seekable() and reader == "fastwarc":
        # FastWARC needs seek() on Python streams (it panics without); warcio does not.
        read_records = _warcio_records
    return _resilient_payloads(fileobj, inc, read_records, skip=0)


class _Gunzip(io.RawIOBase):
    """A gzip stream (one or more members) decompressed as it is read; a file cut short reads
    as an early end (the reader then sees a truncated record) instead of raising and losing the
    data already decompressed, as `gzip.GzipFile` does. Not seekable."""

    def __init__(self, raw: IO[bytes]):
        self._raw = raw
        self._inflate = zlib.decompressobj(31)
        self._buffer = b""
        self._pos = 0
        self._done = False

    def readable(self) -> bool:
        return True

    def _fill(self) -> None:
        while self._pos >= len(self._buffer) and not self._done:
            chunk = self._raw.read(_SCAN_CHUNK)
            if not chunk:
                self._done = True
                data = self._inflate.flush()
            else:
                data = self._inflate.decompress(chunk)
                while self._inflate.eof and self._inflate.unused_data:  # next member
                    rest = self._inflate.unused_data
                    self._inflate = zlib.decompressobj(31)
                    data += self._inflate.decompress(rest)
            self._buffer, self._pos = data, 0

    def readinto(self, buffer) -> int:
        self._fill()
        n = min(len(buffer), len(self._buffer) - self._pos)
        buffer[:n] = self._buffer[self._pos: self._pos + n]
        self._pos += n
        return n


def _is_whole_file_gzip(error: Exception) -> bool:
    """warcio refuses a gzip file that is one stream rather than one member per record."""
    return "non-chunked gzip" in str(error)


def _resilient_payloads(
    fileobj: IO[bytes], inc: Inc, read_records, skip: int
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
            for uri, length, payload, offset in read_records(fileobj):
                first_after_resume = resumed and last_offset is None
                last_offset = offset
                seen += 1
                if seen <= skip:
                    continue
                if length is None or (payload is not None and len(payload) < length):
                    # Cut short: the file ends here, or a damaged gzip member ran into the next.
                    if not first_after_resume:  # else: part of the region already counted
                        inc("damage.truncated_record")
                    if seekable:
                        break
                elif payload is None:
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
                plain = io.BufferedReader(_Gunzip(fileobj))
                yield from _resilient_payloads(plain, inc, read_records, skip=seen)
                return
            # A failure right where reading resumed is the same damaged region: count it once.
            if not (resumed and last_offset is None):
                inc("damage.corrupt_region")
                logging.warning(
                    "damaged WAT data after offset %d: %s: %.120r",
                    start, type(error).__name__, str(error),
                )
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
) -> Iterator[tuple[str, str]]:
    """Every `(source_url, target_url)` edge of a WAT stream (unique within each record)."""
    link_types = frozenset(link_types)
    for uri, payload in iter_wat_payloads(fileobj, inc, reader):
        doc = decode_payload(payload, inc)
        if doc is None:
            continue
        found = page_links(doc, link_types, inc, fallback_url=uri)
        if found is None:
            continue
        page_url, targets = found
        for target in targets:
            yield page_url, target
