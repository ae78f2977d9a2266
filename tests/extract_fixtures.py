"""Helpers for the extraction tests: write real-format WAT records with warcio's WARCWriter."""

from __future__ import annotations

import io
import json
from typing import Any, Iterable, Optional

from warcio.warcwriter import WARCWriter


def envelope(
    page_url: str,
    links: Optional[list[Any]] = None,
    warc_type: str = "response",
    base: Optional[str] = None,
    html: bool = True,
) -> dict:
    """A WAT JSON payload in Common Crawl's layout; `links` are `(path, url)` pairs or dicts."""
    response: dict[str, Any] = {"Headers": {"Content-Type": "text/html"}}
    if html:
        head: dict[str, Any] = {"Title": "t"}
        if base is not None:
            head["Base"] = base
        response["HTML-Metadata"] = {
            "Head": head,
            "Links": [
                link if isinstance(link, dict) else {"path": link[0], "url": link[1]}
                for link in links or []
            ],
        }
    key = "HTTP-Response-Metadata" if warc_type == "response" else "HTTP-Request-Metadata"
    return {
        "Envelope": {
            "Format": "WARC",
            "WARC-Header-Metadata": {"WARC-Type": warc_type, "WARC-Target-URI": page_url},
            "Payload-Metadata": {key: response},
        }
    }


def a_links(*urls: str) -> list[tuple[str, str]]:
    return [("A@/href", u) for u in urls]


def wat_bytes(records: Iterable[Any], gzip: bool = True) -> tuple[bytes, list[int]]:
    """A WAT file: each item is a dict (JSON payload), raw bytes (payload as is), or a tuple
    `(warc_type, payload_bytes)` for records of other WARC types. Returns the bytes and the offset
    of every record."""
    out = io.BytesIO()
    writer = WARCWriter(out, gzip=gzip)
    offsets = []
    for item in records:
        offsets.append(out.tell())
        warc_type, content_type = "metadata", "application/json"
        if isinstance(item, tuple):
            warc_type, item = item
            content_type = "application/warc-fields"
        payload = json.dumps(item).encode() if isinstance(item, dict) else item
        try:
            uri = item["Envelope"]["WARC-Header-Metadata"]["WARC-Target-URI"]
        except (KeyError, TypeError):
            uri = "http://unknown.de/"
        headers = {  # fixed ids and dates: the same test bytes on every run
            "WARC-Record-ID": f"<urn:uuid:00000000-0000-0000-0000-{len(offsets):012d}>",
            "WARC-Date": "2021-06-01T00:00:00Z",
        }
        record = writer.create_warc_record(
            uri,
            warc_type,
            payload=io.BytesIO(payload),
            warc_content_type=content_type,
            warc_headers_dict=headers,
        )
        writer.write_record(record)
    return out.getvalue(), offsets
