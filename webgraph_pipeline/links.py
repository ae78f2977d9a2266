"""From one WAT JSON payload to the page URL and its outgoing links (DESIGN rules 1, 2 and 4).

Public API (plain functions; counting goes through an `inc(name, n=1)` function, see counters.py):

- `DEFAULT_LINK_TYPES = ("A@/href", "AREA@/href")`: the hyperlink paths of `HTML-Metadata.Links[]`.
- `decode_payload(payload, inc) -> dict | None`: orjson-decode a WAT payload (faster than json;
  `python -m benchmarks.pipeline --wat_records N` measures extraction); `None` (counted as
  `dropped_records.not_json`) if it is not a JSON object.
- `page_links(doc, link_types, inc, fallback_url=None) -> (page_url, targets) | None`: the
  normalized page URL and the set of normalized link targets of one response record, self-loops
  and duplicates removed. `None` when the record yields no page; every reason is counted:
  `dropped_records.{missing_keys,not_response,no_html_metadata,bad_page_url}`, and per link
  `dropped_links.{link_type,no_url,self_loop,duplicate,<url reason>}` (url reasons: urls.py).
  Kept pages count `records.response`, kept links `links.kept`, other envelope types
  `records.<type>`.
- `link_targets(base, page_url, links, link_types, inc) -> set[str]`: the link part of
  `page_links`, for callers that already have the page URL and base.

The page URL is the envelope's `WARC-Header-Metadata.WARC-Target-URI` (or `fallback_url`, the WAT
record's own target, when the envelope lacks it). Relative links are resolved against
`urljoin(page_url, Head.Base)` when the page declares a base, else against the page URL.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

import orjson

from webgraph_contract.urls import LinkResolver, normalize_url, resolve_url
from webgraph_pipeline.counters import Inc

DEFAULT_LINK_TYPES = ("A@/href", "AREA@/href")

# WARC record types a WAT envelope may describe; anything else is counted as `records.other`.
_WARC_TYPES = frozenset(
    (
        "warcinfo",
        "response",
        "resource",
        "request",
        "metadata",
        "revisit",
        "conversion",
        "continuation",
    )
)


def decode_payload(payload: bytes, inc: Inc) -> Optional[dict]:
    """The payload as a JSON object, or None (counted `dropped_records.not_json`)."""
    try:
        doc = orjson.loads(payload)
    except orjson.JSONDecodeError:
        inc("dropped_records.not_json")
        return None
    if not isinstance(doc, dict):
        inc("dropped_records.not_json")
        return None
    return doc


def _response_html(doc: dict, inc: Inc) -> Optional[tuple[dict, dict]]:
    """`(WARC-Header-Metadata, HTML-Metadata)` of a response record, or None (counted)."""
    envelope = doc.get("Envelope")
    header = envelope.get("WARC-Header-Metadata") if isinstance(envelope, dict) else None
    warc_type = header.get("WARC-Type") if isinstance(header, dict) else None
    if not isinstance(warc_type, str):
        inc("dropped_records.missing_keys")
        return None
    if warc_type != "response":
        inc(f"records.{warc_type if warc_type in _WARC_TYPES else 'other'}")
        inc("dropped_records.not_response")
        return None
    payload_meta = envelope.get("Payload-Metadata")
    http_meta = (
        payload_meta.get("HTTP-Response-Metadata") if isinstance(payload_meta, dict) else None
    )
    html_meta = http_meta.get("HTML-Metadata") if isinstance(http_meta, dict) else None
    if not isinstance(html_meta, dict):
        inc("dropped_records.no_html_metadata")
        return None
    return header, html_meta


def _link_base(page_url: str, html_meta: dict) -> str:
    """The URL relative links resolve against: the page, or its `<base href>` if valid."""
    head = html_meta.get("Head")
    base = head.get("Base") if isinstance(head, dict) else None
    if isinstance(base, str) and base.strip():
        resolved, _ = resolve_url(page_url, base)
        if resolved is not None:
            return resolved
    return page_url


def link_targets(
    base: str, page_url: str, links: Iterable[Any], link_types: frozenset[str], inc: Inc
) -> set[str]:
    """Normalized targets of the hyperlinks among `links`, without `page_url` itself.

    Each distinct href is resolved once (navigation links repeat a lot); counts stay per link.
    """
    hrefs: dict[str, int] = {}
    drops: dict[str, int] = {}
    for link in links:
        if not isinstance(link, dict) or link.get("path") not in link_types:
            drops["link_type"] = drops.get("link_type", 0) + 1
            continue
        href = link.get("url")
        if isinstance(href, str):
            hrefs[href] = hrefs.get(href, 0) + 1
        else:
            drops["no_url"] = drops.get("no_url", 0) + 1
    targets: set[str] = set()
    kept = 0
    resolve = LinkResolver(base)
    for href, n in hrefs.items():
        target, reason = resolve(href)
        if target is None:
            drops[reason] = drops.get(reason, 0) + n
        elif target == page_url:
            drops["self_loop"] = drops.get("self_loop", 0) + n
        else:
            kept += n
            targets.add(target)
    if kept > len(targets):
        drops["duplicate"] = kept - len(targets)
    for reason, n in drops.items():
        inc(f"dropped_links.{reason}", n)
    if targets:
        inc("links.kept", len(targets))
    return targets


def page_links(
    doc: dict,
    link_types: Iterable[str],
    inc: Inc,
    fallback_url: Optional[str] = None,
) -> Optional[tuple[str, set[str]]]:
    """`(page_url, targets)` of one decoded WAT payload, or None when it yields no page."""
    found = _response_html(doc, inc)
    if found is None:
        return None
    header, html_meta = found
    raw_url = header.get("WARC-Target-URI") or fallback_url
    page_url, _ = normalize_url(raw_url) if isinstance(raw_url, str) else (None, None)
    if page_url is None:
        inc("dropped_records.bad_page_url")
        return None
    inc("records.response")
    links = html_meta.get("Links")
    if not isinstance(links, list):
        return page_url, set()
    if not isinstance(link_types, frozenset):
        link_types = frozenset(link_types)
    base = _link_base(page_url, html_meta)
    return page_url, link_targets(base, page_url, links, link_types, inc)
