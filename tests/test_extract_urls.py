"""URL validation and normalization: one case per drop reason, the normalizations, and the fast
paths of `resolve_url` against the plain definition `normalize_url(urljoin(base, href))`."""

from __future__ import annotations

from urllib.parse import urljoin

import pytest

from webgraph_contract.urls import DROP_REASONS, MAX_URL_LENGTH, normalize_url, resolve_url

DROPS = [
    ("", "empty_url"),
    ("http://a.de/" + "x" * 10_000, "url_too_long"),
    ("http://a.de/a b", "whitespace"),
    ("http://a.de/\tb", "whitespace"),
    ("http://a.de/\x00", "control_char"),
    ("http://a.de/\x7f", "control_char"),
    ("javascript:alert(1)", "javascript_scheme"),
    ("JavaScript:alert(1)", "javascript_scheme"),
    ("mailto:someone@a.de", "mailto_scheme"),
    ("data:image/png;base64,AAAA", "data_scheme"),
    ("ftp://a.de/file", "ftp_scheme"),
    ("tel:+49301234", "tel_scheme"),
    ("file:///etc/passwd", "file_scheme"),
    ("gopher://a.de/", "other_scheme"),
    ("a.de/page", "no_scheme"),
    ("http://", "no_host"),
    ("http:///path", "no_host"),
    ("http://user@/", "no_host"),
    ("http:a.de", "no_host"),
    ("http://a_b!.de/", "bad_host"),
    ("http://a..de/", "bad_host"),
    ("http://%61.de/", "bad_host"),
    ("http://\u0627b.de/", "bad_idna"),  # right-to-left label mixed with Latin (IDNA bidi rule)
    ("http://\ue000.de/", "bad_idna"),  # private-use code point
    ("http://localhost/", "single_label_host"),
    ("http://" + "a" * 64 + ".de/", "label_too_long"),
    ("http://" + "ü" * 64 + ".de/", "label_too_long"),
    ("http://" + ".".join(["abcdefghi"] * 26) + ".de/", "host_too_long"),
    ("http://[::1", "bad_ipv6"),
    ("http://[::1]x/", "bad_ipv6"),
    ("http://[not:an:ip]/", "bad_ipv6"),
    ("http://a.de:99999/", "bad_port"),
    ("http://a.de:0/", "bad_port"),
    ("http://a.de:8o/", "bad_port"),
    ("http://a.de:80:80/", "bad_port"),
]


@pytest.mark.parametrize("url,reason", DROPS)
def test_every_bad_kind_has_its_reason(url, reason):
    assert normalize_url(url) == (None, reason)
    assert reason in DROP_REASONS


def test_every_reason_is_exercised():
    assert {r for _, r in DROPS} == set(DROP_REASONS)


NORMALIZED = [
    ("http://bücher.de/", "http://xn--bcher-kva.de/"),
    ("http://BÜCHER.de/", "http://xn--bcher-kva.de/"),
    ("HTTP://WWW.Example.COM/Path?Q=A", "http://www.example.com/Path?Q=A"),
    ("http://a.de:80/x", "http://a.de/x"),
    ("https://a.de:443/x", "https://a.de/x"),
    ("http://a.de:443/x", "http://a.de:443/x"),
    ("https://a.de:080/", "https://a.de:80/"),
    ("http://a.de:/x", "http://a.de/x"),
    ("http://a.de/x#frag", "http://a.de/x"),
    ("http://a.de", "http://a.de/"),
    ("http://a.de?q=1", "http://a.de/?q=1"),
    ("http://a.de./", "http://a.de/"),
    ("http://user:pw@a.de/", "http://a.de/"),
    ("http://a.de/a/./b/../c?x=/../y", "http://a.de/a/c?x=/../y"),
    ("http://a.de/ü?q=ä", "http://a.de/%C3%BC?q=%C3%A4"),
    ("http://a.de/%7Euser", "http://a.de/%7Euser"),
    ("http://[2001:DB8::0:1]:8080/", "http://[2001:db8::1]:8080/"),
    ("http://192.168.0.1/", "http://192.168.0.1/"),
    ("http://sub_domain.a.de/", "http://sub_domain.a.de/"),
]


@pytest.mark.parametrize("url,expected", NORMALIZED)
def test_normalization(url, expected):
    assert normalize_url(url) == (expected, None)


def test_normalization_is_idempotent():
    for url, expected in NORMALIZED:
        assert normalize_url(expected) == (expected, None), url


def test_length_limit_is_inclusive():
    url = "http://a.de/" + "x" * (MAX_URL_LENGTH - len("http://a.de/"))
    assert normalize_url(url) == (url, None)
    assert normalize_url(url + "x") == (None, "url_too_long")


BASE = "http://www.site.de/dir/page.html?p=1"
HREFS = [
    "#",
    "#top",
    "?q=2",
    "?q=2#f",
    "other.html",
    "./other.html",
    "../up.html",
    "../../../x",
    "sub/",
    ".",
    "..",
    "/",
    "/abs/path",
    "/abs/./x/../y",
    "/abs?q#f",
    "//cdn.de/x",
    "//CDN.de:80",
    "http://Other.DE/x",
    "HTTPS://other.de:443/",
    "http:rel.html",
    "https:rel.html",
    "x:y",
    "javascript:void(0)",
    "  /padded  ",
    "/a?b=1&amp;c=2",
    "/a?b=1&copy=2",
    "&#47;root",
    "/ümlaut",
    "http://bücher.de/",
    "mailto:a@b.de",
    ";jsessionid=1",
    "%2e%2e/x",
]


@pytest.mark.parametrize("href", HREFS)
def test_resolve_equals_urljoin_then_normalize(href):
    """The fast paths agree with the plain definition (after the HTML-level steps the oracle does
    itself: strip, decode `&amp;`-style references ended by ';')."""
    plain = href.strip().replace("&amp;", "&").replace("&#47;", "/")
    expected = normalize_url(urljoin(BASE, plain))
    assert resolve_url(BASE, href) == expected


def test_resolve_keeps_reasons_of_raw_hrefs():
    assert resolve_url(BASE, "") == (None, "empty_url")
    assert resolve_url(BASE, "   ") == (None, "empty_url")
    assert resolve_url(BASE, "/a b") == (None, "whitespace")
    assert resolve_url(BASE, "/a&#32;b") == (None, "whitespace")
    assert resolve_url(BASE, "/\x01") == (None, "control_char")
    assert resolve_url(BASE, "tel:123") == (None, "tel_scheme")
    assert resolve_url(BASE, "/" + "x" * MAX_URL_LENGTH) == (None, "url_too_long")
