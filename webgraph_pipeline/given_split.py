"""A published train/test split used as given (weak generalization), e.g. LightGCN's Gowalla.

Every user keeps its training items: `train` holds each user's training items, `train_t` their
transpose, and `test` one row per user with test items, `col_tag` = that user's training items
(the evaluator folds the user in from them, the same least-squares problem as the user's ALS
update, and excludes them from the ranking) and `gt_tag` = its test items. Users and items are
numbered over train and test together (separate row and column ids: the data is users x items).
No degree filter and no re-splitting: the counts are the files'.

With `validation_fraction` > 0 the training data is also re-split for tuning (`carve_validation`):
each training user's items that are not also its test items are cut by the test split's hash rule
(`splits.split_test_row`, under its own salt) into a held-out share (`validation` gt_tag) and the
rest, which with any test-overlapping items is the user's `validation_train` row. Test is never read
by tuning, and `validation_train` + `validation` gt together are exactly `train`.
"""

from __future__ import annotations

from typing import Any, Iterator

import apache_beam as beam
from apache_beam.metrics import Metrics

from webgraph_pipeline.counters import NAMESPACE
from webgraph_pipeline.ids import AssignIds
from webgraph_pipeline.splits import split_test_row

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


def carve_validation(
    name: str, train: Row, test_items: tuple[int, ...], seed: int, fraction: float
) -> tuple[Row, Row | None]:
    """A user's training row -> (its validation_train row, its validation row or None).

    A share `fraction` of the user's training items that are not test items is held out (at least
    one, and at least one such item kept); a user with fewer than two such items keeps them all.
    """
    row_id, items, _ = train
    candidates = [c for c in items if c not in set(test_items)]
    if len(candidates) < 2:
        return (row_id, items, ()), None
    _, held = split_test_row(f"validation\x1f{name}", candidates, seed, fraction)
    kept = tuple(c for c in items if c not in set(held))
    return (row_id, kept, ()), (row_id, kept, held)


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

    def __init__(self, seed: int, validation_fraction: float) -> None:
        self._seed, self._validation_fraction = seed, validation_fraction
        self._overlap = Metrics.counter(NAMESPACE, "given_split.test_items_also_in_train")
        self._cold = Metrics.counter(NAMESPACE, "given_split.test_users_without_train_items")

    def process(self, kv) -> Iterator[Any]:
        name, grouped = kv
        (row_id,) = grouped["id"]
        train, test, overlap = user_rows(row_id, list(grouped["links"]))
        if overlap:
            self._overlap.inc(overlap)
        if train:
            yield beam.pvalue.TaggedOutput("train", train)
            if self._validation_fraction:
                fit, validation = carve_validation(name, train, test[2] if test else (), self._seed,
                                                   self._validation_fraction)
                yield beam.pvalue.TaggedOutput("validation_train", fit)
                if validation:
                    yield beam.pvalue.TaggedOutput("validation", validation)
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


def _transpose(rows, label: str):
    """Rows (user, items, ()) -> (item, users, ()) rows."""
    return (
        rows
        | f"{label}TransposeLinks" >> beam.FlatMap(lambda r: ((c, r[0]) for c in r[1]))
        | f"{label}GroupByItem" >> beam.GroupByKey()
        | f"{label}TransposedRow" >> beam.Map(lambda kv: (kv[0], tuple(sorted(kv[1])), ()))
    )


class BuildGivenSplit(beam.PTransform):
    """{'train': (user, item) edges, 'test': (user, item) edges}, each deduplicated -> the dict of
    PCollections `BuildWebGraph` returns (`train`, `train_t`, `test`, `vocab`, `col_vocab`, `summary`)."""

    def __init__(self, id_buckets: int, seed: int = 0, validation_fraction: float = 0.0):
        super().__init__()
        self._id_buckets = id_buckets
        self._seed, self._validation_fraction = seed, validation_fraction

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
            | "UserRows" >> beam.ParDo(_UserRowsFn(self._seed, self._validation_fraction)).with_outputs(
                "train", "test", "validation_train", "validation")
        )
        out = {"train": rows.train, "train_t": _transpose(rows.train, ""), "test": rows.test}
        if self._validation_fraction:
            out["validation_train"] = rows.validation_train
            out["validation_train_t"] = _transpose(rows.validation_train, "Validation")
            out["validation"] = rows.validation
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
                for name in ("train", "train_t", "test", "validation_train", "validation_train_t", "validation")
                if name in out
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
