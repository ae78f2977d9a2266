"""The graph stage's record logic on NumPy arrays of one hash bucket: plain functions, no Beam.

Edges are parallel uint64 arrays (source fingerprints, target fingerprints); node tables are sorted
fingerprint arrays with their ids and names (Arrow string arrays where they are sorted or taken).
Each function is vectorized (sorts of one 64-bit key, hash lookups, `bincount`, Arrow's
`sort_indices`); Python runs per bucket, and per node only where a name is hashed (blake2b ids,
split hashes), never per edge.
"""

from __future__ import annotations

import collections
from typing import Iterable, Iterator, Optional, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from webgraph_contract.ragged import RaggedRows
from webgraph_contract.record_codec import SplitRows
from webgraph_pipeline.counters import Inc
from webgraph_pipeline.fingerprints import bucket_of

Arrays = tuple[np.ndarray, ...]


def concat(pieces: Iterable[Arrays], width: int, dtypes: Sequence = ()) -> Arrays:
    """Concatenate a bucket's pieces column by column (`dtypes` for the empty case, uint64 by
    default)."""
    pieces = list(pieces)
    if not pieces:
        return tuple(
            np.zeros(0, dtype=dtypes[i] if i < len(dtypes) else np.uint64) for i in range(width)
        )
    return tuple(np.concatenate([p[i] for p in pieces]) for i in range(width))


def group_positions(groups: np.ndarray, num_groups: int) -> Iterator[tuple[int, np.ndarray]]:
    """(group, the positions holding it, in order) for each group 0..num_groups-1 present in
    `groups`. Up to 256 groups the stable sort is NumPy's radix sort of uint8."""
    if not len(groups):
        return
    small = groups.astype(np.uint8 if num_groups <= 256 else np.int64)
    order = np.argsort(small, kind="stable")
    sizes = np.bincount(groups, minlength=num_groups)
    ends = np.cumsum(sizes)
    for g in np.flatnonzero(sizes):
        yield int(g), order[ends[g] - sizes[g] : ends[g]]


def split_by_bucket(
    keys: np.ndarray, num_buckets: int, *arrays: np.ndarray
) -> Iterator[tuple[int, Arrays]]:
    """(bucket, the arrays' entries whose key falls in it) for each non-empty bucket of `keys`."""
    for b, take in group_positions(bucket_of(keys, num_buckets), num_buckets):
        yield b, tuple(a[take] for a in arrays)


def dedup_edges(
    src: np.ndarray, dst: np.ndarray, in_tlds: Optional[np.ndarray], drop_self_loops: bool, inc: Inc
) -> tuple[np.ndarray, np.ndarray]:
    """Distinct edges, in the order of `pair_order`: counts `dropped_edges.duplicate`, then (graphs
    only) `.self_loop`, then `.tld_filter` for edges with an endpoint outside the TLD set (`in_tlds`
    False)."""
    order = pair_order(src, dst)
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


_PAIR_MIX = np.uint64(0x9E3779B97F4A7C15)


def pair_order(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """An order of the pairs (src, dst) of uint64s in which equal pairs are adjacent.

    One sort of the 64-bit key src * odd ^ dst instead of a slower two-key `lexsort`.
    The key is one-to-one in dst for a given src; two different pairs with one key (chance about
    2^-64 per pair) are found as equal keys with unequal pairs, and then the exact lexsort is used.
    """
    keys = (src * _PAIR_MIX) ^ dst
    order = np.argsort(keys)
    keys = keys[order]
    same = np.flatnonzero(keys[1:] == keys[:-1])
    a, b = order[same], order[same + 1]
    if ((src[a] != src[b]) | (dst[a] != dst[b])).any():
        return np.lexsort((dst, src))
    return order


def distinct(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values: a sort and a mask (NumPy 2.4's `np.unique` without `return_*`
    takes a hash-table path that is much slower on uint64)."""
    out = np.sort(values)
    keep = np.empty(len(out), dtype=bool)
    keep[:1] = True
    np.not_equal(out[1:], out[:-1], out=keep[1:])
    return out[keep]


def _run_starts(sorted_values: np.ndarray) -> np.ndarray:
    """Where each run of equal values of a sorted array starts."""
    first = np.empty(len(sorted_values), dtype=bool)
    first[:1] = True
    np.not_equal(sorted_values[1:], sorted_values[:-1], out=first[1:])
    return np.flatnonzero(first)


def count_values(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct values in the order they first occur, how often each occurs): pandas' hash table
    and a `bincount` (faster than a sort and the runs' lengths)."""
    codes, uniques = pd.factorize(values)
    return np.asarray(uniques, values.dtype), np.bincount(codes, minlength=len(uniques)).astype(
        np.int64
    )


def unique(values: np.ndarray) -> np.ndarray:
    """The distinct values in the order they first occur (pandas' hash table: faster than
    `distinct`'s sort, for the uses that need no order)."""
    return np.asarray(pd.unique(values), values.dtype)


def sum_counts(keys: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct keys, summed counts) of partial counts."""
    order = np.argsort(keys)
    keys = keys[order]
    starts = _run_starts(keys)
    if not len(keys):
        return keys, np.zeros(0, np.int64)
    return keys[starts], np.add.reduceat(np.asarray(counts, np.int64)[order], starts)


def _positions(values: np.ndarray, sorted_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the position of each of `values` in the sorted `sorted_keys`, -1 where absent; whether it is
    present). Distinct keys go through a hash table (pandas' `Index.get_indexer`: about 10 ns per
    value, where `np.searchsorted` of unsorted values takes 100-200 ns); repeated keys, through
    one binary search per value."""
    index = pd.Index(sorted_keys, copy=False)
    if index.is_unique:
        pos = index.get_indexer(values)
        return pos, pos >= 0
    pos = np.searchsorted(sorted_keys, values)
    found = pos < len(sorted_keys)
    found[found] = sorted_keys[pos[found]] == values[found]
    return np.where(found, pos, -1), found


def is_member(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """Mask of `values` found in the sorted array `sorted_set`."""
    return _positions(values, sorted_set)[1]


def lookup(values: np.ndarray, sorted_keys: np.ndarray, what: str) -> np.ndarray:
    """Positions of `values` in the sorted `sorted_keys`; an error if one is missing (a lost
    node)."""
    pos, found = _positions(values, sorted_keys)
    if not found.all():
        missing = int(values[~found][0])
        raise RuntimeError(
            f"runner lost data: {what} {missing:#x} is in the edges but not in the node table"
        )
    return pos


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
    nodes = distinct(np.concatenate([out_fps, in_fps]))
    out_deg = np.zeros(len(nodes), dtype=np.int64)
    in_deg = np.zeros(len(nodes), dtype=np.int64)
    out_deg[np.searchsorted(nodes, out_fps)] = out_counts
    in_deg[np.searchsorted(nodes, in_fps)] = in_counts
    kept = nodes[(out_deg >= min_links) & (in_deg >= min_links)]
    return kept, kept, len(nodes) - len(kept)


def rank_nodes(id_buckets: np.ndarray, names: pa.Array, start: int) -> np.ndarray:
    """Ids `start..` of one group of nodes, numbered in the order (id bucket, name).

    `names`: an Arrow string array. Arrow sorts strings by their UTF-8 bytes, which is the order of
    their code points, Python's order of str.
    """
    table = pa.table({"bucket": np.asarray(id_buckets, np.int64), "name": names})
    order = pc.sort_indices(
        table, sort_keys=[("bucket", "ascending"), ("name", "ascending")]
    ).to_numpy()
    if len(order) > 1:
        ranked = names.take(order)
        twice = pc.equal(ranked[1:], ranked[:-1]).to_numpy(zero_copy_only=False)
        if twice.any():
            name = ranked[int(np.flatnonzero(twice)[0])].as_py()
            raise ValueError(f"the node {name!r} was numbered twice; node tables must be distinct")
    ids = np.empty(len(names), dtype=np.int64)
    ids[order] = np.arange(start, start + len(names), dtype=np.int64)
    return ids


def group_rows(
    row_ids: np.ndarray, col_ids: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(distinct row ids, offsets, columns sorted within rows): row `r = rows[i]` has the columns
    `cols[offsets[i]:offsets[i + 1]]`. Ids in [0, 2^31) sort as one 64-bit key (row << 32 | col),
    whose sorted values give back rows and columns (no argsort and gathers)."""
    if (
        len(row_ids)
        and max(int(row_ids.max()), int(col_ids.max())) < 2**31
        and min(row_ids.min(), col_ids.min()) >= 0
    ):
        keys = np.sort((row_ids.astype(np.int64) << 32) | col_ids.astype(np.int64))
        rows_sorted, cols = keys >> 32, keys & 0xFFFFFFFF
    else:
        order = np.lexsort((col_ids, row_ids))
        rows_sorted, cols = row_ids[order], col_ids[order]
    starts = _run_starts(rows_sorted)
    offsets = np.append(starts, len(rows_sorted)).astype(np.int64)
    return rows_sorted[starts], offsets, cols


def histogram_part(name: str, degrees: np.ndarray) -> collections.Counter:
    """{(name, degree): nodes} of an array of node degrees (a summary part)."""
    values, counts = np.unique(degrees, return_counts=True)
    return collections.Counter({(name, int(v)): int(c) for v, c in zip(values, counts)})


def _fits_int32(ids: np.ndarray) -> bool:
    """Whether every value of an int64 array is in [0, 2^31)."""
    return not len(ids) or (ids.min() >= 0 and ids.max() < 2**31)


def narrow(*arrays: np.ndarray) -> Arrays:
    """The int64 id arrays as int32 when their values fit: what crosses a shuffle is copied several
    times by the runner, per byte (the retired beam_floor.py, docs/benchmarks.md). Consumers widen
    as they compute."""
    return tuple(
        a.astype(np.int32) if a.dtype == np.int64 and _fits_int32(a) else a for a in arrays
    )


def keep_ids(rows: RaggedRows, keep: np.ndarray) -> RaggedRows:
    """`rows` (pointer from 0) with only the ids where the boolean mask `keep` is true."""
    kept_before = np.zeros(len(keep) + 1, np.int64)
    np.cumsum(keep, out=kept_before[1:])
    return RaggedRows(rows.row_ids, kept_before[rows.indptr], rows.ids[keep])


def narrow_rows(block: SplitRows) -> SplitRows:
    """A block of a split's rows with its arrays (row tags and pointers too) `narrow`ed for the
    shuffle; `SplitRows.concat` and `record_codec.encode_rows` widen them again."""
    cols, gt = block.col_tag, block.gt_tag
    tags, c_ptr, c_ids, g_ptr, g_ids = narrow(
        block.row_tags, cols.indptr, cols.ids, gt.indptr, gt.ids
    )
    return SplitRows(RaggedRows(tags, c_ptr, c_ids), RaggedRows(tags, g_ptr, g_ids))


def block_rows(block: SplitRows) -> Iterator[tuple[int, tuple[int, ...], tuple[int, ...]]]:
    """The rows of a block as (row_tag, col_tag tuple, gt_tag tuple)."""
    for r, cols, gt in block.tuples():
        yield r, tuple(cols.tolist()), tuple(gt.tolist())
