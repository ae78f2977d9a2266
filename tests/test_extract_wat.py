"""WAT reading and link extraction: the real Common Crawl sample against an HTML oracle, and every
kind of bad input (counted by reason, valid records around it still give their edges)."""

from __future__ import annotations

import gzip
import io
import json
import zlib
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit, urlunsplit

import pytest
from warcio.archiveiterator import ArchiveIterator

from webgraph_pipeline.counters import LocalCounts
from webgraph_pipeline.wat import WatFileReport, wat_edges

from extract_fixtures import a_links, envelope, wat_bytes

WAT = "commoncrawl/CC-MAIN-20140820021334-00006.head.warc.wat"
WARC = "commoncrawl/CC-MAIN-20140820021334-00006.head.warc"
PAGE = "http://0pointer.de/photos/?gallery=Australia&photo=496"
READERS = ["warcio", "fastwarc"]

# Read off the page's `A@/href` entries by hand (13 distinct targets once `&amp;` is decoded, `#`
# links are self-loops, the javascript: link is dropped, and ./ paths resolve under /photos/).
EXPECTED_0POINTER = {
    "http://0pointer.de/photos/",
    "http://0pointer.de/photos/?gallery=Australia",
    "http://0pointer.de/photos/?gallery=Australia&photo=496&exif_style=&show_thumbs=yes",
    "http://0pointer.de/photos/?gallery=Australia&photo=495&exif_style=&show_thumbs=",
    "http://0pointer.de/photos/?gallery=Australia&photo=497&exif_style=&show_thumbs=",
    "http://0pointer.de/photos/?galerie=Australia&photo=496&exif_style=descriptive&show_thumbs=",
    "http://0pointer.de/photos/galleries/Australia/mq/img-496.jpg",
    "http://0pointer.de/static/panoramas.cgi",
    "http://0pointer.de/static/index.cgi",
    "http://0pointer.de/blog",
    "http://0pointer.de/lennart/",
    "http://0pointer.de/imprint",
    "http://creativecommons.org/licenses/by-sa/3.0/",
}


def run(data: bytes, reader: str = "warcio", **kw) -> tuple[set, LocalCounts]:
    counts = LocalCounts()
    edges = list(wat_edges(io.BytesIO(data), counts.inc, reader=reader, **kw))
    assert len(edges) == len(set(edges))
    return set(edges), counts


class _Anchors(HTMLParser):
    """`<a href>` / `<area href>` values and `<base href>` (html.parser decodes entities)."""

    def __init__(self):
        super().__init__()
        self.hrefs, self.base = [], None

    def handle_starttag(self, tag, attrs):
        href = dict(attrs).get("href")
        if href is None:
            return
        if tag in ("a", "area"):
            self.hrefs.append(href)
        elif tag == "base" and self.base is None:
            self.base = href


def _oracle_normalize(url: str) -> str | None:
    """Independent normalization with urllib: http(s) only, lower-case host, no default port,
    no fragment, empty path -> '/'."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    netloc = parts.hostname
    if parts.port and parts.port != {"http": 80, "https": 443}[parts.scheme]:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))


def test_real_wat_page_matches_html_oracle(data_dir):
    with open(data_dir / WARC, "rb") as f:
        html = next(
            r.content_stream().read()
            for r in ArchiveIterator(f)
            if r.rec_type == "response" and r.rec_headers.get_header("WARC-Target-URI") == PAGE
        )
    parser = _Anchors()
    parser.feed(html.decode("utf-8"))
    base = urljoin(PAGE, parser.base) if parser.base else PAGE
    oracle = {_oracle_normalize(urljoin(base, h)) for h in parser.hrefs} - {None, PAGE}
    assert len(parser.hrefs) == 26  # the WAT's 26 A@/href entries, as data/README.md says

    for reader in READERS:
        edges, counts = run((data_dir / WAT).read_bytes(), reader)
        targets = {t for s, t in edges if s == PAGE}
        assert targets == oracle == EXPECTED_0POINTER
        assert {s for s, _ in edges} == {PAGE}  # the other response has no HTML-Metadata
        assert counts["dropped_links.javascript_scheme"] == 1
        assert counts["dropped_links.self_loop"] == 7  # the seven `#` links
        assert counts["dropped_records.no_html_metadata"] == 1
        assert counts["records.response"] == 1


# --- bad input: each case is surrounded by valid records whose edges must survive -----------------

BEFORE = envelope("http://before.de/", a_links("http://x.de/1", "/2"))
AFTER = envelope("http://after.de/", a_links("http://y.de/1"))
GOOD_EDGES = {
    ("http://before.de/", "http://x.de/1"),
    ("http://before.de/", "http://before.de/2"),
    ("http://after.de/", "http://y.de/1"),
}


@pytest.mark.parametrize("reader", READERS)
def test_corrupt_gzip_member_loses_only_that_record(reader):
    middle = envelope("http://lost.de/", a_links("http://z.de/"))
    data, offsets = wat_bytes([BEFORE, middle, AFTER])
    damaged = bytearray(data)
    for i in range(offsets[1] + 30, offsets[1] + 60):
        damaged[i] ^= 0x5A
    edges, counts = run(bytes(damaged), reader)
    assert edges == GOOD_EDGES
    assert counts["damage.corrupt_region"] == 1


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("gzip", [True, False])
def test_file_cut_mid_record(reader, gzip):
    cut_page = envelope("http://cut.de/", a_links(*[f"http://c.de/{i}" for i in range(50)]))
    data, offsets = wat_bytes([BEFORE, AFTER, cut_page], gzip=gzip)
    edges, counts = run(data[: (offsets[2] + len(data)) // 2], reader)
    assert edges == GOOD_EDGES
    assert counts["damage.truncated_record"] + counts["damage.corrupt_region"] == 1


@pytest.mark.parametrize("reader", READERS)
def test_truncated_gzip_member_in_the_middle(reader):
    middle = envelope("http://lost.de/", a_links("http://z.de/"))
    data, offsets = wat_bytes([BEFORE, middle, AFTER])
    # Drop the second half of the middle member: its deflate stream ends early, AFTER follows.
    cut = (offsets[1] + offsets[2]) // 2
    edges, counts = run(data[:cut] + data[offsets[2] :], reader)
    assert edges == GOOD_EDGES
    assert counts["damage.corrupt_region"] + counts["damage.truncated_record"] == 1


@pytest.mark.parametrize("reader", READERS)
def test_garbage_between_plain_records(reader):
    data, offsets = wat_bytes([BEFORE, AFTER], gzip=False)
    damaged = data[: offsets[1]] + b"this is not a WARC record\r\n\r\n" + data[offsets[1] :]
    edges, counts = run(damaged, reader)
    assert edges == GOOD_EDGES
    assert counts["damage.corrupt_region"] == 1


def test_payload_not_json():
    edges, counts = run(wat_bytes([BEFORE, b'{"Envelope": {"truncated', b"\xff\xfe", AFTER])[0])
    assert edges == GOOD_EDGES
    assert counts["dropped_records.not_json"] == 2


def test_json_without_expected_keys():
    odd = [{"Envelope": {}}, {"Container": 1}, {"Envelope": {"WARC-Header-Metadata": []}}]
    edges, counts = run(wat_bytes([BEFORE, *odd, AFTER])[0])
    assert edges == GOOD_EDGES
    assert counts["dropped_records.missing_keys"] == 3


def test_records_of_other_warc_types():
    others = [("warcinfo", b"software: x\r\n"), ("resource", b"abc"), ("request", b"GET /")]
    request = envelope("http://req.de/", warc_type="request")
    edges, counts = run(wat_bytes([*others[:1], BEFORE, *others[1:], request, AFTER])[0])
    assert edges == GOOD_EDGES
    assert counts["dropped_records.other_warc_type"] == 3
    assert counts["dropped_records.not_response"] == 1
    assert counts["records.request"] == 1


def test_response_without_html_metadata():
    bare = envelope("http://bare.de/", html=False)
    edges, counts = run(wat_bytes([BEFORE, bare, AFTER])[0])
    assert edges == GOOD_EDGES
    assert counts["dropped_records.no_html_metadata"] == 1


def test_page_with_a_million_links():
    n = 1_000_000
    doc = json.dumps(envelope("http://big.de/", a_links("/p0"))).encode()
    links = b",".join(b'{"path":"A@/href","url":"/p%d"}' % i for i in range(n))
    big = doc.replace(b'{"path": "A@/href", "url": "/p0"}', links)
    assert len(big) > 30_000_000
    edges, counts = run(wat_bytes([BEFORE, big, AFTER], gzip=False)[0])
    assert len(edges) == n + len(GOOD_EDGES)
    assert GOOD_EDGES <= edges
    assert ("http://big.de/", "http://big.de/p999999") in edges
    assert counts["links.kept"] == n + 3


def test_bad_urls_counted_by_reason_good_ones_normalized():
    bad = {
        "javascript:void(0)": "javascript_scheme",
        "mailto:a@b.de": "mailto_scheme",
        "data:text/html,hi": "data_scheme",
        "ftp://files.de/x": "ftp_scheme",
        "tel:+4912345": "tel_scheme",
        "http://": "no_host",
        "http://a.de/with space": "whitespace",
        "http://a.de/\x01ctl": "control_char",
        "http://[::1": "bad_ipv6",
        "http://a.de:99999/": "bad_port",
        "http://" + "x" * 64 + ".de/": "label_too_long",
        "http://a.de/" + "q" * 10_000: "url_too_long",
    }
    good = {
        "http://bücher.de/": "http://xn--bcher-kva.de/",
        "HTTP://UPPER.DE/Path": "http://upper.de/Path",
        "http://port.de:80/x": "http://port.de/x",
        "https://port.de:443/": "https://port.de/",
        "https://port.de:8443/": "https://port.de:8443/",
    }
    page = envelope("http://page.de/", a_links(*bad, *good))
    edges, counts = run(wat_bytes([BEFORE, page, AFTER])[0])
    assert edges == GOOD_EDGES | {("http://page.de/", v) for v in good.values()}
    for reason in bad.values():
        assert counts[f"dropped_links.{reason}"] == 1, reason


def test_base_href_link_types_and_union_semantics():
    links = [
        ("A@/href", "rel/x"),
        ("AREA@/href", "/area"),
        ("IMG@/src", "img.png"),
        ("A@/href", "rel/x"),
    ]
    page = envelope("http://site.de/dir/page.html", links, base="http://cdn.de/root/")
    edges, counts = run(wat_bytes([page])[0])
    assert edges == {
        ("http://site.de/dir/page.html", "http://cdn.de/root/rel/x"),
        ("http://site.de/dir/page.html", "http://cdn.de/area"),
    }
    assert counts["dropped_links.link_type"] == 1
    assert counts["dropped_links.duplicate"] == 1
    only_img, _ = run(wat_bytes([page])[0], link_types=["IMG@/src"])
    assert only_img == {("http://site.de/dir/page.html", "http://cdn.de/root/img.png")}


@pytest.mark.parametrize("reader", READERS)
def test_unseekable_stream_keeps_everything_before_damage(reader):
    class Unseekable(io.RawIOBase):
        def __init__(self, data):
            self._inner = io.BytesIO(data)

        def readable(self):
            return True

        def readinto(self, buffer):
            return self._inner.readinto(buffer)

    middle = envelope("http://lost.de/", a_links("http://z.de/"))
    data, offsets = wat_bytes([BEFORE, middle, AFTER])
    damaged = data[: offsets[1] + 30] + bytes(30) + data[offsets[1] + 60 :]
    counts = LocalCounts()
    edges = set(wat_edges(io.BufferedReader(Unseekable(damaged)), counts.inc, reader=reader))
    assert {e for e in GOOD_EDGES if e[0] == "http://before.de/"} <= edges
    assert not any(s == "http://lost.de/" for s, _ in edges)
    assert counts["damage.corrupt_region"] == 1


def test_unknown_reader_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown WAT reader"):
        list(wat_edges(io.BytesIO(b""), LocalCounts().inc, reader="nope"))


@pytest.mark.parametrize("reader", READERS)
def test_plain_per_record_gzip_and_whole_file_gzip_read_alike(data_dir, reader):
    import gzip

    plain = (data_dir / WAT).read_bytes()
    per_record, _ = wat_bytes([BEFORE, AFTER])
    expected, _ = run(plain, reader)
    assert run(gzip.compress(plain), reader)[0] == expected
    assert run(wat_bytes([BEFORE, AFTER], gzip=False)[0], reader)[0] == GOOD_EDGES
    assert run(per_record, reader)[0] == GOOD_EDGES


@pytest.mark.parametrize("reader", READERS)
def test_whole_file_gzip_cut_short(reader):
    import gzip

    last = envelope("http://cut.de/", a_links(*[f"http://c.de/{i}" for i in range(300)]))
    whole = gzip.compress(wat_bytes([BEFORE, AFTER, last], gzip=False)[0])
    edges, counts = run(whole[: len(whole) - 200], reader)
    assert edges == GOOD_EDGES
    assert counts["damage.corrupt_region"] + counts["damage.truncated_record"] == 1


def _cut_in_third_record(whole_file: bool) -> tuple[bytes, int]:
    """A gzip WAT of BEFORE, AFTER and a third record cut short (the gzip stream ends without its
    end marker): 20 bytes into its header (whole-file gzip), or halfway through its gzip member
    (one member per record); where the third starts."""
    third = envelope("http://cut.de/", a_links("http://c.de/"))
    plain, offsets = wat_bytes([BEFORE, AFTER, third], gzip=False)
    cut = zlib.compressobj(wbits=31)
    if whole_file:
        return cut.compress(plain[: offsets[2] + 20]) + cut.flush(zlib.Z_SYNC_FLUSH), offsets[2]
    members = b"".join(gzip.compress(plain[a:b]) for a, b in zip(offsets, offsets[1:3]))
    last = gzip.compress(plain[offsets[2] :])
    return members + last[: len(last) // 2], len(members)


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("whole_file", [False, True])
def test_a_gzip_record_cut_short_is_a_truncated_record(reader, whole_file):
    """Both readers see the cut record and name it alike (FastWARC gave it as an intact empty
    record); FastWARC has no offset inside a whole-file gzip, and says so."""
    data, third_at = _cut_in_third_record(whole_file)
    report = WatFileReport()
    edges, counts = run(data, reader, report=report)
    assert edges == GOOD_EDGES
    assert counts["damage.truncated_record"] == 1 and not counts["damage.corrupt_region"]
    where = f"byte {third_at}"
    if whole_file:
        where += " of the decompressed stream" if reader == "warcio" else ""
        where = "an unknown byte of the whole-file gzip" if reader == "fastwarc" else where
    assert report.verdict() == ("partly_read", "truncated_record", f"{where} (record 3)")


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("gzip_members", [True, False])
def test_both_readers_name_a_corrupt_record_by_where_it_starts(reader, gzip_members):
    middle = envelope("http://lost.de/", a_links("http://z.de/"))
    data, offsets = wat_bytes([BEFORE, middle, AFTER], gzip=gzip_members)
    damaged = bytearray(data)
    if gzip_members:
        for i in range(offsets[1] + 30, offsets[1] + 60):
            damaged[i] ^= 0x5A
    else:  # the middle record's header unreadable
        damaged[offsets[1] : offsets[1] + 8] = b"XXXXXXXX"
    report = WatFileReport()
    edges, counts = run(bytes(damaged), reader, report=report)
    assert edges == GOOD_EDGES
    assert report.verdict() == ("partly_read", "corrupt_region", f"byte {offsets[1]} (record 2)")
