"""The graph stage's documented rules (DESIGN.md, WebGraph rules 4-7) worked out in plain Python
with sets, dicts and hashlib: the independent reference the Beam graph stage is checked against.

It shares no code with `webgraph_pipeline`: ids are ranks in the order (blake2b-8 bucket of the
name, name); a row is a test row when it has >= 2 links and blake2b("seed\\x1frow\\x1fname") / 2^64
falls below the test fraction; it holds out floor(f * n + u) links (u from "round"), clamped to
[1, n - 1], the first in the order of blake2b("seed\\x1flink\\x1fname\\x1fcol id"), then col id.
"""

from __future__ import annotations

import collections
import hashlib
import math
from urllib.parse import urlsplit


def _h(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")


def _unit(seed, *parts) -> float:
    return _h("\x1f".join((str(seed),) + parts)) / 2.0**64


def _tld(name: str) -> str:
    host = urlsplit(name).hostname or ""
    return host.rstrip(".").rsplit(".", 1)[-1].lower() if host else ""


def _ids(names, id_buckets):
    return {n: i for i, n in enumerate(sorted(names, key=lambda n: (_h(n) % id_buckets, n)))}


def reference_dataset(
    edges,
    tlds=(),
    min_links=0,
    passes=1,
    bipartite=False,
    id_buckets=1024,
    seed=0,
    test_fraction=0.1,
    holdout_fraction=0.25,
):
    """Edges (with duplicates and self-loops) -> dict with vocab, col_vocab, train, train_t, test
    (sorted lists of (row, cols, gt) tuples), the drop counters and the summary figures."""
    edges = list(edges)
    counters = collections.Counter()
    distinct = set(edges)
    counters["dropped_edges.duplicate"] = len(edges) - len(distinct)
    if not bipartite:
        loops = {e for e in distinct if e[0] == e[1]}
        counters["dropped_edges.self_loop"] = len(loops)
        distinct -= loops
    if tlds:
        kept = {e for e in distinct if _tld(e[0]) in tlds and _tld(e[1]) in tlds}
        counters["dropped_edges.tld_filter"] = len(distinct) - len(kept)
        distinct = kept
    for p in range(1, (passes if min_links else 0) + 1):
        out_d = collections.Counter(s for s, _ in distinct)
        in_d = collections.Counter(t for _, t in distinct)
        if bipartite:
            keep_s = {n for n, c in out_d.items() if c >= min_links}
            keep_t = {n for n, c in in_d.items() if c >= min_links}
            dropped = len(out_d) - len(keep_s) + len(in_d) - len(keep_t)
        else:
            nodes = set(out_d) | set(in_d)
            keep_s = keep_t = {n for n in nodes if out_d[n] >= min_links and in_d[n] >= min_links}
            dropped = len(nodes) - len(keep_s)
        counters["dropped_nodes.degree_filter"] += dropped
        if passes > 1:
            counters[f"dropped_nodes.degree_filter_pass{p}"] += dropped
        kept = {(s, t) for s, t in distinct if s in keep_s and t in keep_t}
        counters["dropped_edges.degree_filter"] += len(distinct) - len(kept)
        distinct = kept
    if bipartite:
        row_ids = _ids({s for s, _ in distinct}, id_buckets)
        col_ids = _ids({t for _, t in distinct}, id_buckets)
    else:
        row_ids = col_ids = _ids({n for e in distinct for n in e}, id_buckets)
    rows = collections.defaultdict(list)
    for s, t in distinct:
        rows[s].append(col_ids[t])
    train, test = [], []
    for name, cols in rows.items():
        cols, n = sorted(cols), len(cols)
        if n >= 2 and _unit(seed, "row", name) < test_fraction:
            h = min(max(math.floor(holdout_fraction * n + _unit(seed, "round", name)), 1), n - 1)
            order = sorted(cols, key=lambda c: (_unit(seed, "link", name, str(c)), c))
            test.append((row_ids[name], tuple(sorted(order[h:])), tuple(sorted(order[:h]))))
        else:
            train.append((row_ids[name], tuple(cols), ()))
    transposed = collections.defaultdict(list)
    for r, cols, _ in train:
        for c in cols:
            transposed[c].append(r)
    in_degree = collections.Counter(col_ids[t] for _, t in distinct)
    return {
        "vocab": {i: n for n, i in row_ids.items()},
        "col_vocab": {i: n for n, i in col_ids.items()},
        "train": sorted(train),
        "train_t": sorted((c, tuple(sorted(r)), ()) for c, r in transposed.items()),
        "test": sorted(test),
        "counters": {k: v for k, v in counters.items() if v},
        "edges": len(distinct),
        "out_degree_histogram": sorted(
            [d, n] for d, n in collections.Counter(map(len, rows.values())).items()
        ),
        "in_degree_histogram": sorted(
            [d, n] for d, n in collections.Counter(in_degree.values()).items()
        ),
    }
