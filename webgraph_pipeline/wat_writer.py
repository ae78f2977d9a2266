"""Pack any link graph into realistic Common Crawl WAT files, and generate large synthetic graphs.

Each page becomes a WARC `metadata` record whose JSON payload follows Common Crawl's layout
(Envelope / WARC-Header-Metadata / Payload-Metadata / HTTP-Response-Metadata / HTML-Metadata /
Head / Links with `path` and `url`), gzipped per record as in real `.warc.wat.gz` files, after a
`warcinfo` record and, like a real WAT, with the page's `request` metadata record before it.
Links to the same host are written relative (to the page, or to a `<base href>` that some pages
declare), as a real page would have them; every relative link is checked to resolve back to its
target. Pages also carry non-hyperlink entries (a stylesheet, an image) that extraction must skip.

CLI:
  python -m webgraph_pipeline.wat_writer --edges data/hollins/edges.txt \
      --urls data/hollins/urls.txt --output /tmp/hollins_wat --records_per_file 1000
  python -m webgraph_pipeline.wat_writer --synthetic_pages 100000 --output /tmp/synth_wat
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import sys
import uuid
import zlib
from typing import Iterable, Iterator, Optional, Sequence
from urllib.parse import urljoin, urlsplit

import numpy as np
import orjson

from webgraph_contract.command_line import OneLineParser
from webgraph_pipeline.edge_formats import EdgeFormat, parse_block, parse_url_line

Page = tuple[str, Sequence[str]]  # (page URL, outlink URLs)
WARC_DATE = "2021-06-12T00:00:00Z"
FILENAME_PREFIX = "CC-MAIN-synthetic"
PROG = "webgraph_pipeline.wat_writer"


def _hash01(text: str) -> float:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big") / 2.0**64


def _record_id(*parts: str) -> str:
    return f"<urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, '|'.join(parts))}>"


def page_base(page_url: str) -> Optional[str]:
    """The `<base href>` a page declares (its own directory, on about 1 page in 8), or None."""
    if _hash01("base|" + page_url) >= 0.125:
        return None
    parts = urlsplit(page_url)
    return (
        f"{parts.scheme}://{parts.netloc}{posixpath.dirname(parts.path) or '/'}".rstrip("/") + "/"
    )


def relative_link(base_url: str, target: str) -> str:
    """How a page at `base_url` would write a link to `target`: relative when on the same host.

    Same directory: `name?query`; same host elsewhere: `/path?query`; other hosts: absolute.
    The result always resolves back to `target` with `urljoin(base_url, link)`.
    """
    b, t = urlsplit(base_url), urlsplit(target)
    candidates = []
    if (b.scheme, b.netloc) == (t.scheme, t.netloc):
        query = f"?{t.query}" if t.query else ""
        name = posixpath.basename(t.path)
        if name and posixpath.dirname(t.path) == posixpath.dirname(b.path or "/"):
            candidates.append(name + query)
        if t.path.startswith("/"):
            candidates.append(t.path + query)
    for link in candidates:
        if urljoin(base_url, link) == target:
            return link
    return target


def page_links(page_url: str, targets: Sequence[str]) -> tuple[Optional[str], list[dict]]:
    """(declared base or None, the HTML-Metadata `Links` list) of one page."""
    base = page_base(page_url)
    resolve_from = urljoin(page_url, base) if base else page_url
    links = [
        {"path": "A@/href", "url": relative_link(resolve_from, t), "text": f"link {i}"}
        for i, t in enumerate(targets)
    ]
    links.insert(min(1, len(links)), {"path": "IMG@/src", "url": "/images/logo.png", "alt": "logo"})
    if not base:  # with a <base href>, "#top" would point at the base, not at the page itself
        links.append({"path": "A@/href", "url": "#top", "text": "top"})
    return base, links


def response_payload(page_url: str, targets: Sequence[str], filename: str, offset: int) -> dict:
    """The JSON payload of one page's WAT response record, in Common Crawl's layout."""
    base, links = page_links(page_url, targets)
    head: dict = {
        "Title": f"Page {posixpath.basename(urlsplit(page_url).path) or 'index'}",
        "Link": [
            {"path": "LINK@/href", "rel": "stylesheet", "type": "text/css", "url": "/css/site.css"}
        ],
        "Metas": [{"name": "viewport", "content": "width=device-width"}],
    }
    if base:
        head["Base"] = base
    body_length = str(400 + 60 * len(links))
    return {
        "Envelope": {
            "Format": "WARC",
            "WARC-Header-Length": "560",
            "Actual-Content-Length": body_length,
            "WARC-Header-Metadata": {
                "WARC-Type": "response",
                "WARC-Date": WARC_DATE,
                "Content-Length": body_length,
                "WARC-Record-ID": _record_id("response", page_url),
                "WARC-Target-URI": page_url,
                "Content-Type": "application/http; msgtype=response",
            },
            "Payload-Metadata": {
                "Actual-Content-Type": "application/http; msgtype=response",
                "HTTP-Response-Metadata": {
                    "Headers": {"Content-Type": "text/html; charset=utf-8", "Server": "Apache"},
                    "Headers-Length": "180",
                    "Entity-Length": str(int(body_length) - 180),
                    "Response-Message": {"Status": "200", "Version": "HTTP/1.1", "Reason": "OK"},
                    "HTML-Metadata": {"Head": head, "Links": links},
                },
            },
        },
        "Container": {"Compressed": True, "Offset": str(offset), "Filename": filename},
    }


def request_payload(page_url: str, filename: str, offset: int) -> dict:
    """The JSON payload of a page's WAT request record (no links; extraction must skip it)."""
    return {
        "Envelope": {
            "Format": "WARC",
            "WARC-Header-Metadata": {
                "WARC-Type": "request",
                "WARC-Date": WARC_DATE,
                "WARC-Record-ID": _record_id("request", page_url),
                "WARC-Target-URI": page_url,
                "Content-Type": "application/http; msgtype=request",
            },
            "Payload-Metadata": {
                "HTTP-Request-Metadata": {
                    "Request-Message": {
                        "Method": "GET",
                        "Version": "HTTP/1.1",
                        "Path": urlsplit(page_url).path,
                    },
                    "Headers": {"Host": urlsplit(page_url).netloc, "Accept": "text/html"},
                }
            },
        },
        "Container": {"Compressed": True, "Offset": str(offset), "Filename": filename},
    }


# per-record gzip members as in real WATs; level 1: much faster than warcio's 9, a little larger
GZIP_LEVEL = 1


def warc_record(
    warc_type: str, headers: Sequence[tuple[str, str]], content_type: str, payload: bytes
) -> bytes:
    """One WARC/1.0 record (headers, block, the two CRLFs), gzipped as its own member."""
    head = [f"WARC/1.0\r\nWARC-Type: {warc_type}\r\n"]
    head += [f"{name}: {value}\r\n" for name, value in headers]
    head.append(f"Content-Type: {content_type}\r\nContent-Length: {len(payload)}\r\n\r\n")
    gz = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return (
        gz.compress("".join(head).encode("utf-8"))
        + gz.compress(payload)
        + gz.compress(b"\r\n\r\n")
        + gz.flush()
    )


def _metadata_record(page_url: str, payload: dict, kind: str) -> bytes:
    headers = (
        ("WARC-Record-ID", _record_id("wat", kind, page_url)),
        ("WARC-Date", WARC_DATE),
        ("WARC-Target-URI", page_url),
        ("WARC-Refers-To", payload["Envelope"]["WARC-Header-Metadata"]["WARC-Record-ID"]),
    )
    return warc_record("metadata", headers, "application/json", orjson.dumps(payload))


def _warcinfo_record(filename: str) -> bytes:
    fields = b"software: webgraph_pipeline.wat_writer\r\nformat: WARC File Format 1.0\r\n"
    headers = (
        ("WARC-Record-ID", _record_id("warcinfo", filename)),
        ("WARC-Date", WARC_DATE),
        ("WARC-Filename", filename),
    )
    return warc_record("warcinfo", headers, "application/warc-fields", fields)


def write_wat_files(
    pages: Iterable[Page],
    output_dir: str,
    records_per_file: int = 10_000,
    prefix: str = FILENAME_PREFIX,
    with_requests: bool = True,
) -> list[str]:
    """Write pages into `{prefix}-NNNNN.warc.wat.gz` files of `records_per_file` pages each."""
    if records_per_file < 1:
        raise ValueError(f"records_per_file must be >= 1, got {records_per_file}")
    os.makedirs(output_dir, exist_ok=True)
    paths: list[str] = []
    out = None
    for i, (page_url, targets) in enumerate(pages):
        if i % records_per_file == 0:
            if out:
                out.close()
            paths.append(os.path.join(output_dir, f"{prefix}-{len(paths):05d}.warc.wat.gz"))
            out = open(paths[-1], "wb")
            name = os.path.basename(paths[-1]).replace(".wat.gz", ".gz")
            out.write(_warcinfo_record(name))
        offset = out.tell()
        if with_requests:
            out.write(
                _metadata_record(page_url, request_payload(page_url, name, offset), "request")
            )
        out.write(
            _metadata_record(
                page_url, response_payload(page_url, targets, name, offset), "response"
            )
        )
    if out:
        out.close()
    return paths


def read_edge_list(
    edges_path: str, urls_path: Optional[str] = None, header: bool = False
) -> list[Page]:
    """A `src dst` edge-list file (and optional `id url` list) -> pages in first-seen order with
    their outlinks; `header`: the first line of each file is a header.

    Every page of the URL list is a page even without outlinks (a crawled page with no links).
    Lines that are not edges (comments, bad lines) are skipped, as the pipeline's `pairs` format
    does.
    """
    names: dict[str, str] = {}
    if urls_path:
        with open(urls_path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                entry, _ = parse_url_line(line) if n > 1 or not header else (None, "header")
                if entry:
                    names.setdefault(entry[0], entry[1])
    adjacency: dict[str, list[str]] = {url: [] for url in names.values()}
    with open(edges_path, "rb") as f:
        block = parse_block(f.read(), 1, EdgeFormat("pairs", header=header))
    for src, dst in zip(block.src, block.dst):
        if urls_path:
            src, dst = (
                names.get(str(int(src)) if src.isdigit() else src),
                names.get(str(int(dst)) if dst.isdigit() else dst),
            )
            if src is None or dst is None:
                continue
        links = adjacency.setdefault(src, [])
        if dst not in links:
            links.append(dst)
    return list(adjacency.items())


def synthetic_pages(
    num_pages: int,
    mean_out: float = 10.0,
    seed: int = 0,
    tlds: Sequence[str] = ("com", "de", "in", "org", "net"),
    tld_weights: Sequence[float] = (0.45, 0.25, 0.1, 0.1, 0.1),
) -> Iterator[Page]:
    """A web-like graph: power-law out-degrees (Pareto tail, mean ~`mean_out`), power-law
    in-degrees (Zipf popularity), sites of Zipf-distributed sizes on several TLDs, and about half
    the links inside the page's own site (which the WAT writer turns into relative links)."""
    rng = np.random.default_rng(seed)
    num_sites = max(1, num_pages // 20)
    site_sizes = rng.zipf(1.8, size=num_sites).astype(np.int64)
    site_sizes = np.maximum(1, np.round(site_sizes * num_pages / site_sizes.sum())).astype(np.int64)
    site_of = np.repeat(np.arange(num_sites), site_sizes)[:num_pages]
    if len(site_of) < num_pages:
        site_of = np.concatenate([site_of, rng.integers(0, num_sites, num_pages - len(site_of))])
    site_of.sort()
    site_start = np.searchsorted(site_of, np.arange(num_sites))
    site_count = np.bincount(site_of, minlength=num_sites)
    site_tld = rng.choice(
        len(tlds), size=num_sites, p=np.asarray(tld_weights) / np.sum(tld_weights)
    )

    alpha = 2.5  # Pareto tail exponent of the out-degree; mean = x_min * (alpha - 1) / (alpha - 2)
    x_min = mean_out * (alpha - 2) / (alpha - 1)
    out_deg = np.minimum(
        np.floor(x_min * (1 - rng.random(num_pages)) ** (-1 / (alpha - 1))), 2000
    ).astype(np.int64)
    out_deg = np.maximum(out_deg, 1)
    popularity = 1.0 / np.arange(1, num_pages + 1) ** 0.9
    popularity = popularity[rng.permutation(num_pages)]
    popularity /= popularity.sum()

    def url(p: int) -> str:
        s = int(site_of[p])
        return f"http://www.site{s}.{tlds[site_tld[s]]}/s{p % 7}/page{p}.html"

    total = int(out_deg.sum())
    sources = np.repeat(np.arange(num_pages), out_deg)
    local = rng.random(total) < 0.5
    targets = rng.choice(num_pages, size=total, p=popularity)
    site = site_of[sources[local]]
    targets[local] = site_start[site] + (rng.random(local.sum()) * site_count[site]).astype(
        np.int64
    )
    bounds = np.concatenate([[0], np.cumsum(out_deg)])
    for p in range(num_pages):
        links = dict.fromkeys(int(t) for t in targets[bounds[p] : bounds[p + 1]] if t != p)
        yield url(p), [url(t) for t in links]


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = OneLineParser(
        prog=PROG,
        description=(
            "Pack an edge list, or a generated web-like graph, into Common Crawl style WAT files."
        ),
    )
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--edges", help="edge-list file: `src dst` per line (URLs, or ids with --urls)"
    )
    src.add_argument(
        "--synthetic_pages", type=int, help="generate a power-law graph of this many pages"
    )
    parser.add_argument("--urls", help="`id url` list that names the ids of --edges")
    parser.add_argument(
        "--header", action="store_true", help="the first line of --edges and --urls is a header"
    )
    parser.add_argument("--output", required=True, help="output directory")
    parser.add_argument("--records_per_file", type=int, default=10_000, help="pages per WAT file")
    parser.add_argument("--mean_out", type=float, default=10.0, help="synthetic: mean out-degree")
    parser.add_argument("--seed", type=int, default=0, help="synthetic: random seed")
    parser.add_argument("--no_requests", action="store_true", help="omit the request records")
    args = parser.parse_args(argv)
    try:
        if args.edges:
            pages: Iterable[Page] = read_edge_list(args.edges, args.urls, args.header)
        else:
            if args.synthetic_pages < 2:
                raise ValueError(f"--synthetic_pages must be >= 2, got {args.synthetic_pages}")
            pages = synthetic_pages(args.synthetic_pages, args.mean_out, args.seed)
        paths = write_wat_files(
            pages, args.output, args.records_per_file, with_requests=not args.no_requests
        )
    except (OSError, ValueError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {len(paths)} WAT file(s) to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
