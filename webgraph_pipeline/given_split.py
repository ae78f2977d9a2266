"""A published train/test split used as given (weak generalization), e.g. LightGCN's Gowalla.

Every user keeps its training items: `train` holds each user's training items, `train_t` their
transpose, and `test` one row per user with test items, `col_tag` = that user's training items
(the evaluator folds the user in from them, the same least-squares problem as the user's ALS
update, and excludes them from the ranking) and `gt_tag` = its test items. Users and items are
numbered over train and test together (separate row and column ids: the data is users x items).
No degree filter and no re-splitting: the counts are the files'.
"""

from __future__ import annotations

from typing import Any, Iterator

import apache_beam as beam
from apache_beam.metrics import Metrics

from webgraph_pipeline.counters import NAMESPACE
from webgraph_pipeline.ids import AssignIds

TRAIN, TEST = 0, 1

# (row_tag, col_tag, gt_tag), the contract's record layout
Row = tuple[int, tuple[int, ...], tuple[int, ...]]


def user_rows(row_id: int, links: list[tuple[int, int]]) -> tuple[Row | None, Row | None, int]:
    """A user's (item id, TRAIN | TEST) links -> (train row or None, test row or None, number of
    its test items that are also training items)."""
    train = tuple(sorted({c for c, part in links if part == TRAIN}))
    test = tuple(sorted({c for c, part in links if part == TEST}))
    overlap = len(set(train) & set(test))
    return ((row_id, train, ()) if train else None), ((row_id, train, test) if test else None), overlap


def histogram(pairs: list[tuple[int, int]]) -> list[list[int]]:
    """[(degree, rows)] -> [[degree, rows], ...] sorted by degree (JSON-friendly)."""
    return [[int(d), int(n)] for d, n in sorted(pairs)]


def _attach_item_id(kv: tuple[str, dict[str, list]]) -> Iterator[tuple[str, tuple[int, int]]]:
    """(item, {'links': [(user, part)...], 'id': [item id]}) -> (user, (item id, part))."""
    _, grouped = kv
    (item_id,) = grouped["id"]
    for user, part in grouped["links"]:
        yield user, (item_id, part)


class _UserRowsFn(beam.DoFn):
    """(user, {'links': [(item id, part)...], 'id': [row id]}) -> tagged train and test rows."""

    def __init__(self) -> None:
        self._overlap = Metrics.counter(NAMESPACE, "given_split.test_items_also_in_train")
        self._cold = Metrics.counter(NAMESPACE, "given_split.test_users_without_train_items")

    def process(self, kv) -> Iterator[Any]:
        _, grouped = kv
        (row_id,) = grouped["id"]
        train, test, overlap = user_rows(row_id, list(grouped["links"]))
        if overlap:
            self._overlap.inc(overlap)
        if train:
            yield beam.pvalue.TaggedOutput("train", train)
        if test:
            if not train:
                self._cold.inc()
            yield beam.pvalue.TaggedOutput("test", test)


def summarize_given(_: Any, rows: int, cols: int, split_rows, test_links, out_hist, in_hist) -> dict[str, Any]:
    """The figures of a given split for stats.json (`edges` are the training interactions)."""
    splits = dict(split_rows)
    kept, held = test_links
    return {
        "protocol": "given_split",
        "nodes": int(rows + cols),
        "num_rows": int(rows),
        "num_cols": int(cols),
        "edges": int(splits.pop("edges")),
        "splits": {name: int(n) for name, n in splits.items()},
        "test_links": {"col_tag": int(kept), "gt_tag": int(held)},
        "out_degree_histogram": histogram(out_hist),
        "in_degree_histogram": histogram(in_hist),
    }


def _sum_pairs(pairs) -> tuple[int, int]:
    a = b = 0
    for x, y in pairs:
        a += x
        b += y
    return a, b


class BuildGivenSplit(beam.PTransform):
    """{'train': (user, item) edges, 'test': (user, item) edges}, each deduplicated -> the dict of
    PCollections `BuildWebGraph` returns (`train`, `train_t`, `test`, `vocab`, `col_vocab`, `summary`)."""

    def __init__(self, id_buckets: int):
        super().__init__()
        self._id_buckets = id_buckets

    def expand(self, parts):
        train = parts["train"] | "TagTrain" >> beam.Map(lambda e: (e[1], (e[0], TRAIN)))
        test = parts["test"] | "TagTest" >> beam.Map(lambda e: (e[1], (e[0], TEST)))
        links = (train, test) | "AllLinks" >> beam.Flatten()
        row_ids = (
            links
            | "Users" >> beam.Map(lambda kv: kv[1][0])
            | "DistinctUsers" >> beam.Distinct()
            | "AssignRowIds" >> AssignIds(self._id_buckets)
        )
        col_ids = (
            links
            | "Items" >> beam.Keys()
            | "DistinctItems" >> beam.Distinct()
            | "AssignColIds" >> AssignIds(self._id_buckets)
        )
        by_user = (
            {"links": links, "id": col_ids}
            | "JoinItemIds" >> beam.CoGroupByKey()
            | "ItemIdByUser" >> beam.FlatMap(_attach_item_id)
        )
        rows = (
            {"links": by_user, "id": row_ids}
            | "GroupUsers" >> beam.CoGroupByKey()
            | "UserRows" >> beam.ParDo(_UserRowsFn()).with_outputs("train", "test")
        )
        train_t = (
            rows.train
            | "TransposeLinks" >> beam.FlatMap(lambda r: ((c, r[0]) for c in r[1]))
            | "GroupByItem" >> beam.GroupByKey()
            | "TransposedRow" >> beam.Map(lambda kv: (kv[0], tuple(sorted(kv[1])), ()))
        )
        out = {"train": rows.train, "train_t": train_t, "test": rows.test}
        out["vocab"] = row_ids | "RowIdToName" >> beam.Map(lambda kv: (kv[1], kv[0]))
        out["col_vocab"] = col_ids | "ColIdToName" >> beam.Map(lambda kv: (kv[1], kv[0]))
        out["summary"] = self._summary(row_ids, col_ids, out)
        return out

    def _summary(self, row_ids, col_ids, out):
        single = beam.pvalue.AsSingleton
        count = lambda label, pcoll: pcoll | label >> beam.combiners.Count.Globally()  # noqa: E731
        split_rows = (
            [
                out[name] | f"Count_{name}" >> beam.combiners.Count.Globally()
                | f"Name_{name}" >> beam.Map(lambda n, name=name: (name, n))
                for name in ("train", "train_t", "test")
            ]
            + [out["train"] | "TrainLinks" >> beam.Map(lambda r: len(r[1]))
               | "SumTrainLinks" >> beam.CombineGlobally(sum) | "NameEdges" >> beam.Map(lambda n: ("edges", n))]
        ) | "FlattenSplitCounts" >> beam.Flatten() | "SplitCountList" >> beam.combiners.ToList()
        test_links = (
            out["test"]
            | "TestLinkCounts" >> beam.Map(lambda r: (len(r[1]), len(r[2])))
            | "SumTestLinks" >> beam.CombineGlobally(_sum_pairs)
        )
        hist = lambda label, pcoll: (  # noqa: E731
            pcoll | f"{label}Degree" >> beam.Map(lambda r: len(r[1]))
            | f"{label}Histogram" >> beam.combiners.Count.PerElement()
            | f"{label}HistList" >> beam.combiners.ToList()
        )
        return (
            row_ids.pipeline
            | "SummaryTrigger" >> beam.Create([None])
            | "Summarize"
            >> beam.Map(
                summarize_given,
                single(count("CountRows", row_ids)),
                single(count("CountCols", col_ids)),
                single(split_rows),
                single(test_links),
                single(hist("Out", out["train"])),
                single(hist("In", out["train_t"])),
            )
        )
