"""`BuildWebGraph`: deduplicated (source, target) edges -> the splits, vocabulary and summary.

No file is written here, so the TFDS builder can run this inside `tfds build`; `pipeline.py`
composes reading -> `BuildWebGraph` -> `WriteTfRecords`.
"""

from __future__ import annotations

from typing import Any, Iterator

import apache_beam as beam

from webgraph_pipeline.filters import FilterByDegree, FilterByTld
from webgraph_pipeline.ids import AssignIds
from webgraph_pipeline.splits import NamedRow, SplitStrongGeneralization
from webgraph_pipeline.variants import GraphConfig


def named_row(kv: tuple[int, dict[str, list]]) -> Iterator[NamedRow]:
    """(id, {'cols': [...], 'name': [name]}) -> (id, name, sorted distinct cols), for rows with links."""
    row_id, grouped = kv
    if grouped["cols"]:
        (name,) = grouped["name"]
        yield row_id, name, tuple(sorted(set(grouped["cols"])))


def histogram(pairs: list[tuple[int, int]]) -> list[list[int]]:
    """[(degree, nodes)] -> [[degree, nodes], ...] sorted by degree (JSON-friendly)."""
    return [[int(d), int(n)] for d, n in sorted(pairs)]


def summarize(
    _: Any, rows: int, cols: int, edges: int, out_hist, in_hist, split_rows, test_links, bipartite: bool
) -> dict[str, Any]:
    """The graph's figures for stats.json, from the job's small side inputs."""
    kept, held = test_links
    out: dict[str, Any] = {
        "nodes": int(rows + cols) if bipartite else int(rows),
        "edges": int(edges),
        "splits": {name: int(n) for name, n in split_rows},
        "test_links": {"col_tag": int(kept), "gt_tag": int(held)},
        "out_degree_histogram": histogram(out_hist),
        "in_degree_histogram": histogram(in_hist),
    }
    if bipartite:
        out["num_rows"], out["num_cols"] = int(rows), int(cols)
    return out


def _sum_pairs(pairs) -> tuple[int, int]:
    a = b = 0
    for x, y in pairs:
        a += x
        b += y
    return a, b


def _attach_id(kv: tuple[str, dict[str, list]]) -> Iterator[tuple[Any, int]]:
    """(name, {'edges': [other...], 'id': [id]}) -> (other, id) for each edge of the node."""
    _, grouped = kv
    (node_id,) = grouped["id"]
    for other in grouped["edges"]:
        yield other, node_id


def _to_ids(edges, src_ids, dst_ids):
    """(src name, dst name) edges -> (src id, dst id), by two joins with the (name, id) tables."""

    by_dst = (
        {"edges": edges, "id": src_ids}
        | "JoinSourceIds" >> beam.CoGroupByKey()
        | "SourceIdByTarget" >> beam.FlatMap(_attach_id)
    )
    return (
        {"edges": by_dst, "id": dst_ids}
        | "JoinTargetIds" >> beam.CoGroupByKey()
        | "IdEdge" >> beam.FlatMap(_attach_id)
    )


class BuildWebGraph(beam.PTransform):
    """Edges (deduplicated, no self-loops) -> dict of PCollections.

    `train`, `train_t`, `test`: (row_tag, col_tag tuple, gt_tag tuple); `vocab`: (id, name);
    `col_vocab`: (id, name) of the columns (bipartite only; otherwise `vocab` covers both);
    `summary`: one dict with nodes, edges, rows per split and degree histograms.
    """

    def __init__(self, config: GraphConfig):
        super().__init__()
        self._config = config

    def expand(self, edges):
        cfg = self._config
        edges = (
            edges
            | "FilterByTld" >> FilterByTld(cfg.tlds)
            | "FilterByDegree" >> FilterByDegree(cfg.min_links, cfg.degree_passes, cfg.bipartite)
        )
        if cfg.bipartite:
            row_ids = (
                edges
                | "Sources" >> beam.Map(lambda e: e[0])
                | "DistinctSources" >> beam.Distinct()
                | "AssignRowIds" >> AssignIds(cfg.id_buckets)
            )
            col_ids = (
                edges
                | "Targets" >> beam.Map(lambda e: e[1])
                | "DistinctTargets" >> beam.Distinct()
                | "AssignColIds" >> AssignIds(cfg.id_buckets)
            )
        else:
            row_ids = col_ids = (
                edges
                | "Endpoints" >> beam.FlatMap(lambda e: e)
                | "DistinctNodes" >> beam.Distinct()
                | "AssignIds" >> AssignIds(cfg.id_buckets)
            )
        id_edges = _to_ids(edges, row_ids, col_ids)
        vocab = row_ids | "IdToName" >> beam.Map(lambda kv: (kv[1], kv[0]))
        rows = (
            {"cols": id_edges, "name": vocab}
            | "GroupRows" >> beam.CoGroupByKey()
            | "NamedRow" >> beam.FlatMap(named_row)
        )
        splits = rows | "SplitStrongGeneralization" >> SplitStrongGeneralization(
            cfg.seed, cfg.test_fraction, cfg.holdout_fraction
        )
        out = dict(splits)
        out["vocab"] = vocab
        if cfg.bipartite:
            out["col_vocab"] = col_ids | "ColIdToName" >> beam.Map(lambda kv: (kv[1], kv[0]))
        out["summary"] = self._summary(row_ids, col_ids, id_edges, rows, splits)
        return out

    def _summary(self, row_ids, col_ids, id_edges, rows, splits):
        single = beam.pvalue.AsSingleton
        count = lambda label, pcoll: pcoll | label >> beam.combiners.Count.Globally()  # noqa: E731
        out_hist = (
            rows
            | "OutDegree" >> beam.Map(lambda r: len(r[2]))
            | "OutDegreeHistogram" >> beam.combiners.Count.PerElement()
            | "OutHistList" >> beam.combiners.ToList()
        )
        in_hist = (
            id_edges
            | "InLink" >> beam.Map(lambda e: (e[1], 1))
            | "InDegree" >> beam.CombinePerKey(sum)
            | "InDegreeValue" >> beam.Values()
            | "InDegreeHistogram" >> beam.combiners.Count.PerElement()
            | "InHistList" >> beam.combiners.ToList()
        )
        split_rows = (
            [
                splits[name] | f"Count_{name}" >> beam.combiners.Count.Globally() | f"Name_{name}" >> beam.Map(
                    lambda n, name=name: (name, n)
                )
                for name in ("train", "train_t", "test")
            ]
            | "FlattenSplitCounts" >> beam.Flatten()
            | "SplitCountList" >> beam.combiners.ToList()
        )
        test_links = (
            splits["test"]
            | "TestLinkCounts" >> beam.Map(lambda r: (len(r[1]), len(r[2])))
            | "SumTestLinks" >> beam.CombineGlobally(_sum_pairs)
        )
        return (
            id_edges.pipeline
            | "SummaryTrigger" >> beam.Create([None])
            | "Summarize"
            >> beam.Map(
                summarize,
                single(count("CountRows", row_ids)),
                single(count("CountCols", col_ids)),
                single(count("CountEdges", id_edges)),
                single(out_hist),
                single(in_hist),
                single(split_rows),
                single(test_links),
                bipartite=self._config.bipartite,
            )
        )
