"""`export --topk K`: the top K columns of every row with known links, as sharded TFRecord files.

A training row is scored from its trained row, its training columns left out; a held-out test
row is folded in from its fold-in columns, which are left out (as `eval` ranks it); in a graph
the row's own id is left out too. On a given split (whose test users are training rows) the
training rows alone are written. Rows stream from the dataset's shards a chunk at a time, are
ranked on the devices (`ranking.Ranker`), and are written as `topk.tfr-SSSSS-of-NNNNN` in the
order read (training shards, then test shards), with `topk.json` saying what the files hold (and
the model directory and epoch exported from). The export is all or nothing (`output_swap`): it is
written beside `out_dir` and swapped in once complete, replacing an earlier export there (its
shards of another shard count, temporary files of a killed one); `read_export` refuses a directory
without `topk.json` or whose shards are not the ones it lists.
Records: `topk_records` (read back with `topk_records.read_topk` or `tf.data`). Its phases
(`phase_times`): read, compile, rank, write.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import time
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from alx_trainer import compile_cache, phase_times
from alx_trainer.data.dataset import Dataset, read_chunks
from alx_trainer.evaluation.ranking import Ranker
from alx_trainer.tools import output_swap, topk_records
from webgraph_contract import dataset_reader, fileio, layout
from webgraph_contract.ragged import RaggedRows

log = logging.getLogger(__name__)

PREFIX = "topk.tfr"
MANIFEST = "topk.json"
# rows per file when the number of shards is left to the export
ROWS_PER_SHARD = 1 << 20
# regex of the names of the files `export_topk` writes
NAMES = f"{layout.shard_pattern(PREFIX)}|{re.escape(MANIFEST)}"
PROGRESS_EVERY_S = 10.0


def _vocabulary(dataset: Dataset) -> tuple[topk_records.Ragged | None, topk_records.Ragged | None]:
    """The encoded row and column names of the dataset's vocabulary (None, None: it has none)."""
    try:
        cols = dataset_reader.read_vocab(dataset.data_dir, columns=True)
        rows = (
            cols
            if not dataset.bipartite
            else dataset_reader.read_vocab(dataset.data_dir, columns=False)
        )
    except FileNotFoundError:
        return None, None
    return (
        topk_records.name_entries([rows.get(i, "") for i in range(dataset.num_rows)]),
        topk_records.name_entries([cols.get(i, "") for i in range(dataset.num_cols)]),
    )


def _count_rows(dataset: Dataset, split: str) -> int:
    """Rows of a split, from stats.json or (when it does not say) by reading the split once."""
    if split in dataset.splits:
        return dataset.splits[split]
    files = dataset.files.get(split, [])
    return sum(len(c) for c in read_chunks(files, 1 << 16, dataset.num_rows, dataset.num_cols))


class _ShardWriter(contextlib.ExitStack):
    """Records appended in order across `num_shards` files of `per_shard` records each; each file
    appears complete when the next one starts or the block ends without an error."""

    def __init__(self, out_dir: str, num_shards: int, per_shard: int):
        super().__init__()
        self.out_dir, self.num_shards, self.per_shard = out_dir, num_shards, per_shard
        self.paths: list[str] = []
        self.file: contextlib.ExitStack | None = None
        self.write: Callable[[list[bytes]], None] | None = None
        self.room = 0

    def _next(self) -> None:
        if self.file is not None:
            self.file.close()
        if len(self.paths) == self.num_shards:
            raise ValueError(
                f"export: more rows than the {self.num_shards * self.per_shard} counted"
            )
        path = os.path.join(
            self.out_dir, layout.shard_name(PREFIX, len(self.paths), self.num_shards)
        )
        self.paths.append(path)
        self.file = self.enter_context(contextlib.ExitStack())
        self.write = self.file.enter_context(fileio.record_writer(path))
        self.room = self.per_shard

    def add(self, encoded: list[bytes]) -> None:
        while encoded:
            if self.room == 0:
                self._next()
            taken = min(self.room, len(encoded))
            self.write(encoded[:taken])
            encoded, self.room = encoded[taken:], self.room - taken

    def finish(self) -> list[str]:
        """Write empty files up to `num_shards` (fewer rows than shards); the paths."""
        while len(self.paths) < self.num_shards:
            self._next()
        return self.paths


def full_chunks(chunks: Iterable[RaggedRows], rows: int) -> Iterator[RaggedRows]:
    """`chunks` joined in order into chunks of `rows` rows (fewer only at the end): the reader cuts
    a chunk at each file's end, and every short chunk would be a ranking call of its own shape (a
    fold-in program traced, lowered and loaded per call)."""
    held: list[RaggedRows] = []
    count = 0
    for chunk in chunks:
        while len(chunk):
            taken = min(rows - count, len(chunk))
            held.append(chunk.take(0, taken))
            chunk, count = chunk.take(taken, len(chunk)), count + taken
            if count == rows:
                yield RaggedRows.concat(held)
                held, count = [], 0
    if count:
        yield RaggedRows.concat(held)


def _chunks(
    model: Any, dataset: Dataset, ranker: Ranker, k: int, test: bool
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(row ids, top-K ids, top-K scores) a chunk at a time: training rows, then test rows."""
    shared = not dataset.bipartite
    row_table = np.asarray(model.row_table, np.float32)
    for split in ("train", "test") if test else ("train",):
        files = dataset.files.get(split, [])
        read = read_chunks(files, ranker.rows_per_call, dataset.num_rows, dataset.num_cols)
        for chunk in full_chunks(phase_times.timed_steps("read", read), ranker.rows_per_call):
            # on a graph each row's own id too (as `Ranker.rank`)
            exclude = chunk.with_ids(chunk.row_ids) if shared else chunk
            with compile_cache.phase("rank"):
                if split == "train":
                    ids, scores = ranker.top_k(row_table[chunk.row_ids], exclude, k)
                else:
                    ids, scores = ranker.fold_in_top_k(chunk, exclude, k)
            yield chunk.row_ids, ids, scores


def export_topk(
    model: Any,
    dataset: Dataset,
    out_dir: str,
    k: int,
    *,
    num_shards: int = 0,
    batch_size: int | None = None,
    mesh: Any = None,
    model_dir: str = "",
) -> list[str]:
    """Write the top `k` of every row of `dataset` with known links into `out_dir` as
    `num_shards` files (0: one per `ROWS_PER_SHARD` rows) and `topk.json`, all or nothing; the
    paths written. `model_dir`: where the model was loaded from (recorded in `topk.json`; default
    its training directory)."""
    if model.row_table is None:
        raise ValueError(
            "export --topk: the model has no row table to score its training rows from"
        )
    if k <= 0:
        raise ValueError(f"export --topk: K must be positive, got {k}")
    test = dataset.protocol != "given_split" and bool(dataset.files.get("test"))
    counts = {
        "train": _count_rows(dataset, "train"),
        "test": _count_rows(dataset, "test") if test else 0,
    }
    total = counts["train"] + counts["test"]
    num_shards = num_shards or max(1, math.ceil(total / ROWS_PER_SHARD))
    row_names, col_names = _vocabulary(dataset)
    ranker = Ranker(model.col_table, model.config, mesh=mesh, batch_size=batch_size, rows=total)
    log.info(
        "export: top %d of %d rows (%d trained, %d folded in) into %d shards of %s; %s",
        k,
        total,
        counts["train"],
        counts["test"],
        num_shards,
        out_dir,
        ranker.describe(k),
    )
    start = last = time.perf_counter()
    done = 0
    with output_swap.staged(out_dir, NAMES, MANIFEST) as staging:
        with _ShardWriter(staging, num_shards, max(1, math.ceil(total / num_shards))) as writer:
            for rows, ids, scores in _chunks(model, dataset, ranker, k, test):
                with phase_times.timed("write"):
                    writer.add(topk_records.encode(rows, ids, scores, row_names, col_names))
                done += len(rows)
                now = time.perf_counter()
                if now - last >= PROGRESS_EVERY_S:
                    last = now
                    log.info(
                        "export: %d/%d rows (%.0f%%), %.0f rows/s",
                        done,
                        total,
                        100 * done / max(total, 1),
                        done / (now - start),
                    )
            if done != total:
                raise ValueError(f"{dataset.name}: read {done} rows, but stats.json counts {total}")
            names = [os.path.basename(p) for p in writer.finish()]
        manifest = {
            "k": k,
            "rows": done,
            "files": names,
            "features": ["row", "ids", "scores"]
            + (["row_url", "urls"] if col_names is not None else []),
            "trained_rows": counts["train"],
            "folded_in_rows": counts["test"],
            "data": dataset.name,
            "dataset_fingerprint": dataset.fingerprint,
            "model_dir": fileio.absolute(model_dir or model.config.model_dir),
            "epoch": model.epoch,
        }
        fileio.write_atomic(
            os.path.join(staging, MANIFEST), json.dumps(manifest, indent=2, sort_keys=True) + "\n"
        )
    paths = [os.path.join(out_dir, name) for name in names + [MANIFEST]]
    log.info("export: %d rows in %.1f s", done, time.perf_counter() - start)
    return paths


def read_manifest(out_dir: str) -> dict[str, Any]:
    """`topk.json` of a whole export in `out_dir`; a one-line error when it is missing, damaged,
    or the directory's shards are not the ones it lists (an export cut short or mixed)."""
    path = os.path.join(out_dir, MANIFEST)
    if not fileio.exists(path):
        raise FileNotFoundError(
            f"{path}: missing; {out_dir} holds no complete `export --top_k` (run it again)"
        )
    try:
        with fileio.open_file(path, "r") as f:
            manifest = json.load(f)
        listed = [str(name) for name in manifest["files"]]
        int(manifest["k"])
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not an export manifest ({type(e).__name__}: {e})") from None
    shards = re.compile(layout.shard_pattern(PREFIX))
    present = sorted(n for n in fileio.listdir(out_dir) if shards.fullmatch(n))
    if present != sorted(listed):
        missing = sorted(set(listed) - set(present))
        extra = sorted(set(present) - set(listed))
        raise ValueError(
            f"{path}: the directory's shards are not the ones it lists ("
            + "; ".join(
                part
                for part in (
                    f"missing {' '.join(missing)}" if missing else "",
                    f"not listed {' '.join(extra)}" if extra else "",
                )
                if part
            )
            + "); the export is incomplete or mixed: run it again"
        )
    return manifest


def read_export(out_dir: str) -> topk_records.TopK:
    """The rows an `export --topk` wrote into `out_dir`, as its `topk.json` lists them (checked
    by `read_manifest`)."""
    manifest = read_manifest(out_dir)
    return topk_records.read_topk(
        [os.path.join(out_dir, name) for name in manifest["files"]], manifest["k"]
    )
