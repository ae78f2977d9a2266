"""Streaming WAT reading that survives damaged input, and WAT files to edges (plain functions).

Public API:

- `WAT_READERS = ("warcio", "fastwarc")`: warcio is the default; FastWARC (optional extra `fast`)
  is offered because it is measured faster (benchmarks/wat_throughput.py) and passes the same
  damaged-input tests; it needs a seekable stream (all Beam filesystems give one), so on a
  non-seekable stream warcio is used instead.
- `check_reader(name)`: raise a clear error for an unknown or uninstalled reader.
- `iter_wat_payloads(fileobj, inc, reader="warcio") -> Iterator[(target_uri, payload_bytes)]`:
  every WARC `metadata` record of a WAT stream (plain, gzip, or one gzip member per record),
  record by record; other WARC types are counted `dropped_records.other_warc_type`.
- `wat_edges(fileobj, inc, link_types=DEFAULT_LINK_TYPES, reader="warcio") -> Iterator[(source_url, target_url)]`:
  the edges of every page of a WAT stream (deduplicated within a record, self-loops dropped).

Damage (corrupt or truncated gzip member, a file cut mid-record, bytes that are no WARC record):
every record before the damage is kept; a record whose payload is shorter than its
Content-Length is counted `damage.truncated_record` and dropped; an unreadable region is counted
`damage.corrupt_region`, and when the stream is seekable reading resumes at the next gzip member
(per-record gzip) or `WARC/1.x` line (plain files) after it, so one bad record loses nothing else.
"""

from __future__ import annotations

import logging
from typing import IO, Iterable, Iterator, Optional

from webgraph_pipeline.counters import Inc
from webgraph_pipeline.links import DEFAULT_LINK_TYPES, decode_payload, page_links

WAT_READERS = ("warcio", "fastwarc")

_GZIP_MAGIC = b"\x1f\x8b\x08"
_WARC_LINE = b"\nWARC/1."
_SCAN_CHUNK = 1 << 20

# One record as the readers see it: (WARC type, target URI, declared Content-Length, payload of
# metadata records else None, offset of the record in the file).
_RawRecord = tuple[str, Optional[str], Optional[int], Optional[bytes], int]


def _warcio_records(fileobj: IO[bytes]) -> Iterator[_RawRecord]:
    from warcio.archiveiterator import ArchiveIterator

    records = ArchiveIterator(fileobj)
    for record in records:
        headers = record.rec_headers
        length = headers.get_header("Content-Length")
        payload = record.raw_stream.read() if record.rec_type == "metadata" else None
        yield (
            record.rec_type,
            headers.get_header("WARC-Target-URI"),
            int(length) if length and length.isdigit() else None,
            payload,
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
                "metadata",
                headers.get("WARC-Target-URI"),
                record.content_length,
                record.reader.read(),
                record.stream_pos,
            )
        else:
            length = headers.get("Content-Length")
            yield (
                str(record.record_type),
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
    seekable = fileobj.seekable()
    if not seekable and reader == "fastwarc":
        # FastWARC needs seek() on Python streams (it panics without); warcio does not.
        read_records = _warcio_records
    start = fileobj.tell() if seekable else 0
    head = fileobj.read(len(_GZIP_MAGIC)) if seekable else b""
    marker = _GZIP_MAGIC if head == _GZIP_MAGIC else _WARC_LINE
    resumed = False
    while True:
        if seekable:
            fileobj.seek(start)
        last_offset: Optional[int] = None
        try:
            for warc_type, uri, length, payload, offset in read_records(fileobj):
                first_after_resume = resumed and last_offset is None
                last_offset = offset
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
        next_start = _next_sync_point(fileobj, damaged_at + 1, marker)
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
