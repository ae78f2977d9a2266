"""The TLD of a node name, for the TLD filter (paper section 5; applied in graph.py's `Fingerprint`
and counted as `dropped_edges.tld_filter` once edges are deduplicated)."""

from __future__ import annotations

from urllib.parse import urlsplit


def tld_of(url: str) -> str:
    """The top-level domain of a URL's host, lowercase (`''` when there is no host)."""
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return ""
    return host.rstrip(".").rsplit(".", 1)[-1].lower() if host else ""
