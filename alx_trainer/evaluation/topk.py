"""The best K columns of many rows against every column of a table, in row batches and column
blocks.

`top_k_rows` is the entry point shared by evaluation, predictions for new pages and `export --topk`:
rows given by their known column ids (CSR), folded in (paper Eq. 4) or taken from the trained row
table, ranked against all columns with their known columns excluded.

How (`BlockedScorer`): the column table is split into contiguous id ranges, one per device. For
each batch of rows every device runs one compiled program, a loop over its column blocks: a block's
scores `[rows per batch, columns per block]` are computed into the same buffer each time and
merged into a running top K, so memory is bounded by the block shape whatever the column count.
The devices' top K are merged on the host. Shapes are fixed (the last batch is padded), so a call
compiles once (twice when some rows have many known columns: those are batched apart with a wider
exclusion list).

Exact selection in a block: columns form groups of `GROUP`; a group can hold an entry of the
final top K only if its best score beats the running K-th best (strictly: a later column loses a
tie). When no group of any row of the batch does so, nothing is merged; when at most M do (M from
`TIERS`), the M best groups are gathered and merged; otherwise the K best groups are (a row's K
best entries lie in its K best groups: each group ranked above an entry's own holds a better
entry), so no block is ranked whole unless it has at most K groups. All are exact; the first ones
are cheap once the running top K has filled, which is most blocks. Ties are broken by the lower
column id, as in a stable sort of the scores (the brute-force ranking). The approximate option
selects per block with `lax.approx_max_k`; `approx_recall` measures it against the exact top K.
"""

from __future__ import annotations

import functools
import logging
import math
import sys
import time
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from tqdm import tqdm

from alx_trainer.evaluation import threshold_scan
from alx_trainer.ops import per_core

log = logging.getLogger(__name__)

GROUP = 32  # columns per group of the exact selection (a block holds a whole number of groups)
TIERS = (
    4,
    16,
)  # groups gathered per row when every row of a batch has at most this many candidates
NO_SEED = np.iinfo(np.int32).max  # the id of an empty seed slot (after every real id)
SHORT_EXCLUDE = (
    64  # rows with more known columns than this are batched apart (a wider exclusion list)
)
FOLD_IN_CHUNK = 1 << 16  # rows folded in per call of the trainer's solve
FoldInFn = Callable[[np.ndarray, Sequence[np.ndarray], Any], np.ndarray]


class Csr(NamedTuple):
    """Column ids per row: row i holds `indices[indptr[i]:indptr[i + 1]]`."""

    indptr: np.ndarray  # int64 [n + 1]
    indices: np.ndarray  # int64 [nnz]

    @staticmethod
    def from_lists(rows: Sequence[np.ndarray]) -> Csr:
        lengths = np.fromiter((len(r) for r in rows), np.int64, len(rows))
        indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        parts = [np.asarray(r, np.int64).ravel() for r in rows]
        return Csr(indptr, np.concatenate(parts) if parts else np.zeros(0, np.int64))

    @staticmethod
    def of(rows: Csr | Sequence[np.ndarray]) -> Csr:
        """`rows` as a Csr (a sequence of id arrays is converted)."""
        if isinstance(rows, Csr):
            return Csr(np.asarray(rows.indptr, np.int64), np.asarray(rows.indices, np.int64))
        return Csr.from_lists(rows)

    def __len__(self) -> int:
        return len(self.indptr) - 1

    def lengths(self) -> np.ndarray:
        return np.diff(self.indptr)

    def row(self, i: int) -> np.ndarray:
        return self.indices[self.indptr[i] : self.indptr[i + 1]]

    def rows(self, start: int, stop: int) -> Csr:
        """Rows `start..stop-1` as a Csr of their own."""
        lo, hi = self.indptr[start], self.indptr[stop]
        return Csr(self.indptr[start : stop + 1] - lo, self.indices[lo:hi])

    def lists(self) -> list[np.ndarray]:
        return [self.row(i) for i in range(len(self))]

    def with_ids(self, ids: np.ndarray) -> Csr:
        """Each row with one more id appended (`ids[i]` to row i)."""
        n = len(self)
        indptr = self.indptr + np.arange(n + 1)
        out = np.empty(len(self.indices) + n, np.int64)
        last = indptr[1:] - 1
        keep = np.ones(len(out), bool)
        keep[last] = False
        out[keep] = self.indices
        out[last] = np.asarray(ids, np.int64)
        return Csr(indptr, out)

    def padded(self, index: np.ndarray, batch: int, width: int) -> np.ndarray:
        """int32 `[batch, width]` of the rows `index` (in that order), padded with -1."""
        out = np.full((batch, width), -1, np.int32)
        starts = self.indptr[index]
        lengths = self.indptr[index + 1] - starts
        rows = np.repeat(np.arange(len(index)), lengths)
        offsets = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        out[rows, offsets] = self.indices[np.repeat(starts, lengths) + offsets]
        return out


class TopK(NamedTuple):
    """Best columns per row, best first: ids (int64, -1 where fewer columns are admissible) and
    scores (float32, -inf there)."""

    ids: np.ndarray
    scores: np.ndarray


class BlockShape(NamedTuple):
    """Rows scored per batch and columns per block: one device's score buffer is rows x cols."""

    rows: int
    cols: int

    def score_bytes(self) -> int:
        return 4 * self.rows * self.cols


def default_block_shape(platform: str) -> BlockShape:
    """Rows per batch and columns per block by backend: 4 MiB of scores on CPU, in batches of
    many rows (the threshold scan's host work is per batch), accelerator blocks large enough to
    keep the chip busy (256 MiB of scores)."""
    return BlockShape(1024, 1024) if platform == "cpu" else BlockShape(1024, 1 << 16)


def _devices(mesh: Mesh | Sequence[Any] | None) -> list:
    if mesh is None:
        return list(jax.local_devices())
    if isinstance(mesh, Mesh):
        return [d for d in mesh.devices.flat if d.process_index == jax.process_index()]
    return list(mesh)


def _merge(run_vals, run_ids, vals, ids, k: int):
    """The running top K with a block's candidates (ids in increasing order, after the running
    ones': a stable top K keeps the lower id on ties)."""
    best, at = jax.lax.top_k(jnp.concatenate([run_vals, vals], axis=1), k)
    return best, jnp.take_along_axis(jnp.concatenate([run_ids, ids], axis=1), at, axis=1)


def _merge_block(
    run_vals, run_ids, scores, start, floor, k: int, approx: bool, recall_target: float
):
    """The running top K (values, global ids) [B, k] merged with a `[B, C]` block of scores whose
    first column is `start`, given each row's final K-th best is at least `floor` [B] (see the
    module docstring). Only the candidates a branch selects are merged: none when no group of any
    row can enter, the best M groups of each row when every row has at most M that can (`TIERS`),
    else the best K groups (a row's K best entries lie in its K best groups, whatever the ties),
    or the whole block where it has no more than K groups."""
    b, c = scores.shape
    if approx:
        vals, pos = jax.lax.approx_max_k(scores, min(k, c), recall_target=recall_target)
        return _merge(run_vals, run_ids, vals, start + pos, k)
    g = GROUP if c % GROUP == 0 else c
    groups = scores.reshape(b, c // g, g)
    best = groups.max(axis=2)

    def gathered(m: int):
        def select():
            _, picked = jax.lax.top_k(best, m)
            picked = jnp.sort(picked, axis=1)  # in id order, so that ties keep the lower id
            vals = jnp.take_along_axis(groups, picked[:, :, None], axis=1).reshape(b, m * g)
            pos = (picked[:, :, None] * g + jnp.arange(g, dtype=picked.dtype)).reshape(b, m * g)
            return _merge(run_vals, run_ids, vals, start + pos, k)

        return select

    def whole():
        vals, pos = jax.lax.top_k(scores, min(k, c))
        return _merge(run_vals, run_ids, vals, start + pos, k)

    last = gathered(k) if k < c // g else whole
    tiers = tuple(m for m in TIERS if m < min(k, c // g))
    if not tiers:
        return last()
    threshold = run_vals[:, -1]
    need = jnp.max(jnp.sum((best > threshold[:, None]) & (best >= floor[:, None]), axis=1))
    index = jnp.searchsorted(
        jnp.asarray((0,) + tiers), need
    )  # the first tier that holds every row's groups
    unchanged = lambda: (run_vals, run_ids)
    return jax.lax.switch(index, [unchanged] + [gathered(m) for m in tiers] + [last])


def _seed_threshold(queries, seed_table, seed_ids, exclude, k: int):
    """A lower bound [B] of each row's K-th best admissible score: the K-th best over a device's
    columns of largest norm (`seed_ids`, ascending; -1: none), lowered by a rounding margin; -inf
    when fewer than K of them are admissible."""
    b, s = queries.shape[0], seed_ids.shape[0]
    if s < k:
        return jnp.full((b,), -jnp.inf, jnp.float32)
    scores = jnp.dot(queries, seed_table.T, preferred_element_type=jnp.float32)
    scores = jnp.where(seed_ids[None, :] != NO_SEED, scores, -jnp.inf)
    at = jnp.clip(jnp.searchsorted(seed_ids, exclude), 0, s - 1)
    hit = (exclude >= 0) & (seed_ids[at] == exclude)
    scores = scores.at[jnp.arange(b)[:, None], jnp.where(hit, at, s)].set(-jnp.inf, mode="drop")
    kth = jax.lax.top_k(scores, k)[0][:, -1]
    # the same product in another program may round differently: |error| <= d eps |q| |h|
    norms = jnp.sqrt(jnp.sum(seed_table * seed_table, axis=1)).max()
    margin = (
        4 * queries.shape[1] * jnp.finfo(jnp.float32).eps * jnp.linalg.norm(queries, axis=1) * norms
    )
    return kth - margin


@functools.lru_cache(maxsize=32)
def _kernel(k: int, cols: int, approx: bool, recall_target: float):
    """One device's program: (queries [B, d], table [blocks * cols, d], exclude [B, E] local ids,
    valid: its real column count) -> running top K (values [B, k], local ids [B, k])."""

    def run(queries, table, exclude, valid, seed_table, seed_ids):
        b = queries.shape[0]
        rows = jnp.arange(b)[:, None]
        floor = _seed_threshold(queries, seed_table, seed_ids, exclude, k)

        def block(j, carry):
            run_vals, run_ids = carry
            start = j * cols
            part = jax.lax.dynamic_slice_in_dim(table, start, cols)
            scores = jnp.dot(queries, part.T, preferred_element_type=jnp.float32)
            ids = start + jnp.arange(cols)
            scores = jnp.where(ids[None, :] < valid, scores, -jnp.inf)
            local = exclude - start
            local = jnp.where((exclude >= 0) & (local >= 0) & (local < cols), local, cols)
            scores = scores.at[rows, local].set(-jnp.inf, mode="drop")
            return _merge_block(run_vals, run_ids, scores, start, floor, k, approx, recall_target)

        init = (jnp.full((b, k), -jnp.inf, jnp.float32), jnp.full((b, k), -1, jnp.int32))
        return jax.lax.fori_loop(0, table.shape[0] // cols, block, init)

    return jax.jit(run)


class BlockedScorer:
    """A column table split by id ranges over devices, answering exact (or approximate) top-K
    queries in batches of `shape.rows` rows and blocks of `shape.cols` columns."""

    def __init__(
        self,
        col_table: np.ndarray,
        mesh: Mesh | Sequence[Any] | None = None,
        *,
        rows_per_batch: int | None = None,
        cols_per_block: int | None = None,
        scan: bool | None = None,
    ):
        table = np.asarray(col_table, np.float32)
        if table.ndim != 2:
            raise ValueError(f"col_table must be [columns, d], got shape {table.shape}")
        self.devices = _devices(mesh)
        self.num_cols, self.dim = table.shape
        default = default_block_shape(self.devices[0].platform)
        per_device = math.ceil(max(self.num_cols, 1) / len(self.devices))
        cols = cols_per_block or default.cols
        cols = min(cols, -(-per_device // GROUP) * GROUP)  # no block wider than a device's share
        if cols <= 0 or (rows_per_batch is not None and rows_per_batch <= 0):
            raise ValueError(
                f"block shape must be positive: {rows_per_batch} rows x {cols_per_block} columns"
            )
        self.shape = BlockShape(rows_per_batch or default.rows, cols)
        blocks = -(-per_device // cols)
        self.span = blocks * cols  # column ids per device
        self.valid = [
            int(np.clip(self.num_cols - i * self.span, 0, self.span))
            for i in range(len(self.devices))
        ]
        self.scan = self.devices[0].platform == "cpu" if scan is None else scan
        self._table = table
        self.per_core = per_core.applies(self.devices) and len(self.devices) > 1

    @functools.cached_property
    def _ranges(self) -> tuple[list, list]:
        """(tables, seeds) of the block kernel: each device's contiguous id range, on it."""
        padded = np.zeros((self.span * len(self.devices), self.dim), np.float32)
        padded[: self.num_cols] = self._table
        tables, seeds = [], []
        for i, device in enumerate(self.devices):
            part = padded[i * self.span : (i + 1) * self.span]
            tables.append(jax.device_put(part, device))
            seeds.append(jax.device_put(self._seed(part[: self.valid[i]]), device))
        return tables, seeds

    @functools.cached_property
    def _sorted(self) -> list[threshold_scan.SortedColumns]:
        """The threshold scan's columns: by descending norm, dealt round-robin over devices."""
        return threshold_scan.sorted_columns(self._table, self.devices, self._scan_block)

    @property
    def _scan_block(self) -> int:
        return threshold_scan.block_width(self.shape.cols)

    def _seed(self, part: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(table, ids) of a block of a device's columns of largest norm, ids ascending (padding
        `NO_SEED`, zero rows): their K-th best score bounds a row's final K-th best from below."""
        ids = np.full(self.shape.cols, NO_SEED, np.int32)
        take = min(len(part), self.shape.cols)
        norms = np.einsum("ij,ij->i", part, part)
        chosen = (
            np.sort(np.argpartition(-norms, take - 1)[:take]) if take else np.zeros(0, np.int64)
        )
        ids[:take] = chosen
        table = np.zeros((self.shape.cols, self.dim), np.float32)
        table[:take] = part[chosen]
        return table, ids

    def describe(self, k: int) -> str:
        """The memory bound of a query, for the log."""
        return (
            f"{self.num_cols} columns on {len(self.devices)} device(s) in blocks of "
            f"{self.shape.rows} rows x {self.shape.cols} columns: "
            f"{self.shape.score_bytes() / 2**20:.1f} MiB of scores per device, top {k}"
        )

    def top_k(
        self,
        queries: np.ndarray,
        exclude: Csr | Sequence[np.ndarray],
        k: int,
        *,
        approx: bool = False,
        recall_target: float = 0.95,
        progress: Callable[[int], None] | None = None,
    ) -> TopK:
        """The `k` best columns of each query (`[n, d]`), excluding the ids `exclude[i]` for row i;
        `progress(rows)` is called after each batch."""
        queries = np.asarray(queries, np.float32)
        exclude = Csr.of(exclude)
        n = len(queries)
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise ValueError(f"queries must be [n, {self.dim}], got {queries.shape}")
        if len(exclude) != n:
            raise ValueError(f"need one exclusion list per query: {len(exclude)} for {n} queries")
        if k <= 0:
            raise ValueError(f"k must be positive, got {k}")
        ids = np.full((n, k), -1, np.int64)
        scores = np.full((n, k), -np.inf, np.float32)
        if self.scan and not approx:
            self._scan(queries, exclude, k, ids, scores, progress)
            ids[~np.isfinite(scores)] = -1
            return TopK(ids, scores)
        lengths = exclude.lengths()
        short = lengths <= SHORT_EXCLUDE
        for group in (np.flatnonzero(short), np.flatnonzero(~short)):
            if len(group):
                width = 1 << max(0, int(lengths[group].max()) - 1).bit_length()
                self._score(
                    queries, exclude, group, width, k, approx, recall_target, ids, scores, progress
                )
        ids[~np.isfinite(scores)] = -1
        return TopK(ids, scores)

    def _score(
        self,
        queries,
        exclude: Csr,
        group: np.ndarray,
        width: int,
        k: int,
        approx: bool,
        recall_target: float,
        ids: np.ndarray,
        scores: np.ndarray,
        progress,
    ) -> None:
        """Fill `ids`/`scores` of the rows `group`, batch by batch, the next batch dispatched
        before the last one is read back."""
        kernel = _kernel(k, self.shape.cols, bool(approx), float(recall_target))
        rows = self.shape.rows
        pending = None
        for start in range(0, len(group) + rows, rows):
            launched = None
            if start < len(group):
                index = group[start : start + rows]
                q = np.zeros((rows, self.dim), np.float32)
                q[: len(index)] = queries[index]
                ex = exclude.padded(index, rows, width)
                launched = (index, self._launch(kernel, q, ex))
            if pending is not None:
                index, results = pending
                vals, found = self._merge(results, k)
                ids[index], scores[index] = found[: len(index)], vals[: len(index)]
                if progress is not None:
                    progress(len(index))
            pending = launched

    def _scan(self, queries, exclude: Csr, k: int, ids, scores, progress) -> None:
        """Fill `ids`/`scores` by the threshold scan (`threshold_scan`), batch by batch."""
        rows, columns = self.shape.rows, self._sorted
        for start in range(0, len(queries), rows):
            part = exclude.rows(start, min(len(queries), start + rows))
            q = np.zeros((rows, self.dim), np.float32)
            q[: len(part)] = queries[start : start + rows]
            pairs = (np.repeat(np.arange(len(part)), part.lengths()), part.indices)
            tasks = [
                functools.partial(
                    threshold_scan.scan, q, len(part), pairs, k, cols, self._scan_block, device
                )
                for cols, device in zip(columns, self.devices)
            ]
            found = per_core.run(tasks) if self.per_core else [task() for task in tasks]
            vals = np.concatenate([v for v, _ in found], axis=1)
            found = np.concatenate([i for _, i in found], axis=1)
            order = np.lexsort((np.where(found < 0, np.iinfo(np.int64).max, found), -vals))
            order = order[:, :k]
            stop = start + len(part)
            scores[start:stop] = np.take_along_axis(vals, order, axis=1)[: len(part)]
            ids[start:stop] = np.take_along_axis(found, order, axis=1)[: len(part)]
            if progress is not None:
                progress(len(part))

    def _launch(self, kernel, q: np.ndarray, ex: np.ndarray) -> list:
        """Every device's program on one batch: dispatched (accelerators), or run in one pinned
        thread per device (per-core CPU devices, `per_core`)."""

        def task(i: int):
            device = self.devices[i]
            local = np.where(ex >= 0, ex - i * self.span, -1).astype(np.int32)
            local[(local < 0) | (local >= self.span)] = -1
            tables, seeds = self._ranges
            return kernel(
                jax.device_put(q, device),
                tables[i],
                jax.device_put(local, device),
                jax.device_put(np.int32(self.valid[i]), device),
                *seeds[i],
            )

        if self.per_core:
            return per_core.run([functools.partial(task, i) for i in range(len(self.devices))])
        return [task(i) for i in range(len(self.devices))]

    def _merge(self, results: list, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The devices' top K merged: a stable sort by score of their concatenation in id order."""
        vals = [np.asarray(v) for v, _ in results]
        found = [np.asarray(j).astype(np.int64) + i * self.span for i, (_, j) in enumerate(results)]
        if len(results) == 1:
            return vals[0], found[0]
        vals, found = np.concatenate(vals, axis=1), np.concatenate(found, axis=1)
        order = np.argsort(-vals, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(vals, order, axis=1), np.take_along_axis(found, order, axis=1)


def _progress_bar(total: int, enabled: bool | None, desc: str) -> tqdm:
    """A tqdm bar on stderr (by default only on a terminal) with rows per second."""
    enabled = sys.stderr.isatty() if enabled is None else enabled
    return tqdm(
        total=total,
        desc=desc,
        unit="row",
        unit_scale=True,
        file=sys.stderr,
        disable=not enabled,
        leave=False,
        smoothing=0.1,
    )


def top_k_rows(
    col_table: np.ndarray,
    k: int,
    known: Csr | Sequence[np.ndarray],
    *,
    row_table: np.ndarray | None = None,
    row_ids: np.ndarray | None = None,
    config: Any = None,
    exclude_self: bool = False,
    approx: bool = False,
    recall_target: float = 0.95,
    rows_per_batch: int | None = None,
    cols_per_block: int | None = None,
    mesh: Mesh | Sequence[Any] | None = None,
    progress: bool | None = None,
    fold_in_fn: FoldInFn | None = None,
) -> TopK:
    """Top-`k` column ids and scores `[n, k]` of n rows, their known columns excluded.

    - `known`: the known column ids of each row (a `Csr` or a sequence of id arrays), never
      returned.
    - Queries: with `row_table`, row i is `row_table[row_ids[i]]` (zeros for a row without known
      columns: it was never trained); otherwise row i is folded in from `known[i]` (Eq. 4) with
      `fold_in_fn(col_table, lists, config)`, by default the trainer's solve (`model.fold_in`) with
      `config` (a `TrainConfig`), `FOLD_IN_CHUNK` rows at a time.
    - `exclude_self`: also exclude `row_ids[i]` from row i (a graph: row and column ids shared).
    - `approx`: `lax.approx_max_k` per block with `recall_target` instead of the exact selection.
    - `rows_per_batch` x `cols_per_block`: the score buffer of one device (defaults by backend,
      `default_block_shape`); `mesh`: a Mesh or devices to split the columns over (default: every
      local device).
    - `progress`: a tqdm bar on stderr with rows per second (default: when stderr is a terminal).

    Returned ids are int64 (-1 where fewer than `k` columns are admissible, score -inf there), best
    first, ties broken by the lower column id, as a stable sort of the exact scores would.
    """
    known = Csr.of(known)
    n = len(known)
    num_cols = len(col_table)
    if len(known.indices) and (known.indices.min() < 0 or known.indices.max() >= num_cols):
        bad = (
            int(
                np.searchsorted(
                    known.indptr,
                    np.flatnonzero((known.indices < 0) | (known.indices >= num_cols))[0],
                    side="right",
                )
            )
            - 1
        )
        raise ValueError(f"row {bad} names a column outside the table's 0..{num_cols - 1}")
    if (row_table is not None or exclude_self) and (row_ids is None or len(row_ids) != n):
        raise ValueError(f"row_ids: need one id per row ({n}) with row_table or exclude_self")
    if row_ids is not None:
        row_ids = np.asarray(row_ids, np.int64)
        if (
            row_table is not None
            and len(row_ids)
            and not (0 <= row_ids.min() and row_ids.max() < len(row_table))
        ):
            raise ValueError(f"row_ids: outside the row table's 0..{len(row_table) - 1}")
    if row_table is None and fold_in_fn is None and config is None:
        raise ValueError("config: the fold-in needs the training config (or give row_table)")
    scorer = BlockedScorer(
        col_table, mesh, rows_per_batch=rows_per_batch, cols_per_block=cols_per_block
    )
    log.info("top-k of %d rows: %s%s", n, scorer.describe(k), " (approximate)" if approx else "")
    exclude = known.with_ids(row_ids) if exclude_self else known
    ids = np.full((n, k), -1, np.int64)
    scores = np.full((n, k), -np.inf, np.float32)
    if fold_in_fn is None and row_table is None:
        # the trainer's solve, imported only where rows are folded in (it brings the runners)
        from alx_trainer.model import fold_in as fold_in_fn
    began = time.perf_counter()
    with _progress_bar(n, progress, "top-k") as bar:
        for start in range(0, n, FOLD_IN_CHUNK):
            stop = min(n, start + FOLD_IN_CHUNK)
            part = known.rows(start, stop)
            if row_table is not None:
                has = part.lengths() > 0
                queries = np.where(
                    has[:, None], np.asarray(row_table[row_ids[start:stop]], np.float32), 0.0
                )
            else:
                queries = np.asarray(fold_in_fn(col_table, part.lists(), config), np.float32)
            found = scorer.top_k(
                queries,
                exclude.rows(start, stop),
                k,
                approx=approx,
                recall_target=recall_target,
                progress=bar.update,
            )
            ids[start:stop], scores[start:stop] = found
    seconds = time.perf_counter() - began
    log.info("top-k of %d rows in %.1f s (%.0f rows/s)", n, seconds, n / max(seconds, 1e-9))
    return TopK(ids, scores)


def top_k_shared(scores: np.ndarray, k: int, exclude: Csr | Sequence[np.ndarray]) -> TopK:
    """The top `k` of rows that all score column j `scores[j]` (a popularity ranking), each
    without its `exclude[i]`: one stable ranking (ties: the lower id first), then each row's first
    `k` admissible columns; -1 / -inf where fewer are admissible."""
    scores = np.asarray(scores)
    exclude = Csr.of(exclude)
    n, lengths = len(exclude), exclude.lengths()
    width = min(len(scores), k + int(lengths.max(initial=0)))
    head = np.argsort(-scores.astype(np.float64), kind="stable")[:width]
    rank = np.full(len(scores), -1, np.int64)
    rank[head] = np.arange(width)
    ids = np.full((n, k), -1, np.int64)
    step = max(1, (1 << 24) // max(width, 1))  # rows at a time: a bounded [rows, width] mask
    for start in range(0, n, step):
        part = exclude.rows(start, min(n, start + step))
        hit = rank[part.indices]
        blocked = np.zeros((len(part), width), bool)
        blocked[np.repeat(np.arange(len(part)), part.lengths())[hit >= 0], hit[hit >= 0]] = True
        first = np.argsort(blocked, axis=1, kind="stable")[:, :k]
        found = np.where(np.take_along_axis(blocked, first, axis=1), -1, head[first])
        ids[start : start + len(part), : found.shape[1]] = found
    return TopK(ids, np.where(ids >= 0, scores[np.maximum(ids, 0)], -np.inf).astype(np.float32))


def approx_recall(approx_ids: np.ndarray, exact_ids: np.ndarray) -> float:
    """Mean over rows of |approximate top K ∩ exact top K| / |exact top K| (padding -1 ignored;
    rows without an admissible column left out); 1.0 when no row has one."""
    shares = []
    for a, e in zip(np.asarray(approx_ids), np.asarray(exact_ids)):
        e = e[e >= 0]
        if len(e):
            shares.append(len(np.intersect1d(a[a >= 0], e)) / len(e))
    return float(np.mean(shares)) if shares else 1.0
