"""The graph stage's record logic on NumPy arrays of one hash bucket: plain functions, no Beam.

Edges are parallel uint64 arrays (source fingerprints, target fingerprints); node tables are sorted
fingerprint arrays with their ids and names. Each function is vectorized (`np.unique`, `lexsort`,
`searchsorted`, `bincount`); Python runs per bucket, per node where a name is needed (ids, splits),
never per edge.
"""

from __future__ import annotations

import collections
from typing import Iterable, Iterator, Optional, Sequence

import numpy as np

from webgraph_pipeline.counters import Inc
from webgraph_pipeline.fingerprints import bucket_of

Arrays = tuple[np.ndarray, ...]



def concat(pieces: Iterable[Arrays], width: int, dtypes: Sequence = ()) -> Arrays:
    """Concatenate a bucket's pieces column by column (`dtypes` for the empty case, uint64 by default)."""
    pieces = list(pieces)
    if not pieces:
        return tuple(np.zeros(0, dtype=dtypes[i] if i < len(dtypes) else np.uint64) for i in range(width))
    return tuple(np.concatenate([p[i] for p in pieces]) for i in range(width))


def split_by_bucket(keys: np.ndarray, num_buckets: int, *arrays: np.ndarray) -> Iterator[tuple[int, Arrays]]:
    """(bucket, the arrays' entries whose key falls in it) for each non-empty bucket of `keys`."""
    if not len(keys):
        return
    buckets = bucket_of(keys, num_buckets)
    order = np.argsort(buckets, kind="stable")
    sizes = np.bincount(buckets, minlength=num_buckets)
    ends = np.cumsum(sizes)
    for b in np.flatnonzero(sizes):
        take = order[ends[b] - sizes[b]: ends[b]]
        yield int(b), tuple(a[take] for a in arrays)


def dedup_edges(
    src: np.ndarray, dst: np.ndarray, in_tlds: Optional[np.ndarray], drop_self_loops: bool, inc: Inc
) -> tuple[np.ndarray, np.ndarray]:
    """Distinct edges sorted by (source, target): counts `dropped_edges.duplicate`, then (graphs only)
    `.self_loop`, then `.tld_filter` for edges with an endpoint outside the TLD set (`in_tlds` False)."""
    order = np.lexsort((dst, src))
    src, dst = src[order], dst[order]
    first = np.ones(len(src), dtype=bool)
    first[1:] = (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])
    if len(src) - first.sum():
        inc("dropped_edges.duplicate", int(len(src) - first.sum()))
    keep = first
    if drop_self_loops:
        loops = first & (src == dst)
        if loops.any():
            inc("dropped_edges.self_loop", int(loops.sum()))
        keep = keep & ~loops
    if in_tlds is not None:
        outside = keep & ~in_tlds[order]
        if outside.any():
            inc("dropped_edges.tld_filter", int(outside.sum()))
        keep = keep & ~outside
    return src[keep], dst[keep]


def count_values(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct values, how often each occurs)."""
    uniq, counts = np.unique(values, return_counts=True)
    return uniq, counts.astype(np.int64)


def sum_counts(keys: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct keys, summed counts) of partial counts."""
    uniq, inverse = np.unique(keys, return_inverse=True)
    return uniq, np.bincount(inverse, weights=counts, minlength=len(uniq)).astype(np.int64)


def is_member(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """Mask of `values` found in the sorted array `sorted_set`."""
    if not len(sorted_set):
        return np.zeros(len(values), dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_set, values), len(sorted_set) - 1)
    return sorted_set[pos] == values


def lookup(values: np.ndarray, sorted_keys: np.ndarray, what: str) -> np.ndarray:
    """Positions of `values` in the sorted `sorted_keys`; an error if one is missing (a lost node)."""
    found = is_member(values, sorted_keys)
    if not found.all():
        missing = int(values[~found][0])
        raise RuntimeError(f"runner lost data: {what} {missing:#x} is in the edges but not in the node table")
    return np.searchsorted(sorted_keys, values)


def degree_verdict(
    src: np.ndarray, in_fps: np.ndarray, in_counts: np.ndarray, min_links: int, bipartite: bool
) -> tuple[np.ndarray, np.ndarray, int]:
    """(kept sources, kept targets, dropped nodes) of one bucket, from all edges of its sources and
    the summed in-degrees of its targets: a node needs K out-links and K in-links; with
    `bipartite`, a source K out-links and a target K in-links."""
    out_fps, out_counts = count_values(src)
    if bipartite:
        kept_src = out_fps[out_counts >= min_links]
        kept_dst = in_fps[in_counts >= min_links]
        dropped = len(out_fps) - len(kept_src) + len(in_fps) - len(kept_dst)
        return kept_src, kept_dst, dropped
    nodes = np.union1d(out_fps, in_fps)
    out_deg = np.zeros(len(nodes), dtype=np.int64)
    in_deg = np.zeros(len(nodes), dtype=np.int64)
    out_deg[np.searchsorted(nodes, out_fps)] = out_counts
    in_deg[np.searchsorted(nodes, in_fps)] = in_counts
    kept = nodes[(out_deg >= min_links) & (in_deg >= min_links)]
    return kept, kept, len(nodes) - len(kept)


def rank_nodes(id_buckets: np.ndarray, names: np.ndarray, start: int) -> np.ndarray:
    """Ids `start..` of one group of nodes, numbered in the order (id bucket, name)."""
    order = sorted(range(len(names)), key=lambda i: (int(id_buckets[i]), names[i]))
    for a, b in zip(order, order[1:]):
        if names[a] == names[b]:
            raise ValueError(f"the node {names[a]!r} was numbered twice; node tables must be distinct")
    ids = np.empty(len(names), dtype=np.int64)
    ids[np.asarray(order, dtype=np.int64)] = np.arange(start, start + len(names), dtype=np.int64)
    return ids


def group_rows(row_ids: np.ndarray, col_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(distinct row ids, offsets, columns sorted within rows): row `r = rows[i]` has the columns
    `cols[offsets[i]:offsets[i + 1]]`."""
    order = np.lexsort((col_ids, row_ids))
    rows_sorted, cols = row_ids[order], col_ids[order]
    rows, starts = np.unique(rows_sorted, return_index=True)
    offsets = np.append(starts, len(rows_sorted)).astype(np.int64)
    return rows, offsets, cols


def histogram_part(name: str, degrees: np.ndarray) -> collections.Counter:
    """{(name, degree): nodes} of an array of node degrees (a summary part)."""
    values, counts = np.unique(degrees, return_counts=True)
    return collections.Counter({(name, int(v)): int(c) for v, c in zip(values, counts)})
