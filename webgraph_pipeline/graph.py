"""`BuildWebGraph`: edge batches -> the splits, vocabulary and summary, on integer fingerprints.

Input: a PCollection of edge batches, each a tuple `(sources, targets)` of two equal-length lists of
node names (not deduplicated, self-loops included). Every name becomes a 64-bit fingerprint
(`fingerprints.py`) in `Fingerprint`; from there on edges travel as NumPy uint64 arrays keyed by a
hash bucket of one endpoint, and each name travels once per batch, to the vocabulary. Per bucket:

  Fingerprint -> DedupEdges by target bucket (duplicates, self-loops, TLD filter; the targets'
  in-degrees, complete there) -> DegreePass<i> (KeepNodes by source bucket with the in-degrees,
  KeepTargets by target bucket, which counts the next pass's in-degrees) -> KeptNodes (the
  vocabulary, collision check) -> AssignIds (rank in (blake2b id bucket, name)) -> JoinTargetIds ->
  BuildRows (source ids, rows, strong-generalization split) -> Transpose -> Summarize

Degree counts cross shuffles once per node (fingerprints and counts of a bucket's targets), never
once per edge: edges grouped by their target's bucket hold every in-link of that bucket's nodes.

The rules and counters are those of DESIGN.md; `tests/reference_graph.py` works them out in plain
Python. No file is written here, so the TFDS builder can run this inside `tfds build`.
"""

from __future__ import annotations

import collections
from typing import Any, Iterator

import apache_beam as beam
import numpy as np

from webgraph_contract.ragged import RaggedRows
from webgraph_contract.record_codec import SplitRows
from webgraph_pipeline import columnar as col
from webgraph_pipeline.counters import LocalCounts, flush_to_beam
from webgraph_pipeline.filters import tld_of
from webgraph_pipeline.fingerprints import (
    FINGERPRINT_BITS,
    distinct_entries,
    fingerprint,
    joined_names,
    merge_vocabulary,
    names_array,
    pack_array,
    pack_names,
    unpacked,
)
from webgraph_pipeline.graph_config import GraphConfig
from webgraph_pipeline.ids import bucket_offsets, buckets_of
from webgraph_pipeline.splits import split_block

DEFAULT_GRAPH_BUCKETS = 16
ROWS, COLS = "rows", "cols"


def histogram(counts: dict[int, int]) -> list[list[int]]:
    """{degree: nodes} -> [[degree, nodes], ...] sorted by degree (JSON-friendly)."""
    return [[int(d), int(n)] for d, n in sorted(counts.items())]


def summarize(parts: collections.Counter, bipartite: bool) -> dict[str, Any]:
    """The graph's figures for stats.json, from the summed summary parts {(name, key): n}."""
    get = lambda name: parts.get((name, None), 0)  # noqa: E731
    rows, cols = get("nodes." + ROWS), get("nodes." + COLS)
    out: dict[str, Any] = {
        "nodes": int(rows + cols) if bipartite else int(rows),
        "edges": int(get("edges")),
        "splits": {name: int(get("split." + name)) for name in ("train", "train_t", "test")}
        | {
            name[6:]: int(n)
            for (name, _), n in parts.items()
            if name.startswith("split.validation")
        },
        "test_links": {"col_tag": int(get("test.col_tag")), "gt_tag": int(get("test.gt_tag"))},
        "out_degree_histogram": histogram(
            {k: n for (name, k), n in parts.items() if name == "out_degree"}
        ),
        "in_degree_histogram": histogram(
            {k: n for (name, k), n in parts.items() if name == "in_degree"}
        ),
    }
    if bipartite:
        out["num_rows"], out["num_cols"] = int(rows), int(cols)
    return out


class _SumParts(beam.CombineFn):
    """Sums the summary parts ({(name, key): n} Counters) of every bucket."""

    def create_accumulator(self) -> collections.Counter:
        return collections.Counter()

    def add_input(self, acc, part):
        acc.update(part)
        return acc

    def merge_accumulators(self, accs):
        out = collections.Counter()
        for a in accs:
            out.update(a)
        return out

    def extract_output(self, acc):
        return acc


def _part(name: str, n: int) -> collections.Counter:
    return collections.Counter({(name, None): int(n)})


class _FingerprintFn(beam.DoFn):
    """An edge batch (names) -> edge pieces keyed by target bucket, and the batch's names by bucket.

    Main output: (target bucket, (src fps, dst fps, both-in-TLDs mask or None)); tagged
    `rows`/`cols`:
    (bucket, (fps, packed names)) of the batch's names (one vocabulary unless bipartite), repeats
    included: `_MergeNames`, lifted before the shuffle, drops them in a hash table, which costs less
    than sorting them out here (only the TLD filter needs each distinct name, and takes them).
    """

    def __init__(self, tlds: frozenset[str], bits: int, num_buckets: int, bipartite: bool):
        self._tlds, self._bits, self._b, self._bipartite = tlds, bits, num_buckets, bipartite

    def process(self, batch) -> Iterator[Any]:
        src_names, dst_names = batch
        n = len(src_names)
        if n != len(dst_names):
            raise ValueError(f"edge batch with {n} sources but {len(dst_names)} targets")
        names = np.array(list(src_names) + list(dst_names), dtype=object)
        fps = fingerprint(names, self._bits)
        src, dst = fps[:n], fps[n:]
        named = (
            {ROWS: (src, names[:n]), COLS: (dst, names[n:])}
            if self._bipartite
            else {ROWS: (fps, names)}
        )
        in_tlds = None
        if self._tlds:
            uniq, at = distinct_entries(fps, names)
            ok = np.fromiter(
                (tld_of(name) in self._tlds for name in names[at]), dtype=bool, count=len(at)
            )
            in_tlds = ok[col.lookup(src, uniq, "source")] & ok[col.lookup(dst, uniq, "target")]
            if not self._bipartite:
                named[ROWS] = (uniq, names[at])
        arrays = (src, dst) if in_tlds is None else (src, dst, in_tlds)
        for bucket, piece in col.split_by_bucket(dst, self._b, *arrays):
            yield bucket, piece
        for kind, (kind_fps, kind_names) in named.items():
            for bucket, take in col.group_positions(col.bucket_of(kind_fps, self._b), self._b):
                yield beam.pvalue.TaggedOutput(
                    kind, (bucket, (kind_fps[take], pack_names(kind_names[take])))
                )


class _MergeNames(beam.CombineFn):
    """Name pieces (fps, packed names) of one bucket -> one (sorted distinct fps, packed names)
    piece, collisions checked; lifted before the shuffle, so a name crosses it about once per
    bundle, not once per batch. Accumulators hold packed pieces too (Beam encodes them between the
    phases)."""

    COMPACT_AT = 1 << 18  # entries that trigger a merge (or twice the merged piece, when larger)

    def create_accumulator(self) -> list:
        return []

    def add_input(self, acc: list, piece) -> list:
        acc.append(piece)
        if sum(len(fps) for fps, _ in acc) > max(self.COMPACT_AT, 2 * len(acc[0][0])):  # amortized
            acc[:] = [self.extract_output(acc)]
        return acc

    def merge_accumulators(self, accs) -> list:
        return [self.extract_output([p for acc in accs for p in acc])]

    def extract_output(self, acc: list):
        fps, names = merge_vocabulary(col.concat(acc, 1)[0], joined_names(acc, 1))
        return fps, pack_array(names)


def in_degrees(bucket: int, dst: np.ndarray) -> beam.pvalue.TaggedOutput:
    """(bucket, (targets, in-link counts)) of edges grouped by target bucket, tagged `in`."""
    return beam.pvalue.TaggedOutput("in", (bucket, col.count_values(dst)))


class _DedupFn(beam.DoFn):
    """(target bucket, pieces) -> distinct edges as pieces (source bucket, (src, dst)), drops
    counted; tagged `in` (with `count_in`): the in-degrees of the bucket's targets."""

    def __init__(self, drop_self_loops: bool, with_tlds: bool, count_in: bool, num_buckets: int):
        self._drop_self_loops, self._with_tlds, self._count_in, self._b = (
            drop_self_loops,
            with_tlds,
            count_in,
            num_buckets,
        )

    def process(self, kv) -> Iterator[Any]:
        bucket, pieces = kv
        counts = LocalCounts()
        if self._with_tlds:
            src, dst, in_tlds = col.concat(pieces, 3, (np.uint64, np.uint64, bool))
        else:
            (src, dst), in_tlds = col.concat(pieces, 2), None
        src, dst = col.dedup_edges(src, dst, in_tlds, self._drop_self_loops, counts.inc)
        flush_to_beam(counts)
        if self._count_in:
            yield in_degrees(bucket, dst)
        yield from col.split_by_bucket(src, self._b, src, dst)


class _KeepNodesFn(beam.DoFn):
    """(bucket, {'edges', 'in'}) -> the bucket's edges whose source is kept, keyed by target bucket;
    tagged `kept`: (bucket, kept target fingerprints)."""

    def __init__(
        self, min_links: int, bipartite: bool, counter_names: tuple[str, ...], num_buckets: int
    ):
        self._k, self._bipartite, self._names, self._b = (
            min_links,
            bipartite,
            counter_names,
            num_buckets,
        )

    def process(self, kv) -> Iterator[Any]:
        bucket, grouped = kv
        counts = LocalCounts()
        src, dst = col.concat(grouped["edges"], 2)
        in_fps, in_counts = col.sum_counts(*col.concat(grouped["in"], 2, (np.uint64, np.int64)))
        kept_src, kept_dst, dropped = col.degree_verdict(
            src, in_fps, in_counts, self._k, self._bipartite
        )
        for name in self._names:
            counts.inc(name, dropped)
        keep = col.is_member(src, kept_src)
        counts.inc("dropped_edges.degree_filter", int(len(src) - keep.sum()))
        flush_to_beam(+counts)
        yield beam.pvalue.TaggedOutput("kept", (bucket, kept_dst))
        yield from col.split_by_bucket(dst[keep], self._b, src[keep], dst[keep])


class _KeepTargetsFn(beam.DoFn):
    """(target bucket, {'edges', 'kept'}) -> edges whose target is kept, keyed by source bucket;
    tagged `in` (with `count_in`): the kept edges' in-degrees, for the next pass."""

    def __init__(self, num_buckets: int, count_in: bool):
        self._b, self._count_in = num_buckets, count_in

    def process(self, kv) -> Iterator[Any]:
        bucket, grouped = kv
        src, dst = col.concat(grouped["edges"], 2)
        kept = np.concatenate(list(grouped["kept"]) or [np.zeros(0, np.uint64)])
        keep = col.is_member(dst, np.sort(kept))
        counts = LocalCounts()
        counts.inc("dropped_edges.degree_filter", int(len(dst) - keep.sum()))
        flush_to_beam(+counts)
        src, dst = src[keep], dst[keep]
        if self._count_in:
            yield in_degrees(bucket, dst)
        yield from col.split_by_bucket(src, self._b, src, dst)


class _DegreePass(beam.PTransform):
    """One pass of the degree filter: {'edges': pieces keyed by source bucket, 'in': the in-degrees
    of each bucket's targets} -> the same for the kept edges ('in' only when `count_in`, for a next
    pass). Two shuffles of the edges: to their source's bucket with the in-degrees (the verdict on
    the bucket's nodes), to their target's bucket with the kept targets. Kept edges come out as
    pieces, at most one per (source, target) bucket pair: every consumer re-keys them in its own
    shuffle, so grouping them here would be a third."""

    def __init__(
        self,
        min_links: int,
        bipartite: bool,
        counter_names: tuple[str, ...],
        num_buckets: int,
        count_in: bool,
    ):
        super().__init__()
        self._args = (min_links, bipartite, counter_names, num_buckets)
        self._b, self._count_in = num_buckets, count_in

    def expand(self, inputs):
        verdict = (
            inputs
            | "GroupBySourceBucket" >> beam.CoGroupByKey()
            | "KeepNodes"
            >> beam.ParDo(_KeepNodesFn(*self._args)).with_outputs("kept", main="edges")
        )
        kept = (
            {"edges": verdict.edges, "kept": verdict.kept}
            | "GroupByTargetBucket" >> beam.CoGroupByKey()
            | "KeepTargets"
            >> beam.ParDo(_KeepTargetsFn(self._b, self._count_in)).with_outputs("in", main="edges")
        )
        return {"edges": kept.edges, "in": kept["in"]}


def _endpoints(kv, num_buckets: int, bipartite: bool) -> Iterator[Any]:
    """(source bucket, (src, dst)) -> (bucket, fps) of its distinct sources (rows) and targets
    (tagged `cols` when bipartite)."""
    bucket, (src, dst) = kv
    yield bucket, col.unique(src)
    targets = col.unique(dst)
    for b, (fps,) in col.split_by_bucket(targets, num_buckets, targets):
        yield (beam.pvalue.TaggedOutput(COLS, (b, fps)) if bipartite else (b, fps))


def _kept_names(kv, kind: str) -> Iterator[Any]:
    """(bucket, {'names', 'nodes'}) -> (fps, packed names) of the bucket's kept nodes (after the
    collision check)."""
    _, grouped = kv
    pieces = list(grouped["names"])
    fps, names = merge_vocabulary(col.concat(pieces, 1)[0], joined_names(pieces, 1))
    nodes = col.unique(np.concatenate(list(grouped["nodes"]) or [np.zeros(0, np.uint64)]))
    if len(nodes):
        yield nodes, pack_array(names.take(col.lookup(nodes, fps, f"{kind} node")))


class _GroupNodesFn(beam.DoFn):
    """(fps, packed names) -> (id group, (fps, packed names, id buckets)) pieces; tagged `counts`:
    nodes per group."""

    def __init__(self, id_buckets: int, groups: int):
        self._id_buckets, self._groups = id_buckets, groups

    def process(self, table) -> Iterator[Any]:
        fps, names = table[0], names_array(table[1])
        idb = buckets_of(table[1], self._id_buckets)
        group = idb * self._groups // self._id_buckets
        yield beam.pvalue.TaggedOutput("counts", np.bincount(group, minlength=self._groups))
        for g, take in col.group_positions(group, self._groups):
            yield g, (fps[take], pack_array(names.take(take)), idb[take])


def _number_group(kv, offsets: dict[int, int], num_buckets: int) -> Iterator[Any]:
    """(id group, pieces) -> (fp bucket, (fps, ids, packed names)) node-table pieces, ids ranked in
    (id bucket, name)."""
    group, pieces = kv
    pieces = list(pieces)
    fps, idb = col.concat([(p[0], p[2]) for p in pieces], 2, (np.uint64, np.int64))
    names = joined_names(pieces, 1)
    ids = col.rank_nodes(idb, names, offsets[group])
    for bucket, take in col.group_positions(col.bucket_of(fps, num_buckets), num_buckets):
        yield bucket, (fps[take], ids[take], pack_array(names.take(take)))


class _AssignIds(beam.PTransform):
    """Kept (fps, packed names) per bucket -> node-table pieces (bucket, (fps, ids, packed names)),
    ids dense 0..N-1.

    A node's id is its rank in the order (blake2b id bucket of its name, name), as before: ids
    groups are contiguous ranges of id buckets, numbered from the prefix sum of the nodes per group.
    """

    def __init__(self, id_buckets: int, num_buckets: int):
        super().__init__()
        self._id_buckets, self._b = id_buckets, num_buckets

    def expand(self, tables):
        groups = min(self._id_buckets, self._b)
        grouped = tables | "IdGroups" >> beam.ParDo(
            _GroupNodesFn(self._id_buckets, groups)
        ).with_outputs("counts", main="pieces")
        offsets = (
            grouped.counts
            | "NodesPerGroup"
            >> beam.CombineGlobally(lambda cs, n=groups: sum(cs, np.zeros(n, np.int64)))
            | "PrefixSum" >> beam.Map(lambda c: bucket_offsets(enumerate(c.tolist())))
        )
        return (
            grouped.pieces
            | "GroupIdGroups" >> beam.GroupByKey()
            | "NumberGroup"
            >> beam.FlatMap(_number_group, beam.pvalue.AsSingleton(offsets), self._b)
        )


def node_table(pieces) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Node-table pieces -> (fps, ids, names) sorted by fingerprint (names unpacked)."""
    fps, ids, names = col.concat(unpacked(pieces, 2), 3, (np.uint64, np.int64, object))
    order = np.argsort(fps)
    return fps[order], ids[order], names[order]


def _join_target_ids(kv, num_buckets: int) -> Iterator[Any]:
    """(target bucket, {'edges', 'table'}) -> (source bucket, (src fps, dst ids)); tagged `parts`:
    the in-degree histogram."""
    _, grouped = kv
    src, dst = col.concat(grouped["edges"], 2)
    fps, ids = col.concat(grouped["table"], 2, (np.uint64, np.int64))
    order = np.argsort(fps)
    fps, ids = fps[order], ids[order]
    dst_ids = ids[col.lookup(dst, fps, "target")]
    if len(dst_ids):
        _, in_degree = col.count_values(dst_ids)
        yield beam.pvalue.TaggedOutput("parts", col.histogram_part("in_degree", in_degree))
    yield from col.split_by_bucket(src, num_buckets, src, *col.narrow(dst_ids))


class _BuildRowsFn(beam.DoFn):
    """(source bucket, {'edges', 'table'}) -> `train`/`test` `SplitRows`, `transpose` pieces
    (bucket, (col ids, row ids)) of the train rows, and summary `parts`."""

    def __init__(self, seed: int, test_fraction: float, holdout_fraction: float, num_buckets: int):
        self._args = (seed, test_fraction, holdout_fraction)
        self._b = num_buckets

    def process(self, kv) -> Iterator[Any]:
        _, grouped = kv
        src, dst_ids = col.concat(grouped["edges"], 2, (np.uint64, np.int64))
        fps, ids, names = node_table(grouped["table"])
        rows, offsets, cols = col.group_rows(col.lookup(src, fps, "source"), dst_ids)
        lengths = np.diff(offsets)
        is_test, held = split_block(names[rows], offsets, cols, *self._args)
        parts = col.histogram_part("out_degree", lengths)
        parts[("edges", None)] += len(src)
        train, test = np.flatnonzero(~is_test), np.flatnonzero(is_test)
        row_ids = ids[rows]
        if len(train):
            picked = RaggedRows(row_ids, offsets, cols).select(train)
            block = SplitRows.of(picked.row_ids, picked.indptr, picked.ids)
            yield beam.pvalue.TaggedOutput("train", block)
            single = int((lengths[train] == 1).sum())
            if single:
                counts = LocalCounts()
                counts.inc("split.single_outlink_rows_in_train", single)
                flush_to_beam(counts)
            col_ids = block.col_tag.ids
            row_of = np.repeat(block.row_tags, block.col_tag.lengths)
            for b, piece in col.split_by_bucket(
                col_ids.astype(np.uint64), self._b, *col.narrow(col_ids, row_of)
            ):
                yield beam.pvalue.TaggedOutput("transpose", (b, piece))
        if len(test):
            picked = RaggedRows(row_ids, offsets, cols, held).select(test)
            kept, gt = col.keep_ids(picked, ~picked.values), col.keep_ids(picked, picked.values)
            yield beam.pvalue.TaggedOutput("test", SplitRows(kept, gt))
            parts[("test.col_tag", None)] += len(kept.ids)
            parts[("test.gt_tag", None)] += len(gt.ids)
        parts[("split.train", None)] += len(train)
        parts[("split.test", None)] += len(test)
        yield beam.pvalue.TaggedOutput("parts", parts)


def _transposed_rows(kv) -> Iterator[Any]:
    """(bucket, pieces of (col ids, row ids)) -> `SplitRows` of train_t rows (col, sorted rows);
    tagged `parts`."""
    _, pieces = kv
    col_ids, row_ids = col.concat(pieces, 2, (np.int64, np.int64))
    cols, offsets, rows = col.group_rows(col_ids, row_ids)
    yield SplitRows.of(cols, offsets, rows)
    yield beam.pvalue.TaggedOutput("parts", _part("split.train_t", len(cols)))


def vocab_entries(piece) -> tuple[np.ndarray, np.ndarray]:
    """A node-table piece -> its vocabulary entries (ids, packed names)."""
    _, (_, ids, names) = piece
    return ids, names


def _node_count(kind: str):
    return lambda piece: _part("nodes." + kind, len(piece[1][0]))


class DistinctEdges(beam.PTransform):
    """Edge batches of names -> {'edges': distinct edges as pieces (source bucket, (src fps, dst
    fps)), 'in' (with `count_in`): the in-degrees (bucket, (target fps, counts)) of each bucket's
    targets, and 'rows' (plus 'cols' when bipartite): name pieces (bucket, (fps, packed names)) for
    the vocabulary}.

    Drops and counts duplicates, then (unless bipartite) self-loops, then edges outside `tlds`;
    edges are grouped by their target's bucket, where each target's in-links are all at hand.
    """

    def __init__(
        self,
        tlds: frozenset[str],
        bipartite: bool,
        num_buckets: int,
        fingerprint_bits: int,
        count_in: bool = False,
    ):
        super().__init__()
        self._tlds, self._bipartite, self._b, self._bits = (
            tlds,
            bipartite,
            num_buckets,
            fingerprint_bits,
        )
        self._count_in = count_in

    def expand(self, batches):
        kinds = (ROWS, COLS) if self._bipartite else (ROWS,)
        fp = batches | "Fingerprint" >> beam.ParDo(
            _FingerprintFn(self._tlds, self._bits, self._b, self._bipartite)
        ).with_outputs(*kinds, main="edges")
        dedup = _DedupFn(not self._bipartite, bool(self._tlds), self._count_in, self._b)
        edges = (
            fp.edges
            | "GroupEdgesByTarget" >> beam.GroupByKey()
            | "DedupEdges" >> beam.ParDo(dedup).with_outputs("in", main="edges")
        )
        names = {
            kind: fp[kind] | f"MergeNames_{kind}" >> beam.CombinePerKey(_MergeNames())
            for kind in kinds
        }
        return {"edges": edges.edges, "in": edges["in"], **names}


class NodeTables(beam.PTransform):
    """{'edges': edges keyed by source bucket, 'rows' (and 'cols'): name pieces} -> {kind:
    node-table pieces (bucket, (fps, ids, packed names))}: the edges' endpoints, named (collision
    check), numbered."""

    def __init__(self, bipartite: bool, id_buckets: int, num_buckets: int):
        super().__init__()
        self._bipartite, self._id_buckets, self._b = bipartite, id_buckets, num_buckets

    def expand(self, inputs):
        kinds = (ROWS, COLS) if self._bipartite else (ROWS,)
        ends = inputs["edges"] | "Endpoints" >> beam.FlatMap(
            _endpoints, self._b, self._bipartite
        ).with_outputs(COLS, main=ROWS)
        return {
            kind: {"names": inputs[kind], "nodes": ends[kind]}
            | f"GroupNames_{kind}" >> beam.CoGroupByKey()
            | f"KeptNodes_{kind}" >> beam.FlatMap(_kept_names, kind)
            | f"AssignIds_{kind}" >> _AssignIds(self._id_buckets, self._b)
            for kind in kinds
        }


class JoinTargetIds(beam.PTransform):
    """{'edges': (source bucket, (src, dst)), 'table': the targets' node table} -> {'edges': (source
    bucket, (src fps, dst ids)), 'parts': the in-degree histogram}."""

    def __init__(self, num_buckets: int):
        super().__init__()
        self._b = num_buckets

    def expand(self, inputs):
        by_target = inputs["edges"] | "KeyByTarget" >> beam.FlatMap(
            lambda kv, b=self._b: col.split_by_bucket(kv[1][1], b, *kv[1])
        )
        joined = (
            {
                "edges": by_target,
                "table": inputs["table"] | "FpsAndIds" >> beam.MapTuple(lambda b, t: (b, t[:2])),
            }
            | "GroupTargets" >> beam.CoGroupByKey()
            | "Join" >> beam.FlatMap(_join_target_ids, self._b).with_outputs("parts", main="edges")
        )
        return {"edges": joined.edges, "parts": joined.parts}


class Transpose(beam.PTransform):
    """Transpose pieces (bucket, (col ids, row ids)) -> {'rows': lists of train_t rows, 'parts'}."""

    def expand(self, pieces):
        rows = (
            pieces
            | "GroupByColumn" >> beam.GroupByKey()
            | "Rows" >> beam.FlatMap(_transposed_rows).with_outputs("parts", main="rows")
        )
        return {"rows": rows.rows, "parts": rows.parts}


class Summarize(beam.PTransform):
    """The flattened summary parts ({(name, key): n} Counters) of every step -> the one summary
    dict."""

    def __init__(self, bipartite: bool):
        super().__init__()
        self._bipartite = bipartite

    def expand(self, parts):
        return (
            parts
            | "SumParts" >> beam.CombineGlobally(_SumParts())
            | "Summary" >> beam.Map(summarize, bipartite=self._bipartite)
        )


def node_counts(tables: dict) -> list:
    """The `nodes.<kind>` summary parts of the node tables {kind: pieces}."""
    return [
        pieces | f"NodeCount_{kind}" >> beam.Map(_node_count(kind))
        for kind, pieces in tables.items()
    ]


class BuildWebGraph(beam.PTransform):
    """Edge batches -> dict of PCollections whose elements are arrays (one per bucket: rows travel
    in blocks too; `beam.FlatMap(columnar.block_rows)` gives single rows).

    - `train`, `train_t`, `test`: `record_codec.SplitRows` (col_tag and gt_tag rows, the row tags
      their row ids);
    - `vocab`: (ids, packed names) (`fingerprints.pack_names`); `col_vocab`: the same for the
      columns (bipartite only; otherwise `vocab` covers both);
    - `summary`: one dict with nodes, edges, rows per split and degree histograms.

    num_buckets: hash buckets of the per-bucket steps (work items; more for bigger graphs).
    fingerprint_bits: narrower than 64 only to force collisions in tests.
    """

    def __init__(
        self,
        config: GraphConfig,
        num_buckets: int = DEFAULT_GRAPH_BUCKETS,
        fingerprint_bits: int = FINGERPRINT_BITS,
    ):
        super().__init__()
        if num_buckets < 1:
            raise ValueError(f"num_buckets must be >= 1, got {num_buckets}")
        self._config, self._b, self._bits = config, num_buckets, fingerprint_bits

    def expand(self, batches):
        cfg, nb = self._config, self._b
        tlds = frozenset(t.lower() for t in cfg.tlds)
        passes = cfg.degree_passes if cfg.min_links > 0 else 0
        distinct = batches | "DistinctEdges" >> DistinctEdges(
            tlds, cfg.bipartite, nb, self._bits, passes > 0
        )
        filtered = {"edges": distinct["edges"], "in": distinct["in"]}
        for i in range(1, passes + 1):
            names = ("dropped_nodes.degree_filter",)
            if cfg.degree_passes > 1:
                names += (f"dropped_nodes.degree_filter_pass{i}",)
            filtered = filtered | f"DegreePass{i}" >> _DegreePass(
                cfg.min_links, cfg.bipartite, names, nb, i < passes
            )
        edges = filtered["edges"]
        tables = {**distinct, "edges": edges} | "NodeTables" >> NodeTables(
            cfg.bipartite, cfg.id_buckets, nb
        )
        col_table = tables[COLS if cfg.bipartite else ROWS]
        joined = {"edges": edges, "table": col_table} | "JoinTargetIds" >> JoinTargetIds(nb)
        built = (
            {"edges": joined["edges"], "table": tables[ROWS]}
            | "GroupSources" >> beam.CoGroupByKey()
            | "BuildRows"
            >> beam.ParDo(
                _BuildRowsFn(cfg.seed, cfg.test_fraction, cfg.holdout_fraction, nb)
            ).with_outputs("train", "test", "transpose", "parts")
        )
        transposed = built.transpose | "Transpose" >> Transpose()
        out = {"train": built.train, "train_t": transposed["rows"], "test": built.test}
        out["vocab"] = tables[ROWS] | "Vocabulary" >> beam.Map(vocab_entries)
        if cfg.bipartite:
            out["col_vocab"] = tables[COLS] | "ColVocabulary" >> beam.Map(vocab_entries)
        parts = [joined["parts"], built.parts, transposed["parts"], *node_counts(tables)]
        out["summary"] = (
            parts | "AllParts" >> beam.Flatten() | "Summarize" >> Summarize(cfg.bipartite)
        )
        return out
