"""The best K columns of many rows against every column of a table, in row batches and column
blocks.

`top_k_rows` is the entry point shared by evaluation, predictions for new pages and `export --topk`:
rows given by their known column ids (CSR), folded in (paper Eq. 4) or taken from the trained row
table, ranked against all columns with their known columns excluded.

How (`BlockedScorer`): the columns are dealt over the devices in blocks of descending norm
(`norm_order`). For each batch of rows every device runs one compiled program, a loop over its
column blocks: a block's scores `[rows per batch, columns per block]` are computed into the same
buffer each time and merged into a running top K, so memory is bounded by the block shape whatever
the column count. The loop ends at the first block that no live row can take anything from: a
score is at most |q| times the block's largest norm (with a rounding margin, `REACH_MARGIN`), and
once that is below every row's running K-th best, so is every later block. On power-law data most
blocks are never scored (the log and `BlockedScorer.blocks` say how many were). A zero query
scores 0 everywhere: its top K, the lowest admissible ids, is answered on the host, for both
searches. The devices'
top K are merged on the host. Shapes are fixed (the last batch is padded), so a call compiles once
(twice when some rows have many known columns: those are batched apart with a wider exclusion
list). CPU devices take the threshold scan instead (`threshold_scan`) unless `scan=False`.

Exact selection in a block: columns form groups of `GROUP` (in ascending id order inside a
block); a group can hold an entry of the final top K only if its best score reaches the running
K-th best (equal scores: the lower id wins, which may be the new one). When no group of any row of
the batch does so, nothing is merged; when at most M do (M from `TIERS`), the M best groups are
gathered and merged; otherwise the K best groups are (a row's K best entries lie in its K best
groups: each group ranked above an entry's own holds a better entry), so no block is ranked whole
unless it has at most K groups. All are exact; the first ones are cheap once the running top K has
filled, which is most blocks. Merges sort by score, then id, as a stable sort of the scores (the
brute-force ranking) does. The approximate option selects per block with `lax.approx_max_k`;
`approx_recall` measures it against the exact top K.
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

from alx_trainer.evaluation import norm_order, threshold_scan
from alx_trainer.ops import per_core
from webgraph_contract.ragged import RaggedRows

log = logging.getLogger(__name__)

GROUP = 32  # columns per group of the exact selection (a block holds a whole number of groups)
TIERS = (
    4,
    16,
)  # groups gathered per row when every row of a batch has at most this many candidates
REACH_MARGIN = 2.0**-6  # a score computed from inputs rounded to bfloat16 or TF32 exceeds
# |q| |h| by less than this share
SHORT_EXCLUDE = (
    64  # rows with more known columns than this are batched apart (a wider exclusion list)
)
# rows folded in per call of the trainer's solve: each call plans its own batch shapes, which
# compile anew when they differ, so few large calls (1M rows of d = 128: 0.5 GB of queries)
FOLD_IN_CHUNK = 1 << 20
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
    """The running top K with a block's candidates: best first, equal scores by the lower id."""
    neg, ids = jax.lax.sort(
        (-jnp.concatenate([run_vals, vals], axis=1), jnp.concatenate([run_ids, ids], axis=1)),
        dimension=1,
        num_keys=2,
    )
    return -neg[:, :k], ids[:, :k]


def _merge_block(run_vals, run_ids, scores, ids, k: int, approx: bool, recall_target: float):
    """The running top K (values, column ids) [B, k] merged with a `[B, C]` block of scores of the
    columns `ids` [C] (ascending, -1 for padding, whose scores do not count); see the module
    docstring. Only the candidates a branch selects are merged: none when no group of any row can
    enter, the best M groups of each row when every row has at most M that can (`TIERS`), else
    the best K groups (a row's K best entries lie in its K best groups, whatever the ties), or
    the whole block where it has no more than K groups. Padding is masked where scores are read
    (the group maxima, the gathered candidates), so the block is written once and read once."""
    b, c = scores.shape
    bias = jnp.where(ids >= 0, 0.0, -jnp.inf)
    if approx:
        vals, pos = jax.lax.approx_max_k(scores + bias, min(k, c), recall_target=recall_target)
        return _merge(run_vals, run_ids, vals, ids[pos], k)
    g = GROUP if c % GROUP == 0 else c
    groups = scores.reshape(b, c // g, g)
    group_bias = bias.reshape(c // g, g)
    best = (groups + group_bias).max(axis=2)

    def gathered(m: int):
        def select():
            _, picked = jax.lax.top_k(best, m)  # ties: the lower group, so the lower ids
            vals = jnp.take_along_axis(groups, picked[:, :, None], axis=1) + group_bias[picked]
            pos = (picked[:, :, None] * g + jnp.arange(g, dtype=picked.dtype)).reshape(b, m * g)
            return _merge(run_vals, run_ids, vals.reshape(b, m * g), ids[pos], k)

        return select

    def whole():
        vals, pos = jax.lax.top_k(scores + bias, min(k, c))
        return _merge(run_vals, run_ids, vals, ids[pos], k)

    last = gathered(k) if k < c // g else whole
    tiers = tuple(m for m in TIERS if m < min(k, c // g))
    if not tiers:
        return last()
    # a group that ties the running K-th best may hold a lower id than it: it can enter
    need = jnp.max(jnp.sum(best >= run_vals[:, -1:], axis=1))
    index = jnp.searchsorted(
        jnp.asarray((0,) + tiers), need
    )  # the first tier that holds every row's groups
    unchanged = lambda: (run_vals, run_ids)
    return jax.lax.switch(index, [unchanged] + [gathered(m) for m in tiers] + [last])


@functools.lru_cache(maxsize=32)
def _kernel(k: int, cols: int, approx: bool, recall_target: float):
    """One device's program: (queries [B, d], table [blocks * cols, d] and its column ids
    (`norm_order.Share`), block norms [blocks], exclude [B, E] positions in the table (-1: none),
    reach [B] (|q| with a rounding margin), live [B]) -> (running top K values [B, k], column ids
    [B, k], blocks scored). Blocks are scored in order until none can hold a score that reaches a
    live row's K-th best: a score is at most reach * the block's norm."""

    def run(queries, table, col_ids, block_norms, exclude, reach, live):
        b, blocks = queries.shape[0], block_norms.shape[0]
        rows = jnp.arange(b)[:, None]

        def more(state):
            j, (run_vals, _) = state
            bound = reach * block_norms[jnp.minimum(j, blocks - 1)]
            return (j < blocks) & jnp.any(live & (bound >= run_vals[:, -1]))

        def block(state):
            j, (run_vals, run_ids) = state
            start = j * cols
            part = jax.lax.dynamic_slice_in_dim(table, start, cols)
            scores = jnp.dot(queries, part.T, preferred_element_type=jnp.float32)
            local = exclude - start
            local = jnp.where((exclude >= 0) & (local >= 0) & (local < cols), local, cols)
            scores = scores.at[rows, local].set(-jnp.inf, mode="drop")  # in place on the product
            ids = jax.lax.dynamic_slice_in_dim(col_ids, start, cols)
            return j + 1, _merge_block(run_vals, run_ids, scores, ids, k, approx, recall_target)

        init = (jnp.full((b, k), -jnp.inf, jnp.float32), jnp.full((b, k), -1, jnp.int32))
        j, (vals, ids) = jax.lax.while_loop(more, block, (jnp.int32(0), init))
        return vals, ids, j

    return jax.jit(run)


class BlockedScorer:
    """A column table dealt over devices in blocks of descending norm, answering exact (or
    approximate) top-K queries in batches of `shape.rows` rows and blocks of `shape.cols`
    columns."""

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
        self.scan = self.devices[0].platform == "cpu" if scan is None else scan
        self._table = table
        self.per_core = per_core.applies(self.devices) and len(self.devices) > 1
        self.blocks = [0, 0]  # column blocks scored, and in the shares, over the batches so far

    @functools.cached_property
    def _shares(self) -> tuple[list, np.ndarray, np.ndarray]:
        """The block kernel's columns (`norm_order.deal`): (table, column ids, block norms) on each
        device, and each column's device and position there."""
        shares = norm_order.deal(norm_order.norms(self._table), len(self.devices), self.shape.cols)
        on_devices = []
        for share, device in zip(shares, self.devices):
            part = norm_order.gather_rows(self._table, share.ids)
            arrays = (part, share.ids.astype(np.int32), share.block_norms)
            on_devices.append(tuple(jax.device_put(a, device) for a in arrays))
        return on_devices, *norm_order.positions(shares, self.num_cols)

    @functools.cached_property
    def _sorted(self) -> list[threshold_scan.SortedColumns]:
        """The threshold scan's columns: by descending norm, dealt round-robin over devices."""
        return threshold_scan.sorted_columns(self._table, self.devices, self._scan_block)

    @property
    def _scan_block(self) -> int:
        return threshold_scan.block_width(self.shape.cols)

    def place(self) -> None:
        """Lay the columns out on the devices now (else the first query does): the layout of the
        exact search this scorer runs, the threshold scan's or the block loop's."""
        _ = self._sorted if self.scan else self._shares

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
        else:
            lengths = exclude.lengths()
            short = lengths <= SHORT_EXCLUDE
            for group in (np.flatnonzero(short), np.flatnonzero(~short)):
                if len(group):
                    width = 1 << max(0, int(lengths[group].max()) - 1).bit_length()
                    self._score(
                        queries,
                        exclude,
                        group,
                        width,
                        k,
                        approx,
                        recall_target,
                        ids,
                        scores,
                        progress,
                    )
        ids[~np.isfinite(scores)] = -1
        for row in np.flatnonzero(~queries.any(axis=1)):  # neither search takes zero queries
            lowest = _lowest_admissible(exclude.row(row), k, self.num_cols)
            ids[row, : len(lowest)], scores[row, : len(lowest)] = lowest, 0.0
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
            vals, found = _best_of(vals, found, k)
            stop = start + len(part)
            scores[start:stop], ids[start:stop] = vals[: len(part)], found[: len(part)]
            if progress is not None:
                progress(len(part))

    def _launch(self, kernel, q: np.ndarray, ex: np.ndarray) -> list:
        """Every device's program on one batch: dispatched (accelerators), or run in one pinned
        thread per device (per-core CPU devices, `per_core`). Rows of a zero query (padding
        included) do not hold the scan: `_score` answers them."""
        tables, part, where = self._shares
        qnorm = np.linalg.norm(q.astype(np.float64), axis=1)
        reach = norm_order.round_up(qnorm * (1 + REACH_MARGIN))
        on, at = part[ex], where[ex]  # padding (-1): share -1

        def task(i: int):
            device = self.devices[i]
            local = np.where(on == i, at, -1).astype(np.int32)
            return kernel(
                jax.device_put(q, device),
                *tables[i],
                *(jax.device_put(a, device) for a in (local, reach, qnorm > 0)),
            )

        if self.per_core:
            return per_core.run([functools.partial(task, i) for i in range(len(self.devices))])
        return [task(i) for i in range(len(self.devices))]

    def _merge(self, results: list, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The devices' top K merged (`_best_of`); counts the blocks they scored."""
        vals = np.concatenate([np.asarray(v) for v, _, _ in results], axis=1)
        found = np.concatenate([np.asarray(j).astype(np.int64) for _, j, _ in results], axis=1)
        self.blocks[0] += sum(int(n) for _, _, n in results)
        self.blocks[1] += sum(len(norms) for _, _, norms in self._shares[0])
        return _best_of(vals, found, k) if len(results) > 1 else (vals, found)


def _best_of(vals: np.ndarray, found: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The `k` best (score, id) of each row of candidates from several devices: best first,
    equal scores by the lower id, padding (id -1) last."""
    order = np.lexsort((np.where(found < 0, np.iinfo(np.int64).max, found), -vals))[:, :k]
    return np.take_along_axis(vals, order, axis=1), np.take_along_axis(found, order, axis=1)


def _lowest_admissible(excluded: np.ndarray, k: int, num_cols: int) -> np.ndarray:
    """The `k` lowest column ids not in `excluded` (fewer when fewer are admissible): a zero
    query's top K, every score being 0."""
    first = np.arange(min(num_cols, k + len(excluded)))
    return first[~np.isin(first, excluded)][:k]


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
      `default_block_shape`; a given `rows_per_batch` is capped at the rows scored in one call);
      `mesh`: a Mesh or devices to split the columns over (default: every local device).
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
    if rows_per_batch:  # no batch larger than the rows one call scores
        rows_per_batch = min(rows_per_batch, max(1, min(n, FOLD_IN_CHUNK)))
    scorer = BlockedScorer(
        col_table, mesh, rows_per_batch=rows_per_batch, cols_per_block=cols_per_block
    )
    log.info("top-k of %d rows: %s%s", n, scorer.describe(k), " (approximate)" if approx else "")
    exclude = known.with_ids(row_ids) if exclude_self else known
    ids = np.full((n, k), -1, np.int64)
    scores = np.full((n, k), -np.inf, np.float32)
    if fold_in_fn is None and row_table is None:
        # the trainer's solve, imported only where rows are folded in (it brings the runners)
        from alx_trainer.model import fold_in

        fold = lambda part: fold_in(col_table, RaggedRows(np.arange(len(part)), *part), config)
    else:
        fold = lambda part: fold_in_fn(col_table, part.lists(), config)
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
                queries = np.asarray(fold(part), np.float32)
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
    scored, blocks = scorer.blocks
    if blocks:
        log.info(
            "scored %d of %d column blocks (%.1f%%): the norm bound ruled out the rest",
            scored,
            blocks,
            100 * scored / blocks,
        )
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
