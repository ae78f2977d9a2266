"""TLD and degree filters of the WebGraph job (paper section 5), as plain functions and Beam steps.

Edges are `(source, target)` string pairs. Every dropped edge or node is counted in the Beam
namespace `webgraph`: `dropped_edges.tld_filter`, `dropped_edges.degree_filter`,
`dropped_nodes.degree_filter` (and `dropped_nodes.degree_filter_pass<N>` per pass when there are several).
"""

from __future__ import annotations

from typing import Iterable, Iterator
from urllib.parse import urlsplit

import apache_beam as beam
from apache_beam.metrics import Metrics

from webgraph_pipeline.counters import NAMESPACE

Edge = tuple[str, str]


def tld_of(url: str) -> str:
    """The top-level domain of a URL's host, lowercase (`''` when there is no host)."""
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return ""
    return host.rstrip(".").rsplit(".", 1)[-1].lower() if host else ""


def edge_in_tlds(edge: Edge, tlds: frozenset[str]) -> bool:
    """True if both endpoints' hosts are in one of `tlds` (an empty set keeps everything)."""
    return not tlds or (tld_of(edge[0]) in tlds and tld_of(edge[1]) in tlds)


def node_passes(out_degree: int, in_degree: int, min_links: int) -> bool:
    """The paper's degree rule: at least K out-links and at least K in-links."""
    return out_degree >= min_links and in_degree >= min_links


class _TldFilterFn(beam.DoFn):
    def __init__(self, tlds: frozenset[str]):
        self._tlds = tlds
        self._dropped = Metrics.counter(NAMESPACE, "dropped_edges.tld_filter")

    def process(self, edge: Edge) -> Iterator[Edge]:
        if edge_in_tlds(edge, self._tlds):
            yield edge
        else:
            self._dropped.inc()


class FilterByTld(beam.PTransform):
    """Keep the edges whose two endpoints are both in the TLD set (all edges for an empty set)."""

    def __init__(self, tlds: Iterable[str]):
        super().__init__()
        self._tlds = frozenset(t.lower() for t in tlds)

    def expand(self, edges):
        if not self._tlds:
            return edges
        return edges | "KeepTlds" >> beam.ParDo(_TldFilterFn(self._tlds))


def _sum_degrees(kv: tuple[str, dict[str, list[int]]]) -> tuple[str, int, int]:
    node, grouped = kv
    return node, sum(grouped["out"]), sum(grouped["in"])


class _KeepNodeFn(beam.DoFn):
    """(node, out, in) -> node if it passes the degree rule; counts the others."""

    def __init__(self, min_links: int, counter_names: tuple[str, ...]):
        self._k = min_links
        self._counter_names = counter_names

    def setup(self) -> None:
        self._dropped = [Metrics.counter(NAMESPACE, n) for n in self._counter_names]

    def process(self, node_degrees: tuple[str, int, int]) -> Iterator[str]:
        node, out_degree, in_degree = node_degrees
        if node_passes(out_degree, in_degree, self._k):
            yield node
        else:
            for counter in self._dropped:
                counter.inc()


class _JoinKeptFn(beam.DoFn):
    """(node, {'edges': [other...], 'keep': [True?]}) -> the edges of kept nodes, re-keyed."""

    def __init__(self, node_is_source: bool):
        self._node_is_source = node_is_source
        self._dropped = Metrics.counter(NAMESPACE, "dropped_edges.degree_filter")

    def process(self, kv: tuple[str, dict[str, list]]) -> Iterator[Edge]:
        node, grouped = kv
        others = grouped["edges"]
        if not grouped["keep"]:
            self._dropped.inc(len(others))
            return
        if self._node_is_source and not others:
            # A kept source has >= K out-links in this very PCollection; a group without them
            # means the runner split or lost a key group. Fail rather than lose edges silently.
            raise RuntimeError(
                f"runner lost data: source {node!r} passed the degree filter but its CoGroupByKey "
                "group holds none of its edges"
            )
        for other in others:
            yield (node, other) if self._node_is_source else (other, node)


def _keep_edges(edges, kept_sources, kept_targets):
    """Edges whose source is in `kept_sources` and whose target is in `kept_targets` (two joins)."""
    flag = lambda n: (n, True)  # noqa: E731
    by_src = (
        {"edges": edges, "keep": kept_sources | "FlagSources" >> beam.Map(flag)}
        | "JoinSources" >> beam.CoGroupByKey()
        | "EdgesOfKeptSources" >> beam.ParDo(_JoinKeptFn(node_is_source=True))
    )
    by_dst = by_src | "KeyByTarget" >> beam.Map(lambda e: (e[1], e[0]))
    return (
        {"edges": by_dst, "keep": kept_targets | "FlagTargets" >> beam.Map(flag)}
        | "JoinTargets" >> beam.CoGroupByKey()
        | "EdgesOfKeptTargets" >> beam.ParDo(_JoinKeptFn(node_is_source=False))
    )


class _DegreePass(beam.PTransform):
    def __init__(self, min_links: int, bipartite: bool, counter_names: tuple[str, ...]):
        super().__init__()
        self._k = min_links
        self._bipartite = bipartite
        self._counter_names = counter_names

    def expand(self, edges):
        out_deg = (
            edges
            | "OutLinks" >> beam.Map(lambda e: (e[0], 1))
            | "CountOutLinks" >> beam.CombinePerKey(sum)
        )
        in_deg = (
            edges
            | "InLinks" >> beam.Map(lambda e: (e[1], 1))
            | "CountInLinks" >> beam.CombinePerKey(sum)
        )
        if self._bipartite:
            # Rows need K out-links, columns K in-links; the two node sets are disjoint.
            kept_sources = (
                out_deg
                | "SourceDegrees" >> beam.Map(lambda kv, k=self._k: (kv[0], kv[1], k))
                | "KeepSources" >> beam.ParDo(_KeepNodeFn(self._k, self._counter_names))
            )
            kept_targets = (
                in_deg
                | "TargetDegrees" >> beam.Map(lambda kv, k=self._k: (kv[0], k, kv[1]))
                | "KeepTargets" >> beam.ParDo(_KeepNodeFn(self._k, self._counter_names))
            )
        else:
            kept_sources = kept_targets = (
                {"out": out_deg, "in": in_deg}
                | "JoinDegrees" >> beam.CoGroupByKey()
                | "SumDegrees" >> beam.Map(_sum_degrees)
                | "KeepNodes" >> beam.ParDo(_KeepNodeFn(self._k, self._counter_names))
            )
        return _keep_edges(edges, kept_sources, kept_targets)


class FilterByDegree(beam.PTransform):
    """Keep nodes with >= K in-links and >= K out-links, then the edges between kept nodes.

    One pass as in the paper (so some kept nodes may end below K); `passes` > 1 repeats it.
    With `bipartite`, sources need K out-links and targets K in-links.
    """

    def __init__(self, min_links: int, passes: int = 1, bipartite: bool = False):
        super().__init__()
        if passes < 1:
            raise ValueError(f"passes must be >= 1, got {passes}")
        self._k = min_links
        self._passes = passes
        self._bipartite = bipartite

    def expand(self, edges):
        if self._k <= 0:
            return edges
        for i in range(1, self._passes + 1):
            names = ("dropped_nodes.degree_filter",)
            if self._passes > 1:
                names += (f"dropped_nodes.degree_filter_pass{i}",)
            edges = edges | f"Pass{i}" >> _DegreePass(self._k, self._bipartite, names)
        return edges
