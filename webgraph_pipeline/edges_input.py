"""`--input_format edges`: text edge lists in, deduplicated (source, target) name pairs out.

Lines hold whitespace-separated tokens. Layout `pairs`: `src dst [ignored columns...]` (so a
MovieLens `user item rating time` file reads as (user, item) pairs); layout `adjacency`:
`src dst1 dst2 ...`. Tokens are URLs (normalized and validated like WAT links), integer ids
(joined with a URL list `id url` when one is given), or opaque names (e.g. user ids).
Header lines (only words, such as `start end`), blank lines and `#` comments are skipped.
Everything dropped is counted in the `webgraph` namespace: `dropped_lines.<reason>`,
`dropped_urls.<reason>`, `dropped_url_list.<reason>`, `dropped_edges.<reason>`.
"""

from __future__ import annotations

import re
from typing import Iterable, Iterator, Optional

import apache_beam as beam
from apache_beam.metrics import Metrics

from webgraph_pipeline.counters import NAMESPACE

LAYOUTS = ("pairs", "adjacency")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*\Z")
_INT = re.compile(r"-?\d+\Z")

Edge = tuple[str, str]


def is_header(tokens: list[str]) -> bool:
    """A header line names its columns: every token is a plain word (no digits-only id, no URL)."""
    return all(_WORD.match(t) for t in tokens)


def parse_edge_line(line: str, layout: str = "pairs") -> tuple[list[Edge], Optional[str]]:
    """One line -> (token pairs, None), or ([], reason) for a line that yields no edge."""
    tokens = line.split()
    if not tokens:
        return [], "empty"
    if tokens[0].startswith("#"):
        return [], "comment"
    if is_header(tokens):
        return [], "header"
    if len(tokens) < 2:
        return [], "too_few_fields"
    if layout == "pairs":
        return [(tokens[0], tokens[1])], None
    return [(tokens[0], t) for t in tokens[1:]], None


def parse_url_line(line: str) -> tuple[Optional[tuple[str, str]], Optional[str]]:
    """One `id url` line of a URL list -> ((id, url), None) or (None, reason)."""
    tokens = line.split()
    if not tokens:
        return None, "empty"
    if is_header(tokens):
        return None, "header"
    if len(tokens) != 2:
        return None, "bad_fields"
    if not _INT.match(tokens[0]):
        return None, "bad_id"
    return (str(int(tokens[0])), tokens[1]), None


def normalize_token(token: str) -> tuple[Optional[str], Optional[str]]:
    """A URL token normalized like WAT links ((url, None) or (None, reason)); other tokens as they are."""
    if "://" not in token:
        return token, None
    from webgraph_pipeline import urls

    return urls.normalize_url(token)


class _Counted(beam.DoFn):
    """A DoFn that counts drops as `<kind>.<reason>` in the webgraph namespace."""

    def setup(self) -> None:
        self._counters: dict[str, object] = {}

    def count(self, name: str, n: int = 1) -> None:
        if name not in self._counters:
            self._counters[name] = Metrics.counter(NAMESPACE, name)
        self._counters[name].inc(n)


class _ParseEdgesFn(_Counted):
    def __init__(self, layout: str):
        self._layout = layout

    def process(self, line: str) -> Iterator[Edge]:
        pairs, reason = parse_edge_line(line, self._layout)
        if reason:
            self.count(f"dropped_lines.{reason}")
        yield from pairs


class _NormalizeFn(_Counted):
    """Normalize URL tokens; an edge with an invalid endpoint is dropped (`url.<reason>`)."""

    def process(self, edge: Edge) -> Iterator[Edge]:
        out = []
        for token in edge:
            name, reason = normalize_token(token)
            if reason:
                self.count(f"dropped_urls.{reason}")
                self.count("dropped_edges.invalid_endpoint")
                return
            out.append(name)
        yield out[0], out[1]


class _ParseUrlsFn(_Counted):
    def process(self, line: str) -> Iterator[tuple[str, Optional[str]]]:
        entry, reason = parse_url_line(line)
        if reason:
            self.count(f"dropped_url_list.{reason}")
            return
        node_id, raw = entry
        url, reason = normalize_token(raw) if "://" in raw else (None, "not_a_url")
        if reason:
            self.count(f"dropped_urls.{reason}")
        yield node_id, url


class _JoinUrlFn(_Counted):
    """(id, {'edges': [other...], 'url': [url...]}) -> (other, url): the keyed endpoint's URL.

    Keyed by source it yields (target id, source URL); re-keyed by target, (source URL, target URL).
    """

    def process(self, kv) -> Iterator[Edge]:
        node_id, grouped = kv
        others, urls = list(grouped["edges"]), sorted({u or "" for u in grouped["url"]})
        if len(urls) > 1:
            self.count("dropped_url_list.duplicate_id")
        if not others:
            return
        if not urls:
            self.count("dropped_edges.unknown_id", len(others))
            return
        url = urls[-1]  # a valid URL sorts after the '' of an invalid one
        if not url:
            self.count("dropped_edges.invalid_endpoint", len(others))
            return
        for other in others:
            yield other, url


class _DedupFn(_Counted):
    """(edge, [None...]) -> edge once, counting duplicates and (for graphs) self-loops."""

    def __init__(self, drop_self_loops: bool):
        self._drop_self_loops = drop_self_loops

    def process(self, kv) -> Iterator[Edge]:
        edge, copies = kv
        n = sum(1 for _ in copies)
        if n > 1:
            self.count("dropped_edges.duplicate", n - 1)
        if self._drop_self_loops and edge[0] == edge[1]:
            self.count("dropped_edges.self_loop")
            return
        yield edge


class ReadEdgeList(beam.PTransform):
    """Edge-list files (a list of globs) -> deduplicated (source, target) name pairs.

    urls_file: an `id url` list; integer ids in the edge lists are then replaced by their URLs.
    bipartite: sources and targets are different kinds (users, items), so `5 5` is no self-loop.
    """

    def __init__(
        self, file_patterns: Iterable[str], urls_file: Optional[str] = None, layout: str = "pairs",
        bipartite: bool = False,
    ):
        super().__init__()
        if layout not in LAYOUTS:
            raise ValueError(f"unknown edge-list layout {layout!r}; expected one of {LAYOUTS}")
        self._patterns = list(file_patterns)
        self._urls_file = urls_file
        self._layout = layout
        self._bipartite = bipartite

    def expand(self, pbegin):
        lines = [
            pbegin | f"ReadEdgeList{i}" >> beam.io.ReadFromText(pattern) for i, pattern in enumerate(self._patterns)
        ] | "AllLines" >> beam.Flatten()
        pairs = lines | "ParseEdgeLines" >> beam.ParDo(_ParseEdgesFn(self._layout))
        if self._urls_file:
            url_table = (
                pbegin
                | "ReadUrlList" >> beam.io.ReadFromText(self._urls_file)
                | "ParseUrlLines" >> beam.ParDo(_ParseUrlsFn())
            )
            canon = lambda e: (_canonical_id(e[0]), _canonical_id(e[1]))  # noqa: E731
            by_src = pairs | "CanonicalIds" >> beam.Map(canon)
            by_dst = (
                {"edges": by_src, "url": url_table}
                | "JoinSourceUrl" >> beam.CoGroupByKey()
                | "SourceUrl" >> beam.ParDo(_JoinUrlFn())
            )
            named = (
                {"edges": by_dst, "url": url_table}
                | "JoinTargetUrl" >> beam.CoGroupByKey()
                | "TargetUrl" >> beam.ParDo(_JoinUrlFn())
            )
        else:
            named = pairs | "NormalizeUrls" >> beam.ParDo(_NormalizeFn())
        return (
            named
            | "KeyEdge" >> beam.Map(lambda e: (e, None))
            | "GroupDuplicates" >> beam.GroupByKey()
            | "Dedup" >> beam.ParDo(_DedupFn(drop_self_loops=not self._bipartite))
        )


def _canonical_id(token: str) -> str:
    """`007` -> `7`, so ids match the URL list's; a non-integer stays as it is (and finds no URL)."""
    return str(int(token)) if _INT.match(token) else token
