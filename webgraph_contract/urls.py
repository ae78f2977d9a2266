"""URL validation and normalization for the link graph (DESIGN rule 3).

Public API (plain functions, no Beam):

- `normalize_url(url) -> (normalized, None)` or `(None, reason)`: validate and normalize one
  absolute URL. `reason` is a short snake_case string (see `DROP_REASONS`).
- `resolve_url(base, href) -> (normalized, None)` or `(None, reason)`: what a browser does with
  `<a href>` on a page whose (already normalized) URL or base is `base`: strip the surrounding
  ASCII whitespace, decode HTML character references, join relative references, then
  `normalize_url`. Equivalent to `normalize_url(urljoin(base, href))`, with fast paths for the
  common shapes (absolute, root-relative, fragment-only links) that skip `urljoin`.
- `LinkResolver(base)`: the same as a callable for the many links of one page (base parsed once).
- `MAX_URL_LENGTH`, `DROP_REASONS`.

Normalization: scheme and host lower-cased; IDN hosts IDNA-encoded (`bücher.de` ->
`xn--bcher-kva.de`); a trailing dot of the host removed; default port (80, 443) removed; userinfo
removed (no credentials in a public dataset); fragment removed; empty path -> `/`; dot segments
(`/./`, `/../`) resolved; non-ASCII characters of path and query percent-encoded as UTF-8. Nothing
else is rewritten (no query sorting, no percent-escape case folding).

HTML character references: Common Crawl WATs before 2019 keep attribute values raw, so an href
`?a=1&amp;b=2` reaches us as written in the HTML. A browser decodes character references in
attributes, so we decode every reference terminated by `;` (`&amp;`, `&#38;`, `&#x26;`); references
without `;` are left alone, because `?a=1&copy=2` is a legal query, not `©`. For WATs written after
the 2019 change this is a no-op except for the rare href whose decoded value still contains such a
reference.
"""

from __future__ import annotations

import html
import ipaddress
import re
from typing import Optional, Tuple
from urllib.parse import quote, urljoin

MAX_URL_LENGTH = 2048
"""Longest URL (before and after normalization) that is kept; longer ones -> `url_too_long`."""

MAX_HOST_LENGTH = 253
MAX_LABEL_LENGTH = 63

# Named schemes get their own reason; any other non-http(s) scheme is `other_scheme`. The set is
# closed so the number of distinct counters stays bounded whatever the input.
_NAMED_SCHEMES = ("javascript", "mailto", "data", "ftp", "tel", "file")

DROP_REASONS = (
    "empty_url",
    "url_too_long",
    "whitespace",
    "control_char",
    *(f"{s}_scheme" for s in _NAMED_SCHEMES),
    "other_scheme",
    "no_scheme",
    "no_host",
    "bad_host",
    "bad_idna",
    "single_label_host",
    "label_too_long",
    "host_too_long",
    "bad_ipv6",
    "bad_port",
)

Result = Tuple[Optional[str], Optional[str]]

_HTML_WS = " \t\n\r\f"
_SCHEME_RE = re.compile(r"([a-zA-Z][a-zA-Z0-9+.\-]*):")
_BAD_CHAR_RE = re.compile(r"[\x00-\x20\x7f]")
_CHAR_REF_RE = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[a-zA-Z][a-zA-Z0-9]{1,31});")
_HOST_OK_RE = re.compile(r"[a-z0-9_\-.]+")
_DEFAULT_PORTS = {"http": "80", "https": "443"}
# Characters of path and query kept as they are when percent-encoding non-ASCII ones: all printable
# ASCII (spaces and controls are rejected before this point).
_SAFE = "".join(chr(c) for c in range(0x21, 0x7F))

# `scheme://` + authority, matched case-insensitively; then path and query; the fragment is cut.
_ABSOLUTE_RE = re.compile(r"((?i:(https?))://([^/?#]*))([^#]*)")
# Normalized `scheme://host[:port]` (or the drop) by raw origin: the links of a page and of a
# site share a few origins, so IDNA and host checks run once per origin. Cleared when full.
_origin_cache: dict[str, Result] = {}
_ORIGIN_CACHE_LIMIT = 200_000


def _bad_char_reason(url: str) -> Optional[str]:
    """`whitespace` / `control_char` if `url` contains any, else None."""
    match = _BAD_CHAR_RE.search(url)
    if match is None:
        return None
    return "whitespace" if match.group() in " \t\n\r\f" else "control_char"


def _scheme_reason(scheme: str) -> str:
    return f"{scheme}_scheme" if scheme in _NAMED_SCHEMES else "other_scheme"


def _normalize_host(host: str) -> Result:
    """Validate and normalize a host (without port): IDNA, lower case, label and length limits."""
    if host.startswith("["):
        if not host.endswith("]"):
            return None, "bad_ipv6"
        try:
            address = ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return None, "bad_ipv6"
        return f"[{address.compressed}]", None
    if "]" in host:
        return None, "bad_ipv6"
    host = host.lower()
    if host.endswith("."):
        host = host[:-1]
    if not host:
        return None, "no_host"
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii").lower()
        except UnicodeError:
            # The codec refuses empty labels and labels over 63 characters; name those precisely.
            labels = host.split(".")
            if any(len(label) > MAX_LABEL_LENGTH for label in labels):
                return None, "label_too_long"
            return None, "bad_idna"
    if _HOST_OK_RE.fullmatch(host) is None:
        return None, "bad_host"
    labels = host.split(".")
    if any(len(label) > MAX_LABEL_LENGTH for label in labels):
        return None, "label_too_long"
    if "" in labels:
        return None, "bad_host"
    if len(host) > MAX_HOST_LENGTH:
        return None, "host_too_long"
    if len(labels) < 2:
        return None, "single_label_host"
    return host, None


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 section 5.2.4, for an absolute path."""
    out: list[str] = []
    segments = path.split("/")
    for segment in segments[1:]:
        if segment == "..":
            if out:
                out.pop()
        elif segment != ".":
            out.append(segment)
    if segments[-1] in (".", ".."):
        out.append("")
    return "/" + "/".join(out)


def normalize_url(url: str) -> Result:
    """Validate and normalize an absolute URL: `(normalized, None)` or `(None, reason)`."""
    if not url:
        return None, "empty_url"
    if len(url) > MAX_URL_LENGTH:
        return None, "url_too_long"
    reason = _bad_char_reason(url)
    if reason is not None:
        return None, reason
    return _normalize_clean(url)


def _normalize_clean(url: str) -> Result:
    """`normalize_url` for a URL already checked for length, whitespace and control chars."""
    match = _ABSOLUTE_RE.match(url)
    if match is None:
        scheme_match = _SCHEME_RE.match(url)
        if scheme_match is None:
            return None, "no_scheme"
        scheme = scheme_match.group(1).lower()
        if scheme != "http" and scheme != "https":
            return None, _scheme_reason(scheme)
        return None, "no_host"
    raw_origin = match.group(1)
    origin = _origin_cache.get(raw_origin)
    if origin is None:
        origin = _normalize_origin(match.group(2).lower(), match.group(3))
        if len(_origin_cache) >= _ORIGIN_CACHE_LIMIT:
            _origin_cache.clear()
        _origin_cache[raw_origin] = origin
    if origin[0] is None:
        return origin
    return _join_tail(origin[0], match.group(4))


def _join_tail(origin: str, tail: str) -> Result:
    """A normalized origin + a path/query tail (fragment already cut): dot segments, non-ASCII."""
    if not tail or tail[0] == "?":
        tail = "/" + tail
    if "/." in tail:
        query_at = tail.find("?")
        if query_at < 0:
            tail = _remove_dot_segments(tail)
        elif "/." in tail[:query_at]:
            tail = _remove_dot_segments(tail[:query_at]) + tail[query_at:]
    if not tail.isascii():
        tail = quote(tail, safe=_SAFE)
    normalized = origin + tail
    if len(normalized) > MAX_URL_LENGTH:
        return None, "url_too_long"
    return normalized, None


def _normalize_origin(scheme: str, authority: str) -> Result:
    """`scheme://host[:port]` normalized, from a lower-case scheme and a raw authority."""
    at = authority.rfind("@")
    if at >= 0:
        authority = authority[at + 1 :]
    if not authority:
        return None, "no_host"
    if authority.startswith("["):
        close = authority.find("]")
        if close < 0:
            return None, "bad_ipv6"
        host, port_part = authority[: close + 1], authority[close + 1 :]
        if port_part and not port_part.startswith(":"):
            return None, "bad_ipv6"
        port = port_part[1:]
    else:
        host, _, port = authority.partition(":")
    if port:
        if not port.isdigit() or not port.isascii() or not 0 < int(port) <= 65535:
            return None, "bad_port"
        port = str(int(port))
        if port == _DEFAULT_PORTS[scheme]:
            port = ""
    host, reason = _normalize_host(host)
    if reason is not None:
        return None, reason
    return (f"{scheme}://{host}:{port}" if port else f"{scheme}://{host}"), None


class LinkResolver:
    """`resolve_url` for many links of one page: the base is parsed once.

    `LinkResolver(base)(href)` == `resolve_url(base, href)`.
    """

    def __init__(self, base: str):
        self.base = base
        normalized, _ = normalize_url(base)
        if normalized is None:
            raise ValueError(f"link base is not a valid http(s) URL: {base[:200]!r}")
        self._base_result: Result = (normalized, None)
        match = _ABSOLUTE_RE.match(normalized)
        self._origin = match.group(1)
        self._scheme = match.group(2)

    def __call__(self, href: str) -> Result:
        if href and (href[0] in _HTML_WS or href[-1] in _HTML_WS):
            href = href.strip(_HTML_WS)
        if not href:
            return None, "empty_url"
        if len(href) > MAX_URL_LENGTH:
            return None, "url_too_long"
        if "&" in href and ";" in href:
            href = _decode_char_refs(href)
        reason = _bad_char_reason(href)
        if reason is not None:
            return None, reason
        first = href[0]
        if first == "#":
            return self._base_result
        if first == "/":
            if href.startswith("//"):
                return _normalize_clean(self._scheme + ":" + href)
            hash_at = href.find("#")
            return _join_tail(self._origin, href if hash_at < 0 else href[:hash_at])
        if _ABSOLUTE_RE.match(href) is not None:
            return _normalize_clean(href)
        match = _SCHEME_RE.match(href)
        if match is not None:
            scheme = match.group(1).lower()
            if scheme != "http" and scheme != "https":
                return None, _scheme_reason(scheme)
        joined = urljoin(self.base, href)
        if len(joined) > MAX_URL_LENGTH:
            return None, "url_too_long"
        return _normalize_clean(joined)


def _decode_char_ref(match: re.Match) -> str:
    return html.unescape(match.group())


def _decode_char_refs(href: str) -> str:
    """Decode the `;`-terminated character references of an attribute value (see module doc)."""
    if href.count("&") == href.count("&amp;"):  # the common case: only `&amp;`, decoded once
        return href.replace("&amp;", "&")
    return _CHAR_REF_RE.sub(_decode_char_ref, href)


def resolve_url(base: str, href: str) -> Result:
    """Resolve an href against `base` and normalize it: `(normalized, None)` or `(None, reason)`.

    `base` must be an absolute http(s) URL (normally a normalized page URL or its `<base>`).
    """
    return LinkResolver(base)(href)
