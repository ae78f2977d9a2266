"""WAT extraction throughput: ours vs a plain cc-pyspark-style loop vs the decompress+decode floor.

    .venv/bin/python benchmarks/wat_throughput.py --records 100000

Input: the real records of data/commoncrawl/*.wat replicated with varied page URLs and hosts
into one per-record-gzip WAT file (Common Crawl's layout), at least `--records` WARC records.
Rates are records per CPU-second of this one process (records/s per core), best of `--repeat`.

(a)  ours: webgraph_pipeline.wat.wat_edges (validation, normalization, dedup, every drop counted)
     with the default warcio reader, and with the optional FastWARC reader;
(b)  a plain loop the way cc-pyspark extracts links: warcio + json + urljoin, no validation;
(c)  the floor: gzip-decompress every member and JSON-decode every payload (orjson), nothing else.
(r)  for reference: warcio reading alone (no JSON), the ceiling of any warcio-based reader.
Also: JSON decoding alone, json vs orjson, on the same payloads.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import sys
import tempfile
import time
import zlib
from typing import Callable
from urllib.parse import urljoin

import orjson

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from webgraph_pipeline.counters import LocalCounts  # noqa: E402
from webgraph_pipeline.links import DEFAULT_LINK_TYPES  # noqa: E402
from webgraph_pipeline.wat import wat_edges  # noqa: E402

SAMPLE = REPO / "data" / "commoncrawl" / "CC-MAIN-20140820021334-00006.head.warc.wat"


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


def write_input(path: pathlib.Path, min_records: int) -> int:
    """Replicate the sample's metadata records (hosts and pages varied per copy); returns count."""
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
            host = f"h{copy % 5000}.0pointer.de".encode()
            photo = b"photo=%d" % copy
            msn = b"m%d.r.msn.com" % (copy % 7000)
            for _, uri, payload in meta:
                varied = (
                    payload.replace(b"0pointer.de", host)
                    .replace(b"photo=496", photo)
                    .replace(b"0.r.msn.com", msn)
                )
                new_uri = (
                    uri.replace("0pointer.de", host.decode())
                    .replace("photo=496", photo.decode())
                    .replace("0.r.msn.com", msn.decode())
                )
                out.write(_member("metadata", new_uri, varied, written))
                written += 1
            copy += 1
    return written


def ours(reader: str) -> Callable[[str], int]:
    def run(path: str) -> int:
        counts = LocalCounts()
        with open(path, "rb") as f:
            edges = sum(1 for _ in wat_edges(f, counts.inc, reader=reader))
        return edges

    return run


def cc_pyspark_loop(path: str) -> int:
    """Links the way cc-pyspark's WAT link extraction does it: warcio, json, urljoin."""
    from warcio.archiveiterator import ArchiveIterator

    link_types = set(DEFAULT_LINK_TYPES)
    edges = 0
    with open(path, "rb") as f:
        for record in ArchiveIterator(f):
            if record.rec_type != "metadata":
                continue
            try:
                doc = json.loads(record.content_stream().read())
                envelope = doc["Envelope"]
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
            targets = set()
            for link in links:
                if link.get("path") in link_types and "url" in link:
                    targets.add(urljoin(base, link["url"]))
            edges += len(targets)
    return edges


def warcio_read_only(path: str) -> int:
    """The warcio reader alone: every record's payload read, nothing decoded."""
    from warcio.archiveiterator import ArchiveIterator

    with open(path, "rb") as f:
        return sum(len(record.raw_stream.read()) > 0 for record in ArchiveIterator(f))


def gzip_members(data: bytes):
    """Every decompressed gzip member of `data`, in order."""
    view, pos, size = memoryview(data), 0, len(data)
    while pos < size:
        decompressor, parts = zlib.decompressobj(31), []
        while not decompressor.eof and pos < size:
            chunk = view[pos: pos + 16384]
            pos += len(chunk)
            parts.append(decompressor.decompress(chunk))
        pos -= len(decompressor.unused_data)
        yield b"".join(parts)


def floor(path: str) -> int:
    """Decompress every member and JSON-decode every metadata payload; nothing else."""
    with open(path, "rb") as f:
        data = f.read()
    decoded = 0
    for member in gzip_members(data):
        body = member[member.index(b"\r\n\r\n") + 4:]
        if body.startswith(b"{"):
            orjson.loads(body)
            decoded += 1
    return decoded


def timed(fn: Callable[[str], int], path: str, repeat: int) -> tuple[float, int]:
    best, result = float("inf"), 0
    for _ in range(repeat):
        start = time.process_time()
        result = fn(path)
        best = min(best, time.process_time() - start)
    return best, result


def json_vs_orjson(path: str, limit: int = 20000) -> tuple[float, float]:
    with open(path, "rb") as f:
        data = f.read()
    payloads = []
    for member in gzip_members(data):
        body = member[member.index(b"\r\n\r\n") + 4:]
        if body.startswith(b"{"):
            payloads.append(body)
        if len(payloads) >= limit:
            break
    rates = []
    for loads in (json.loads, orjson.loads):
        start = time.process_time()
        for p in payloads:
            loads(p)
        rates.append(len(payloads) / (time.process_time() - start))
    return rates[0], rates[1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=100_000, help="WARC records in the input")
    parser.add_argument("--repeat", type=int, default=1, help="runs per method (best is kept)")
    parser.add_argument(
        "--workdir", default=None, help="keep the input here (default: a temp dir, removed)"
    )
    args = parser.parse_args(argv)

    workdir = pathlib.Path(args.workdir or tempfile.mkdtemp(prefix="wat_bench_"))
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"bench-{args.records}.wat.gz"
    n = write_input(path, args.records)
    size_mb = os.path.getsize(path) / 1e6
    print(f"input: {path} ({n:,} WARC records, {size_mb:.1f} MB per-record gzip)")

    json_rate, orjson_rate = json_vs_orjson(str(path))
    print(f"JSON decode only: json {json_rate:,.0f}/s, orjson {orjson_rate:,.0f}/s "
          f"({orjson_rate / json_rate:.2f}x)")

    methods = [
        ("(a)  ours, warcio reader", ours("warcio")),
        ("(a') ours, FastWARC reader", ours("fastwarc")),
        ("(b)  warcio + json + urljoin", cc_pyspark_loop),
        ("(c)  floor: decompress + orjson", floor),
        ("(r)  warcio reading alone", warcio_read_only),
    ]
    rates = {}
    for name, fn in methods:
        seconds, out = timed(fn, str(path), args.repeat)
        rates[name[:4].strip()] = n / seconds
        print(f"{name:34s} {n / seconds:>10,.0f} records/s per core  "
              f"({seconds:.2f} s CPU, {out:,})")
    a, a2, b, c = rates["(a)"], rates["(a')"], rates["(b)"], rates["(c)"]
    print(f"ratios: a/b = {a / b:.2f} (target >= 1.5), a/c = {a / c:.2f} (target >= 0.5)")
    print(f"        a'/b = {a2 / b:.2f}, a'/c = {a2 / c:.2f}")
    if args.workdir is None:
        shutil.rmtree(workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
