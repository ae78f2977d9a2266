"""A dataset directory written from rows in memory, on all the host's cores, without Beam.

`write_dataset(out, nodes, train, test, held, config, num_shards)` writes a graph's strong-
generalization splits in the contract's layout: `train` (one record per row given), `train_t`
(its transpose: one record per page with a training in-link), `test` (`col_tag` the fold-in
links, `gt_tag` the held-out ones), each cut into `num_shards` contiguous id ranges as the
pipeline cuts them (`layout.shard_of`), every record encoded by `record_codec.encode_rows` and
framed by `fileio.record_writer`; then `stats.json` through `stats_json` (the summary the pipeline
gives: nodes, edges, splits, test links, degree histograms; the config; the dataset's fingerprint).
It writes no vocabulary (the contract's readers need none; such a dataset has no page names).

With `validation` = (kept, held) it also writes the tuning splits: `validation` (`col_tag` the
validation rows' kept links, `gt_tag` their held-out ones), and `validation_train` (+ its
transpose `validation_train_t`), the training rows without the validation rows: a validation row
is held out whole from what tuning trains on, as a test row is from `train` (strong
generalization), so `validation_train` + `validation` (`col_tag` + `gt_tag`) = `train`. The
`train`, `train_t` and `test` files do not change with it.

How: the rows go to files in /dev/shm (or, without room there, a folder beside `out`), mapped by
`workers` fresh interpreters (`file_workers.WorkerPool`, `python -c`: no fork of a parent that
may run JAX's threads, and no import of its `__main__`), each taking one shard at a time. In a
first round each `train` shard is written (and its `validation_train` shard: the same rows less the
validation rows) and its links spilled ordered by the column shard they fall in, and each `test`
(and `validation`) shard written; in a second each `train_t` shard gathers its columns' links from
every spill (row shards in order, so rows stay ascending), sorts them by column (stable) and is
written (and its `validation_train_t` shard: the same, less the validation rows' links).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import uuid
from typing import Any, Mapping, Sequence

import numpy as np

from webgraph_contract import __version__, file_workers, fileio, layout, record_codec, stats_json
from webgraph_contract.file_workers import SHM_DIR, shm_free_bytes
from webgraph_contract.ragged import RaggedRows

BLOCK_IDS = 1 << 22  # ids encoded at a time in a shard (bounds a worker's memory)
# the rows' arrays as the workers read them: name -> dtype
_ARRAYS = {
    "train.rows": np.int64,
    "train.ptr": np.int64,
    "train.ids": np.int32,
    "test.rows": np.int64,
    "test.ptr": np.int64,
    "test.ids": np.int32,
    "held.ptr": np.int64,
    "held.ids": np.int32,
    "validation.rows": np.int64,
    "validation.ptr": np.int64,
    "validation.ids": np.int32,
    "validation.held.ptr": np.int64,
    "validation.held.ids": np.int32,
    # 1 for a validation row, per node
    "validation.mask": np.uint8,
}
# the arrays of a split's held-out links, by split
_HELD = {"test": "held", "validation": "validation.held"}


def _check(name: str, rows: RaggedRows, num_ids: int) -> None:
    if len(rows) and (np.any(np.diff(rows.row_ids) <= 0) or rows.row_ids[0] < 0):
        raise ValueError(f"{name}: row ids must be distinct, ascending and non-negative")
    if len(rows) and rows.row_ids[-1] >= num_ids:
        raise ValueError(f"{name}: row id {rows.row_ids[-1]} outside [0, {num_ids})")
    ids = rows.ids[rows.indptr[0] : rows.indptr[-1]]
    if len(ids) and (ids.min() < 0 or ids.max() >= num_ids):
        raise ValueError(f"{name}: ids outside [0, {num_ids})")


def write_dataset(
    out: str,
    num_nodes: int,
    train: RaggedRows,
    test: RaggedRows,
    held: RaggedRows,
    config: Mapping[str, Any],
    num_shards: int,
    workers: int | None = None,
    protocol: str = "strong_generalization",
    block_ids: int = BLOCK_IDS,
    validation: tuple[RaggedRows, RaggedRows] | None = None,
) -> dict[str, Any]:
    """Write the dataset (see the module's docstring) into `out` (local), replacing the split and
    vocabulary shards and stats.json it held; returns the stats written. `train`'s rows are the
    training pages with their links; `test` and `held` the same test pages (ascending ids) with
    their fold-in and held-out links; `validation` (None: no validation splits) the kept and
    held-out links of the same training pages (ascending ids), which together are each page's
    training links; `workers` processes (None: one per core), each encoding about `block_ids` ids
    at a time (the files' bytes do not depend on it)."""
    if num_shards < 1:
        raise ValueError(f"num_shards: must be >= 1, got {num_shards}")
    named = [("train", train), ("test", test), ("held", held)]
    named += list(zip(("validation", "validation held"), validation or ()))
    for name, rows in named:
        _check(name, rows, num_nodes)
    if not np.array_equal(test.row_ids, held.row_ids):
        raise ValueError("test and held: must hold the same rows")
    in_train = np.zeros(num_nodes, bool)
    in_train[train.row_ids] = True
    if in_train[test.row_ids].any():
        raise ValueError("train and test: a row is in both (test rows are held out whole)")
    splits = dict(layout.SPLIT_PREFIXES)
    arrays = {
        "train.rows": train.row_ids,
        "train.ptr": train.indptr - train.indptr[0],
        "train.ids": train.ids[train.indptr[0] : train.indptr[-1]],
        "test.rows": test.row_ids,
        "test.ptr": test.indptr - test.indptr[0],
        "test.ids": test.ids[test.indptr[0] : test.indptr[-1]],
        "held.ptr": held.indptr - held.indptr[0],
        "held.ids": held.ids[held.indptr[0] : held.indptr[-1]],
    }
    if validation is not None:
        _check_validation(train, *validation, in_train)
        splits.update(layout.VALIDATION_PREFIXES)
        kept, gt = validation
        mask = np.zeros(num_nodes, np.uint8)
        mask[kept.row_ids] = 1
        arrays.update(
            {
                "validation.rows": kept.row_ids,
                "validation.ptr": kept.indptr - kept.indptr[0],
                "validation.ids": kept.ids[kept.indptr[0] : kept.indptr[-1]],
                "validation.held.ptr": gt.indptr - gt.indptr[0],
                "validation.held.ids": gt.ids[gt.indptr[0] : gt.indptr[-1]],
                "validation.mask": mask,
            }
        )
    os.makedirs(out, exist_ok=True)
    names = [
        layout.shard_name(prefix, k, num_shards, layout.TFRECORD_SUFFIX)
        for prefix in splits.values()
        for k in range(num_shards)
    ]
    prefixes = [p + layout.TFRECORD_SUFFIX for p in layout.ALL_SPLIT_PREFIXES.values()]
    prefixes += [layout.VOCAB_PREFIX, layout.COL_VOCAB_PREFIX]
    layout.remove_stale(out, "|".join(layout.shard_pattern(p) for p in prefixes), names)
    need = sum(a.size * np.dtype(_ARRAYS[n]).itemsize for n, a in arrays.items()) + 8 * train.nnz
    base = SHM_DIR if shm_free_bytes() > 1.25 * need else os.path.dirname(os.path.abspath(out))
    tmp = os.path.join(base, f".wg-write-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    os.makedirs(tmp)
    workers = workers or len(os.sched_getaffinity(0))
    held_splits = ["test"] + (["validation"] if validation is not None else [])
    try:
        for name, a in arrays.items():
            np.ascontiguousarray(a, _ARRAYS[name]).tofile(os.path.join(tmp, name))
        where = _Where(
            out,
            tmp,
            {name: int(a.size) for name, a in arrays.items()},
            layout.shard_bounds(num_nodes, num_shards),
            block_ids,
            validation is not None,
        )
        first = [("train", where, k) for k in range(num_shards)]
        first += [("held", where, split, k) for split in held_splits for k in range(num_shards)]
        with file_workers.WorkerPool(__name__, workers, "a writing worker") as pool:
            done = pool.run(first)
            spills = [done[k][2] for k in range(num_shards)]
            second = [("train_t", where, k, [s[k] for s in spills]) for k in range(num_shards)]
            transposed = pool.run(second)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    in_degree = np.concatenate([t[2] for t in transposed])
    in_degree += np.bincount(arrays["test.ids"], minlength=num_nodes)
    in_degree += np.bincount(arrays["held.ids"], minlength=num_nodes)
    out_degree = np.zeros(num_nodes, np.int64)
    out_degree[train.row_ids] = train.lengths
    out_degree[test.row_ids] = test.lengths + held.lengths
    counts = {
        "train": sum(d[0] for d in done[:num_shards]),
        "train_t": sum(t[0] for t in transposed),
        "test": sum(done[num_shards : 2 * num_shards]),
    }
    split_edges = {"train": int(train.nnz)}
    if validation is not None:
        counts["validation_train"] = sum(d[1] for d in done[:num_shards])
        counts["validation_train_t"] = sum(t[1] for t in transposed)
        counts["validation"] = sum(done[2 * num_shards :])
        split_edges["validation_train"] = int(train.nnz - validation[0].nnz - validation[1].nnz)
    summary = {
        "nodes": int(num_nodes),
        "edges": int(train.nnz + test.nnz + held.nnz),
        "splits": {split: int(n) for split, n in counts.items()},
        "split_edges": split_edges,
        "test_links": {"col_tag": int(test.nnz), "gt_tag": int(held.nnz)},
        "out_degree_histogram": _histogram(out_degree),
        "in_degree_histogram": _histogram(in_degree),
        "bipartite": False,
        "protocol": protocol,
        "dropped": {},
    }
    if validation is not None:
        summary["validation_links"] = {
            "col_tag": int(validation[0].nnz),
            "gt_tag": int(validation[1].nnz),
        }
    stats = stats_json.job_stats(
        summary, {**config, "protocol": protocol}, [], __version__, num_shards
    )
    stats.update(stats_json.fingerprint_dataset(out, threads=workers))
    stats_json.write_stats(out, stats)
    return stats


def _check_validation(
    train: RaggedRows, kept: RaggedRows, held: RaggedRows, in_train: np.ndarray
) -> None:
    """A ValueError unless the validation rows are the same training rows in `kept` and `held`,
    each with as many links in all as its training row."""
    if not np.array_equal(kept.row_ids, held.row_ids):
        raise ValueError("validation kept and held: must hold the same rows")
    if not in_train[kept.row_ids].all():
        raise ValueError("validation: a row is not a training row")
    at = np.searchsorted(train.row_ids, kept.row_ids)
    if not np.array_equal(kept.lengths + held.lengths, train.lengths[at]):
        raise ValueError("validation: a row's kept and held links are not its training links")


def _histogram(degrees: np.ndarray) -> list[list[int]]:
    """[[degree, nodes], ...] of the nodes with a degree above 0, by degree."""
    counts = np.bincount(degrees)
    return [[d, int(counts[d])] for d in np.flatnonzero(counts).tolist() if d > 0]


def serve() -> None:
    """A writing worker's loop: each job is (its name in `_JOBS`, its arguments)."""
    file_workers.serve_jobs(lambda job: _JOBS[job[0]](*job[1:]))


@dataclasses.dataclass(frozen=True)
class _Where:
    """What every job needs: the output folder, the arrays' folder and sizes, the shards' first
    ids (and the end), the ids encoded at a time, whether the validation splits are written."""

    out: str
    tmp: str
    sizes: Mapping[str, int]
    bounds: np.ndarray
    block_ids: int
    validation: bool

    def load(self, name: str) -> np.ndarray:
        """One of the rows' arrays, mapped read-only."""
        if self.sizes[name] == 0:
            return np.zeros(0, _ARRAYS[name])
        return np.memmap(
            os.path.join(self.tmp, name), _ARRAYS[name], "r", shape=(self.sizes[name],)
        )

    def path(self, split: str, k: int) -> str:
        """The file of shard k of `split`."""
        n = len(self.bounds) - 1
        name = layout.shard_name(layout.ALL_SPLIT_PREFIXES[split], k, n, layout.TFRECORD_SUFFIX)
        return os.path.join(self.out, name)

    def write(
        self,
        split: str,
        k: int,
        rows: np.ndarray,
        ptr: np.ndarray,
        ids: np.ndarray,
        held: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        """Write shard k of `split`: the rows `rows`, row i with the ids ids[ptr[i]:ptr[i + 1]]
        (and, for `test` and `validation`, the held-out ids `held`, a pointer and ids alike), a
        block of about
        `block_ids` ids at a time."""
        with fileio.record_writer(self.path(split, k)) as write:
            for r0, r1 in layout.row_blocks(ptr, 0, len(rows), self.block_ids):
                gt = ()
                if held is not None:
                    gptr, gids = held
                    gt = (gptr[r0 : r1 + 1] - gptr[r0], gids[gptr[r0] : gptr[r1]])
                write(
                    record_codec.encode_rows(
                        record_codec.SplitRows.of(
                            rows[r0:r1], ptr[r0 : r1 + 1] - ptr[r0], ids[ptr[r0] : ptr[r1]], *gt
                        )
                    )
                )


def _without(
    rows: np.ndarray, ptr: np.ndarray, ids: np.ndarray, drop: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, ptr from 0, ids) of the CSR rows `rows` less those where `drop` (bool per row)."""
    keep = ~drop
    lengths = np.diff(ptr)[keep]
    out_ptr = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=out_ptr[1:])
    return rows[keep], out_ptr, ids[np.repeat(keep, np.diff(ptr))]


def _train_shard(w: _Where, k: int) -> tuple[int, int, list[tuple[str, int, int]]]:
    """Write `train` shard k (and `validation_train` shard k: its rows less the validation rows);
    spill its links as (row, column) int32 pairs ordered by column shard. Returns (records,
    validation_train records, [(spill file, first pair, pairs) per column shard])."""
    n = len(w.bounds) - 1
    rows, ptr, ids = (w.load(f"train.{p}") for p in ("rows", "ptr", "ids"))
    lo, hi = (int(x) for x in np.searchsorted(rows, w.bounds[k : k + 2]))
    # the shard read once: written, then spilled
    shard_rows = np.asarray(rows[lo:hi])
    shard_ptr = np.asarray(ptr[lo : hi + 1]) - ptr[lo]
    cols = np.asarray(ids[ptr[lo] : ptr[hi]])
    w.write("train", k, shard_rows, shard_ptr, cols)
    fit_records = 0
    if w.validation:
        drop = w.load("validation.mask")[shard_rows].astype(bool)
        fit = _without(shard_rows, shard_ptr, cols, drop)
        w.write("validation_train", k, *fit)
        fit_records = len(fit[0])
    owner = np.repeat(shard_rows, np.diff(shard_ptr)).astype(np.int32)
    shard = layout.shard_of(cols.astype(np.int64), int(w.bounds[-1]), n)
    # 16-bit keys sort by radix
    order = np.argsort(shard.astype(np.uint16) if n <= 1 << 16 else shard, kind="stable")
    pairs = np.empty((len(cols), 2), np.int32)
    pairs[:, 0], pairs[:, 1] = owner[order], cols[order]
    path = os.path.join(w.tmp, f"spill-{k:05d}")
    pairs.tofile(path)
    counts = np.bincount(shard, minlength=n)
    starts = np.cumsum(counts) - counts
    return hi - lo, fit_records, [(path, int(a), int(c)) for a, c in zip(starts, counts)]


def _held_shard(w: _Where, split: str, k: int) -> int:
    """Write shard k of `split`, `test` or `validation` (`col_tag` the kept links, `gt_tag` the
    held-out ones); its records."""
    rows, ptr, ids = (w.load(f"{split}.{p}") for p in ("rows", "ptr", "ids"))
    gptr, gids = w.load(f"{_HELD[split]}.ptr"), w.load(f"{_HELD[split]}.ids")
    lo, hi = (int(x) for x in np.searchsorted(rows, w.bounds[k : k + 2]))
    w.write(split, k, rows[lo:hi], ptr[lo : hi + 1], ids, (gptr[lo : hi + 1], gids))
    return hi - lo


def _transposed(lo: int, hi: int, column: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(columns with a link, ptr, degree of each column lo..hi - 1) of links sorted by column."""
    degree = np.bincount(column - lo, minlength=hi - lo)
    cols = np.flatnonzero(degree) + lo
    ptr = np.zeros(len(cols) + 1, np.int64)
    np.cumsum(degree[cols - lo], out=ptr[1:])
    return cols, ptr, degree


def _transpose_shard(
    w: _Where, k: int, pieces: Sequence[tuple[str, int, int]]
) -> tuple[int, int, np.ndarray]:
    """Write `train_t` shard k from the spilled pairs of its columns (row shards in order), and
    `validation_train_t` shard k from those of rows that are not validation rows; returns
    (records, validation_train_t records, the training in-degree of each of its columns)."""
    lo, hi = int(w.bounds[k]), int(w.bounds[k + 1])
    parts = [
        np.fromfile(path, np.int32, count=2 * count, offset=8 * start).reshape(-1, 2)
        for path, start, count in pieces
    ]
    pairs = np.concatenate(parts) if parts else np.zeros((0, 2), np.int32)
    # stable: rows stay ascending within a column
    order = np.argsort(pairs[:, 1], kind="stable")
    rows_of, column = pairs[order, 0], pairs[order, 1]
    cols, ptr, degree = _transposed(lo, hi, column)
    w.write("train_t", k, cols, ptr, rows_of)
    fit_records = 0
    if w.validation:
        keep = w.load("validation.mask")[rows_of] == 0
        fit_cols, fit_ptr, _ = _transposed(lo, hi, column[keep])
        w.write("validation_train_t", k, fit_cols, fit_ptr, rows_of[keep])
        fit_records = len(fit_cols)
    return len(cols), fit_records, degree


_JOBS = {"train": _train_shard, "held": _held_shard, "train_t": _transpose_shard}
