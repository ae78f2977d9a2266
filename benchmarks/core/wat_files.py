"""WAT files for the pipeline's benchmarks: made (the real sample replicated, or synthetic pages)
and read by the floors ours is measured against (a plain warcio loop, decompression and JSON)."""

from __future__ import annotations

import glob
import json
import os
import pathlib
import time
import zlib
from typing import Iterator
from urllib.parse import urljoin

from benchmarks.core.paths import DATA

SAMPLE = DATA / "commoncrawl" / "CC-MAIN-20140820021334-00006.head.warc.wat"


def sample_records() -> list[tuple[str, str, bytes]]:
    """(WARC type, target URI, payload) of every record of the real sample."""
    from warcio.archiveiterator import ArchiveIterator

    with open(SAMPLE, "rb") as f:
        return [
            (r.rec_type, r.rec_headers.get_header("WARC-Target-URI") or "", r.raw_stream.read())
            for r in ArchiveIterator(f)
        ]


def _member(warc_type: str, uri: str, payload: bytes, serial: int) -> bytes:
    content_type = "application/json" if warc_type == "metadata" else "application/warc-fields"
    header = (
        f"WARC/1.0\r\nWARC-Type: {warc_type}\r\n"
        + (f"WARC-Target-URI: {uri}\r\n" if uri else "")
        + "WARC-Date: 2014-09-05T15:18:43Z\r\n"
        f"WARC-Record-ID: <urn:uuid:00000000-0000-0000-0000-{serial:012d}>\r\n"
        f"Content-Type: {content_type}\r\nContent-Length: {len(payload)}\r\n\r\n"
    ).encode()
    compressor = zlib.compressobj(6, zlib.DEFLATED, 31)
    return compressor.compress(header + payload + b"\r\n\r\n") + compressor.flush()


def replicate_sample(path: pathlib.Path, min_records: int) -> int:
    """One per-record-gzip WAT file of the sample's metadata records replicated (hosts and pages
    varied per copy) to at least `min_records` records; returns the count."""
    records = sample_records()
    info = [r for r in records if r[0] != "metadata"]
    meta = [r for r in records if r[0] == "metadata"]
    written = 0
    with open(path, "wb") as out:
        for warc_type, uri, payload in info:
            out.write(_member(warc_type, uri, payload, written))
            written += 1
        copy = 0
        while written < min_records:
            swaps = (
                (b"0pointer.de", f"h{copy % 5000}.0pointer.de".encode()),
                (b"photo=496", b"photo=%d" % copy),
                (b"0.r.msn.com", b"m%d.r.msn.com" % (copy % 7000)),
            )
            for _, uri, payload in meta:
                for old, new in swaps:
                    payload, uri = (
                        payload.replace(old, new),
                        uri.replace(old.decode(), new.decode()),
                    )
                out.write(_member("metadata", uri, payload, written))
                written += 1
            copy += 1
    return written


def synthetic_wat(pages: int, work_dir: str, records_per_file: int) -> tuple[str, float, int]:
    """(glob, seconds to write, bytes) of WAT files of `pages` generated web pages (about 10 links
    each, `webgraph_pipeline.wat_writer`), cached under `work_dir`."""
    from webgraph_pipeline.wat_writer import synthetic_pages, write_wat_files

    out = os.path.join(work_dir, f"wat_{pages}")
    pattern, done = os.path.join(out, "*.warc.wat.gz"), os.path.join(out, "DONE")
    if not os.path.exists(done):
        start = time.time()
        write_wat_files(synthetic_pages(pages, mean_out=10, seed=0), out, records_per_file)
        with open(done, "w") as f:
            f.write(f"{time.time() - start}\n")
    with open(done) as f:
        seconds = float(f.read())
    return pattern, seconds, sum(os.path.getsize(f) for f in glob.glob(pattern))


def gzip_members(data: bytes) -> Iterator[bytes]:
    """Every decompressed gzip member of `data`, in order."""
    view, pos, size = memoryview(data), 0, len(data)
    while pos < size:
        decompressor, parts = zlib.decompressobj(31), []
        while not decompressor.eof and pos < size:
            chunk = view[pos : pos + 16384]
            pos += len(chunk)
            parts.append(decompressor.decompress(chunk))
        pos -= len(decompressor.unused_data)
        yield b"".join(parts)


def json_payloads(path: str) -> Iterator[bytes]:
    """The JSON payloads of a per-record-gzip WAT file, decompressed, nothing else."""
    with open(path, "rb") as f:
        data = f.read()
    for member in gzip_members(data):
        body = member[member.index(b"\r\n\r\n") + 4 :]
        if body.startswith(b"{"):
            yield body


def decode_floor(path: str) -> int:
    """The floor: decompress every member and JSON-decode every metadata payload (orjson)."""
    import orjson

    return sum(1 for body in json_payloads(path) if orjson.loads(body) is not None)


def cc_pyspark_loop(path: str) -> int:
    """Links the way cc-pyspark's WAT link extraction does it: warcio, json, urljoin; no
    validation."""
    from warcio.archiveiterator import ArchiveIterator

    from webgraph_pipeline.links import DEFAULT_LINK_TYPES

    link_types = set(DEFAULT_LINK_TYPES)
    edges = 0
    with open(path, "rb") as f:
        for record in ArchiveIterator(f):
            if record.rec_type != "metadata":
                continue
            try:
                envelope = json.loads(record.content_stream().read())["Envelope"]
                if envelope["WARC-Header-Metadata"]["WARC-Type"] != "response":
                    continue
                url = envelope["WARC-Header-Metadata"]["WARC-Target-URI"]
                html_meta = envelope["Payload-Metadata"]["HTTP-Response-Metadata"]["HTML-Metadata"]
                links = html_meta["Links"]
            except (KeyError, ValueError):
                continue
            base = url
            if "Head" in html_meta and "Base" in html_meta["Head"]:
                base = urljoin(url, html_meta["Head"]["Base"])
            edges += len(
                {
                    urljoin(base, link["url"])
                    for link in links
                    if link.get("path") in link_types and "url" in link
                }
            )
    return edges


def warcio_read_only(path: str) -> int:
    """The warcio reader alone: every record's payload read, nothing decoded."""
    from warcio.archiveiterator import ArchiveIterator

    with open(path, "rb") as f:
        return sum(len(record.raw_stream.read()) > 0 for record in ArchiveIterator(f))


def response_pages(pattern: str) -> int:
    """warcio and orjson over every file of `pattern`: the response pages (a plain read's floor)."""
    import orjson
    from warcio.archiveiterator import ArchiveIterator

    n = 0
    for path in sorted(glob.glob(pattern)):
        with open(path, "rb") as f:
            for record in ArchiveIterator(f):
                if record.rec_type == "metadata":
                    payload = orjson.loads(record.content_stream().read())
                    n += "HTTP-Response-Metadata" in payload["Envelope"]["Payload-Metadata"]
    return n
