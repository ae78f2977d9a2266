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
import numpy as np

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

PARTS = ("train", "test")


class _UserRowsFn(beam.DoFn):
    """(user bucket, {'train', 'test': (user fps, item ids) pieces, 'table'}) -> `train` and `test`
    RowBlocks, `transpose` pieces (bucket, (item ids, user ids)) and summary `parts`."""

    def __init__(self, num_buckets: int):
        self._b = num_buckets

    def process(self, kv) -> Iterator[Any]:
        _, grouped = kv
        fps, ids, _ = node_table(grouped["table"])
        parts = {}
        for part in PARTS:
            users, items = col.concat(grouped[part], 2, (np.uint64, np.int64))
            parts[part] = col.group_rows(ids[col.lookup(users, fps, "user")], items)
        (train_ids, train_ptr, train_cols), (test_ids, test_ptr, test_cols) = parts["train"], parts["test"]
        counts = LocalCounts()
        lengths = np.diff(train_ptr)
        summary = col.histogram_part("out_degree", lengths)
        summary[("edges", None)] += len(train_cols)
        if len(train_ids):
            yield beam.pvalue.TaggedOutput("train", col.row_block(train_ids, train_ptr, train_cols))
            user_of = np.repeat(train_ids, lengths)
            for b, piece in col.split_by_bucket(train_cols.astype(np.uint64), self._b, train_cols, user_of):
                yield beam.pvalue.TaggedOutput("transpose", (b, piece))
        if len(test_ids):
            # col_tag: the user's training items (none for a user without a training row)
            has_train = col.is_member(test_ids, train_ids)
            counts.inc("given_split.test_users_without_train_items", int((~has_train).sum()))
            at = np.searchsorted(train_ids, test_ids)
            ptr = np.concatenate((train_ptr, [train_ptr[-1]]))  # a last, empty row for the others
            kept_ptr, kept = col.ragged_take(ptr, train_cols, np.where(has_train, at, len(train_ids)))
            yield beam.pvalue.TaggedOutput("test", col.row_block(test_ids, kept_ptr, kept, test_ptr, test_cols))
            width = max(int(train_cols.max(initial=0)), int(test_cols.max(initial=0))) + 1
            both = np.intersect1d(np.repeat(train_ids, lengths) * width + train_cols,
                                  np.repeat(test_ids, np.diff(test_ptr)) * width + test_cols, assume_unique=True)
            counts.inc("given_split.test_items_also_in_train", len(both))
            summary[("test.col_tag", None)] += len(kept)
            summary[("test.gt_tag", None)] += len(test_cols)
        summary[("split.train", None)] += len(train_ids)
        summary[("split.test", None)] += len(test_ids)
        flush_to_beam(+counts)
        yield beam.pvalue.TaggedOutput("parts", summary)


class BuildGivenSplit(beam.PTransform):
    """{'train': edge batches, 'test': edge batches} of (user, item) names -> the dict of PCollections
    `BuildWebGraph` returns (`train`, `train_t`, `test`, `vocab`, `col_vocab`, `summary`).

    The graph stage's own steps do the work: `DistinctEdges` per file (duplicates counted),
    `NodeTables` over both (users and items numbered by the graph's id rule), `JoinTargetIds`
    per file, then the rows per user bucket.
    """

    def __init__(self, id_buckets: int, num_buckets: int = DEFAULT_GRAPH_BUCKETS,
                 fingerprint_bits: int = FINGERPRINT_BITS):
        super().__init__()
        self._id_buckets, self._b, self._bits = id_buckets, num_buckets, fingerprint_bits

    def expand(self, batches):
        nb = self._b
        distinct = {
            part: batches[part] | f"DistinctEdges_{part}" >> DistinctEdges(frozenset(), True, nb, self._bits)
            for part in PARTS
        }
        both = {
            key: [distinct[part][key] for part in PARTS] | f"Both_{key}" >> beam.Flatten()
            for key in ("edges", ROWS, COLS)
        }
        tables = both | "NodeTables" >> NodeTables(True, self._id_buckets, nb)
        joined = {
            part: {"edges": distinct[part]["edges"], "table": tables[COLS]} | f"JoinItemIds_{part}" >> JoinTargetIds(nb)
            for part in PARTS
        }
        rows = (
            {"train": joined["train"]["edges"], "test": joined["test"]["edges"], "table": tables[ROWS]}
            | "GroupUsers" >> beam.CoGroupByKey()
            | "UserRows" >> beam.ParDo(_UserRowsFn(nb)).with_outputs("train", "test", "transpose", "parts")
        )
        transposed = rows.transpose | "Transpose" >> Transpose()
        out = {"train": rows.train, "train_t": transposed["rows"], "test": rows.test}
        out["vocab"] = tables[ROWS] | "Vocabulary" >> beam.Map(vocab_entries)
        out["col_vocab"] = tables[COLS] | "ColVocabulary" >> beam.Map(vocab_entries)
        parts = [joined["train"]["parts"], rows.parts, transposed["parts"], *node_counts(tables)]
        out["summary"] = parts | "AllParts" >> beam.Flatten() | "Summarize" >> Summarize(bipartite=True)
        return out
