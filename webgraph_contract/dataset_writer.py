"""A dataset directory written from rows in memory, on all the host's cores, without Beam.

`write_dataset(out, nodes, train, test, held, config, num_shards)` writes a graph's strong-
generalization splits in the contract's layout: `train` (one record per row given), `train_t`
(its transpose: one record per page with a training in-link), `test` (`col_tag` the fold-in
links, `gt_tag` the held-out ones), each cut into `num_shards` contiguous id ranges as the
pipeline cuts them (`layout.shard_of`), every record encoded by `record_codec.encode_rows` and
framed by `fileio.record_writer`; then `stats.json` through `stats_json` (the summary the pipeline
gives: nodes, edges, splits, test links, degree histograms; the config; the dataset's fingerprint).
It writes no vocabulary (the contract's readers need none; such a dataset has no page names).

How: the rows go to files in /dev/shm (or, without room there, a folder beside `out`), mapped by
`workers` fresh interpreters (`file_workers.WorkerPool`, `python -c`: no fork of a parent that
may run JAX's threads, and no import of its `__main__`), each taking one shard at a time. In a
first round each `train` shard is written and its links spilled ordered by the column shard they
fall in, and each `test` shard written; in a second each `train_t` shard gathers its columns'
links from every spill (row shards in order, so rows stay ascending), sorts them by column
(stable) and is written.
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
}


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
) -> dict[str, Any]:
    """Write the dataset (see the module's docstring) into `out` (local), replacing the split and
    vocabulary shards and stats.json it held; returns the stats written. `train`'s rows are the
    training pages with their links; `test` and `held` the same test pages (ascending ids) with
    their fold-in and held-out links; `workers` processes (None: one per core), each encoding
    about `block_ids` ids at a time (the files' bytes do not depend on it)."""
    if num_shards < 1:
        raise ValueError(f"num_shards: must be >= 1, got {num_shards}")
    for name, rows in (("train", train), ("test", test), ("held", held)):
        _check(name, rows, num_nodes)
    if not np.array_equal(test.row_ids, held.row_ids):
        raise ValueError("test and held: must hold the same rows")
    in_train = np.zeros(num_nodes, bool)
    in_train[train.row_ids] = True
    if in_train[test.row_ids].any():
        raise ValueError("train and test: a row is in both (test rows are held out whole)")
    os.makedirs(out, exist_ok=True)
    names = [
        layout.shard_name(prefix, k, num_shards, layout.TFRECORD_SUFFIX)
        for prefix in layout.SPLIT_PREFIXES.values()
        for k in range(num_shards)
    ]
    prefixes = [p + layout.TFRECORD_SUFFIX for p in layout.ALL_SPLIT_PREFIXES.values()]
    prefixes += [layout.VOCAB_PREFIX, layout.COL_VOCAB_PREFIX]
    layout.remove_stale(out, "|".join(layout.shard_pattern(p) for p in prefixes), names)
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
    need = sum(a.size * np.dtype(_ARRAYS[n]).itemsize for n, a in arrays.items()) + 8 * train.nnz
    base = SHM_DIR if shm_free_bytes() > 1.25 * need else os.path.dirname(os.path.abspath(out))
    tmp = os.path.join(base, f".wg-write-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    os.makedirs(tmp)
    workers = workers or len(os.sched_getaffinity(0))
    try:
        for name, a in arrays.items():
            np.ascontiguousarray(a, _ARRAYS[name]).tofile(os.path.join(tmp, name))
        where = _Where(
            out,
            tmp,
            {name: int(a.size) for name, a in arrays.items()},
            layout.shard_bounds(num_nodes, num_shards),
            block_ids,
        )
        first = [(kind, where, k) for kind in ("train", "test") for k in range(num_shards)]
        with file_workers.WorkerPool(__name__, workers, "a writing worker") as pool:
            done = pool.run(first)
            spills = [done[k][1] for k in range(num_shards)]
            second = [("train_t", where, k, [s[k] for s in spills]) for k in range(num_shards)]
            transposed = pool.run(second)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    in_degree = np.concatenate([t[1] for t in transposed])
    in_degree += np.bincount(arrays["test.ids"], minlength=num_nodes)
    in_degree += np.bincount(arrays["held.ids"], minlength=num_nodes)
    out_degree = np.zeros(num_nodes, np.int64)
    out_degree[train.row_ids] = train.lengths
    out_degree[test.row_ids] = test.lengths + held.lengths
    summary = {
        "nodes": int(num_nodes),
        "edges": int(train.nnz + test.nnz + held.nnz),
        "splits": {
            "train": int(sum(d[0] for d in done[:num_shards])),
            "train_t": int(sum(t[0] for t in transposed)),
            "test": int(sum(done[num_shards:])),
        },
        "split_edges": {"train": int(train.nnz)},
        "test_links": {"col_tag": int(test.nnz), "gt_tag": int(held.nnz)},
        "out_degree_histogram": _histogram(out_degree),
        "in_degree_histogram": _histogram(in_degree),
        "bipartite": False,
        "protocol": protocol,
        "dropped": {},
    }
    stats = stats_json.job_stats(
        summary, {**config, "protocol": protocol}, [], __version__, num_shards
    )
    stats.update(stats_json.fingerprint_dataset(out, threads=workers))
    stats_json.write_stats(out, stats)
    return stats


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
    ids (and the end), the ids encoded at a time."""

    out: str
    tmp: str
    sizes: Mapping[str, int]
    bounds: np.ndarray
    block_ids: int

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
        name = layout.shard_name(layout.SPLIT_PREFIXES[split], k, n, layout.TFRECORD_SUFFIX)
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
        (and, for `test`, the held-out ids `held`, a pointer and ids alike), a block of about
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


def _train_shard(w: _Where, k: int) -> tuple[int, list[tuple[str, int, int]]]:
    """Write `train` shard k; spill its links as (row, column) int32 pairs ordered by column shard.
    Returns (records, [(spill file, first pair, pairs) per column shard])."""
    n = len(w.bounds) - 1
    rows, ptr, ids = (w.load(f"train.{p}") for p in ("rows", "ptr", "ids"))
    lo, hi = (int(x) for x in np.searchsorted(rows, w.bounds[k : k + 2]))
    # the shard read once: written, then spilled
    shard_rows = np.asarray(rows[lo:hi])
    shard_ptr = np.asarray(ptr[lo : hi + 1]) - ptr[lo]
    cols = np.asarray(ids[ptr[lo] : ptr[hi]])
    w.write("train", k, shard_rows, shard_ptr, cols)
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
    return hi - lo, [(path, int(a), int(c)) for a, c in zip(starts, counts)]


def _test_shard(w: _Where, k: int) -> int:
    """Write `test` shard k (`col_tag` fold-in links, `gt_tag` held-out ones); its records."""
    rows, ptr, ids = (w.load(f"test.{p}") for p in ("rows", "ptr", "ids"))
    gptr, gids = w.load("held.ptr"), w.load("held.ids")
    lo, hi = (int(x) for x in np.searchsorted(rows, w.bounds[k : k + 2]))
    w.write("test", k, rows[lo:hi], ptr[lo : hi + 1], ids, (gptr[lo : hi + 1], gids))
    return hi - lo


def _transpose_shard(
    w: _Where, k: int, pieces: Sequence[tuple[str, int, int]]
) -> tuple[int, np.ndarray]:
    """Write `train_t` shard k from the spilled pairs of its columns (row shards in order);
    returns (records, the training in-degree of each of its columns)."""
    lo, hi = int(w.bounds[k]), int(w.bounds[k + 1])
    parts = [
        np.fromfile(path, np.int32, count=2 * count, offset=8 * start).reshape(-1, 2)
        for path, start, count in pieces
    ]
    pairs = np.concatenate(parts) if parts else np.zeros((0, 2), np.int32)
    # stable: rows stay ascending within a column
    order = np.argsort(pairs[:, 1], kind="stable")
    rows_of = pairs[order, 0]
    degree = np.bincount(pairs[:, 1] - lo, minlength=hi - lo)
    cols = np.flatnonzero(degree) + lo
    ptr = np.zeros(len(cols) + 1, np.int64)
    np.cumsum(degree[cols - lo], out=ptr[1:])
    w.write("train_t", k, cols, ptr, rows_of)
    return len(cols), degree


_JOBS = {"train": _train_shard, "test": _test_shard, "train_t": _transpose_shard}
