"""A published train/test split used as given (weak generalization), e.g. LightGCN's Gowalla.

Every user keeps its training items: `train` holds each user's training items, `train_t` their
transpose, and `test` one row per user with test items, `col_tag` = that user's training items
(the evaluator folds the user in from them, the same least-squares problem as the user's ALS
update, and excludes them from the ranking) and `gt_tag` = its test items. Users and items are
numbered over train and test together (separate row and column ids: the data is users x items).
No degree filter and no re-splitting: the counts are the files'.

With `validation_fraction` > 0 the training data is also re-split for tuning (`carve_validation`):
each training user's items that are not also its test items are cut by the test split's hash rule
(`splits.split_block`, under its own salt) into a held-out share (`validation` gt_tag) and the
rest, which with any test-overlapping items is the user's `validation_train` row. Test is never read
by tuning, and `validation_train` + `validation` gt together are exactly `train`.
"""

from __future__ import annotations

from typing import Any, Iterator

import apache_beam as beam
import numpy as np

from webgraph_contract.ragged import RaggedRows
from webgraph_contract.record_codec import SplitRows
from webgraph_pipeline import columnar as col
from webgraph_pipeline.counters import LocalCounts, flush_to_beam
from webgraph_pipeline.fingerprints import FINGERPRINT_BITS
from webgraph_pipeline.graph import (
    COLS,
    DEFAULT_GRAPH_BUCKETS,
    ROWS,
    DistinctEdges,
    JoinTargetIds,
    NodeTables,
    Summarize,
    Transpose,
    node_counts,
    node_table,
    vocab_entries,
)
from webgraph_pipeline.splits import split_block

PARTS = ("train", "test")
Row = tuple[int, tuple[int, ...], tuple[int, ...]]


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
    candidates = sorted(candidates)
    # every row with two or more links is a "test" row at fraction 1: only the held-out rule applies
    _, mask = split_block(
        np.array([f"validation\x1f{name}"], object),
        np.array([0, len(candidates)]),
        np.array(candidates, np.int64),
        seed,
        1.0,
        fraction,
    )
    held = tuple(c for c, h in zip(candidates, mask.tolist()) if h)
    kept = tuple(c for c in items if c not in set(held))
    return (row_id, kept, ()), (row_id, kept, held)


def _validation_blocks(
    names, train_ids, train_ptr, train_cols, test_ids, test_ptr, test_cols, seed, fraction
):
    """(validation_train block, validation block): `carve_validation` for every training user."""
    fit_rows, val_rows = [], []
    test_of = {
        int(u): tuple(test_cols[test_ptr[i] : test_ptr[i + 1]].tolist())
        for i, u in enumerate(test_ids)
    }
    for i, u in enumerate(train_ids.tolist()):
        items = tuple(train_cols[train_ptr[i] : train_ptr[i + 1]].tolist())
        fit, val = carve_validation(
            str(names[i]), (u, items, ()), test_of.get(u, ()), seed, fraction
        )
        fit_rows.append(fit)
        if val:
            val_rows.append(val)

    def block(rows: list[Row]) -> SplitRows:
        tags = np.array([r[0] for r in rows], np.int64)
        kept = RaggedRows.from_lists([r[1] for r in rows], tags)
        return SplitRows(kept, RaggedRows.from_lists([r[2] for r in rows], kept.row_ids))

    return block(fit_rows), block(val_rows)


class _UserRowsFn(beam.DoFn):
    """(user bucket, {'train', 'test': (user fps, item ids) pieces, 'table'}) -> `train` and `test`
    `SplitRows`, `transpose` pieces (bucket, (item ids, user ids)) and summary `parts`."""

    def __init__(self, num_buckets: int, seed: int = 0, validation_fraction: float = 0.0):
        self._b = num_buckets
        self._seed, self._validation_fraction = seed, validation_fraction

    def process(self, kv) -> Iterator[Any]:
        _, grouped = kv
        fps, ids, names = node_table(grouped["table"])
        parts = {}
        for part in PARTS:
            users, items = col.concat(grouped[part], 2, (np.uint64, np.int64))
            parts[part] = col.group_rows(ids[col.lookup(users, fps, "user")], items)
        (train_ids, train_ptr, train_cols), (test_ids, test_ptr, test_cols) = (
            parts["train"],
            parts["test"],
        )
        counts = LocalCounts()
        lengths = np.diff(train_ptr)
        summary = col.histogram_part("out_degree", lengths)
        summary[("edges", None)] += len(train_cols)
        if len(train_ids):
            yield beam.pvalue.TaggedOutput("train", SplitRows.of(train_ids, train_ptr, train_cols))
            user_of = np.repeat(train_ids, lengths)
            for b, piece in col.split_by_bucket(
                train_cols.astype(np.uint64), self._b, train_cols, user_of
            ):
                yield beam.pvalue.TaggedOutput("transpose", (b, piece))
        if len(test_ids):
            # col_tag: the user's training items (none for a user without a training row)
            has_train = col.is_member(test_ids, train_ids)
            counts.inc("given_split.test_users_without_train_items", int((~has_train).sum()))
            at = np.searchsorted(train_ids, test_ids)
            # the training rows and a last, empty row for the users without one
            ptr = np.concatenate((train_ptr, [train_ptr[-1]]))
            train_rows = RaggedRows(np.append(train_ids, -1), ptr, train_cols)
            picked = train_rows.select(np.where(has_train, at, len(train_ids)))
            kept = RaggedRows(test_ids, picked.indptr, picked.ids)
            yield beam.pvalue.TaggedOutput(
                "test", SplitRows(kept, RaggedRows(test_ids, test_ptr, test_cols))
            )
            width = max(int(train_cols.max(initial=0)), int(test_cols.max(initial=0))) + 1
            both = np.intersect1d(
                np.repeat(train_ids, lengths) * width + train_cols,
                np.repeat(test_ids, np.diff(test_ptr)) * width + test_cols,
                assume_unique=True,
            )
            counts.inc("given_split.test_items_also_in_train", len(both))
            summary[("test.col_tag", None)] += len(kept.ids)
            summary[("test.gt_tag", None)] += len(test_cols)
        summary[("split.train", None)] += len(train_ids)
        summary[("split.test", None)] += len(test_ids)
        if self._validation_fraction and len(train_ids):
            by_id = np.argsort(ids)
            user_names = names[by_id][np.searchsorted(ids[by_id], train_ids)]
            fit, val = _validation_blocks(
                user_names,
                train_ids,
                train_ptr,
                train_cols,
                test_ids,
                test_ptr,
                test_cols,
                self._seed,
                self._validation_fraction,
            )
            yield beam.pvalue.TaggedOutput("validation_train", fit)
            yield beam.pvalue.TaggedOutput("validation", val)
            fit_items = fit.col_tag.ids
            fit_user = np.repeat(fit.row_tags, fit.col_tag.lengths)
            for b, piece in col.split_by_bucket(
                fit_items.astype(np.uint64), self._b, fit_items, fit_user
            ):
                yield beam.pvalue.TaggedOutput("validation_transpose", (b, piece))
            summary[("split.validation_train", None)] += len(fit)
            summary[("split.validation", None)] += len(val)
        flush_to_beam(+counts)
        yield beam.pvalue.TaggedOutput("parts", summary)


class BuildGivenSplit(beam.PTransform):
    """{'train': edge batches, 'test': edge batches} of (user, item) names -> the dict of
    PCollections `BuildWebGraph` returns (`train`, `train_t`, `test`, `vocab`, `col_vocab`,
    `summary`).

    The graph stage's own steps do the work: `DistinctEdges` per file (duplicates counted),
    `NodeTables` over both (users and items numbered by the graph's id rule), `JoinTargetIds`
    per file, then the rows per user bucket.
    """

    def __init__(
        self,
        id_buckets: int,
        num_buckets: int = DEFAULT_GRAPH_BUCKETS,
        fingerprint_bits: int = FINGERPRINT_BITS,
        seed: int = 0,
        validation_fraction: float = 0.0,
    ):
        super().__init__()
        self._id_buckets, self._b, self._bits = id_buckets, num_buckets, fingerprint_bits
        self._seed, self._validation_fraction = seed, validation_fraction

    def expand(self, batches):
        nb = self._b
        distinct = {
            part: batches[part]
            | f"DistinctEdges_{part}" >> DistinctEdges(frozenset(), True, nb, self._bits)
            for part in PARTS
        }
        both = {
            key: [distinct[part][key] for part in PARTS] | f"Both_{key}" >> beam.Flatten()
            for key in ("edges", ROWS, COLS)
        }
        tables = both | "NodeTables" >> NodeTables(True, self._id_buckets, nb)
        joined = {
            part: {"edges": distinct[part]["edges"], "table": tables[COLS]}
            | f"JoinItemIds_{part}" >> JoinTargetIds(nb)
            for part in PARTS
        }
        rows = (
            {
                "train": joined["train"]["edges"],
                "test": joined["test"]["edges"],
                "table": tables[ROWS],
            }
            | "GroupUsers" >> beam.CoGroupByKey()
            | "UserRows"
            >> beam.ParDo(_UserRowsFn(nb, self._seed, self._validation_fraction)).with_outputs(
                "train",
                "test",
                "transpose",
                "parts",
                "validation_train",
                "validation",
                "validation_transpose",
            )
        )
        transposed = rows.transpose | "Transpose" >> Transpose()
        out = {"train": rows.train, "train_t": transposed["rows"], "test": rows.test}
        # the transpose's own parts count train_t: not summed for this one
        if self._validation_fraction:
            out["validation_train"], out["validation"] = rows.validation_train, rows.validation
            out["validation_train_t"] = (
                rows.validation_transpose | "ValidationTranspose" >> Transpose()
            )["rows"]
        out["vocab"] = tables[ROWS] | "Vocabulary" >> beam.Map(vocab_entries)
        out["col_vocab"] = tables[COLS] | "ColVocabulary" >> beam.Map(vocab_entries)
        parts = [joined["train"]["parts"], rows.parts, transposed["parts"], *node_counts(tables)]
        out["summary"] = (
            parts | "AllParts" >> beam.Flatten() | "Summarize" >> Summarize(bipartite=True)
        )
        return out
