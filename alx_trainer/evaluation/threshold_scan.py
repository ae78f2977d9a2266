"""The CPU devices' top-K engine, a threshold scan: the devices flag, the host ranks.

Each device holds its share of the columns in blocks of descending norm (`norm_order`: dealt
round-robin from one global norm order). A batch of rows is scanned block by block in one compiled
loop that only scores a block and compares the maximum of each group of `GROUP` columns with the
row's threshold: the answer is one bit per group, packed, `[rows, blocks, words]`; no top K is taken
on the device. The host re-scores the flagged groups in float64, keeps those at or above the running
K-th best and merges them into a running top K (ties: the lower column id first), which raises the
threshold of the next call. Calls cover 1, 2, 4, ... up to `CHUNK_BLOCKS` blocks, after the
`SEED_COLUMNS` columns of largest norm are ranked densely on the host, so the threshold is good
before the long calls.

Exactness: a group is flagged when its float32 maximum reaches the float64 K-th best lowered by a
rounding margin (4 d eps |q| max |h|), so every column that can enter the top K is re-scored. The
loop stops once no row can reach its threshold any more: a score is at most |q| |h|, and block
bounds never rise along a device's columns. Rows whose query is zero are left empty: every score
is 0, so their top K is the lowest admissible ids, which `engine.Engine.top_k` gives them.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from alx_trainer import execution
from alx_trainer.compile_cache import kept_program
from alx_trainer.evaluation import engine, norm_order
from webgraph_contract.ragged import RaggedRows

# columns per flag bit
GROUP = 8
# most blocks one device call scans before the host merges
CHUNK_BLOCKS = 64
# flagged groups re-scored on the host at a time
RESCORE_GROUPS = 1 << 14
# columns of largest norm ranked densely on the host: the first threshold
SEED_COLUMNS = 1024
EPS32 = float(np.finfo(np.float32).eps)


class SortedColumns(NamedTuple):
    """One device's columns in blocks of descending norm (`norm_order.Share`), zero padded to
    whole blocks."""

    # jax array [span, d] on the device
    table: Any
    # float32 [span, d], the same in host memory (re-scoring)
    host: np.ndarray
    # int64 [span]: the column id at each position (-1: padding)
    ids: np.ndarray
    # int64 [num_cols]: each column's position here (-1: another device)
    position: np.ndarray
    # this device's columns (the rest of `ids` is padding)
    real: int
    # jax array float32 [blocks]: the largest norm of each block
    block_norms: Any
    max_norm: float


def block_width(cols: int) -> int:
    """The scan's block width for a requested one: a whole number of groups."""
    return max(1, -(-cols // GROUP)) * GROUP


def sorted_columns(table: np.ndarray, devices: list, cols: int) -> list[SortedColumns]:
    """Columns by descending norm dealt over `devices` (`norm_order.deal`), each share padded to
    a whole number of `cols`-wide blocks (`block_width`)."""
    num_cols = len(table)
    shares = norm_order.deal(norm_order.norms(table), len(devices), cols)
    part, where = norm_order.positions(shares, num_cols)
    out = []
    for i, (share, device) in enumerate(zip(shares, devices)):
        host = norm_order.gather_rows(table, share.ids)
        out.append(
            SortedColumns(
                jax.device_put(host, device),
                host,
                share.ids,
                np.where(part[:num_cols] == i, where[:num_cols], -1),
                int(np.count_nonzero(share.ids >= 0)),
                jax.device_put(share.block_norms, device),
                float(share.block_norms.max(initial=0.0)),
            )
        )
    return out


@kept_program
def _scan_kernel(cols: int):
    """(queries [B, d], table, block_norms, threshold [B], reach [B], first block, block count)
    -> (flags uint32 [B, CHUNK_BLOCKS, words], blocks scanned): bit g of a block's words is set
    when group g's largest score reaches the row's threshold. The loop ends early once
    `reach * block norm` is below every row's threshold."""
    groups = cols // GROUP
    words = -(-groups // 32)
    shifts = np.arange(32, dtype=np.uint32)

    def run(queries, table, block_norms, threshold, reach, first, count):
        b = queries.shape[0]

        def live(state):
            j, _ = state
            bound = reach * block_norms[jnp.minimum(first + j, block_norms.shape[0] - 1)]
            return (j < count) & jnp.any(bound >= threshold)

        def body(state):
            j, flags = state
            part = jax.lax.dynamic_slice_in_dim(table, (first + j) * cols, cols)
            scores = jnp.dot(queries, part.T, preferred_element_type=jnp.float32)
            hit = scores.reshape(b, groups, GROUP).max(axis=2) >= threshold[:, None]
            hit = jnp.pad(hit, ((0, 0), (0, words * 32 - groups)))
            packed = jnp.sum(
                hit.reshape(b, words, 32).astype(jnp.uint32) << shifts, axis=2, dtype=jnp.uint32
            )
            return j + 1, jax.lax.dynamic_update_slice(flags, packed[:, None, :], (0, j, 0))

        flags = jnp.zeros((b, CHUNK_BLOCKS, words), jnp.uint32)
        j, flags = jax.lax.while_loop(live, body, (jnp.int32(0), flags))
        return flags, j

    return jax.jit(run)


class RunningTopK:
    """The best `k` (score, id) of each of `n` rows seen so far, in `engine.merge`'s order."""

    def __init__(self, n: int, k: int):
        self.k = k
        self.vals = np.full((n, k), -np.inf, np.float64)
        self.ids = np.full((n, k), -1, np.int64)

    def kth(self) -> np.ndarray:
        """Each row's K-th best score (-inf while it has fewer than K)."""
        return self.vals[:, -1]

    def merge(self, rows: np.ndarray, scores: np.ndarray, ids: np.ndarray) -> None:
        """Add candidates (row, score, id); a column must not be added twice."""
        if not len(rows):
            return
        if np.any(rows[1:] < rows[:-1]):
            order = np.argsort(rows, kind="stable")
            rows, scores, ids = rows[order], scores[order], ids[order]
        touched, start, count = np.unique(rows, return_index=True, return_counts=True)
        width = self.k + int(count.max())
        vals = np.full((len(touched), width), -np.inf)
        found = np.full((len(touched), width), -1, np.int64)
        vals[:, : self.k], found[:, : self.k] = self.vals[touched], self.ids[touched]
        at = np.repeat(np.arange(len(touched)), count)
        slot = self.k + np.arange(len(rows)) - np.repeat(start, count)
        vals[at, slot], found[at, slot] = scores, ids
        self.vals[touched], self.ids[touched] = engine.merge(vals, found, self.k)


class ThresholdScan(engine.Engine):
    """The threshold scan over columns dealt to `devices` (CPU devices, in one pinned thread
    each when they are per-core devices); blocks are `shape.cols` rounded up to whole groups."""

    def __init__(
        self,
        col_table: np.ndarray,
        devices: Sequence[Any] | None = None,
        shape: engine.BlockShape | None = None,
    ):
        super().__init__(col_table, devices, shape)
        # no block wider than a device's share
        share = block_width(-(-max(self.num_cols, 1) // len(self.devices)))
        self.shape = self.shape._replace(cols=min(block_width(self.shape.cols), share))
        self.per_core = execution.per_core_applies(self.devices) and len(self.devices) > 1

    @functools.cached_property
    def _sorted(self) -> list[SortedColumns]:
        """The columns by descending norm, dealt round-robin over the devices."""
        return sorted_columns(self._table, self.devices, self.shape.cols)

    def place(self) -> None:
        _ = self._sorted

    def _search(self, queries, exclude: RaggedRows, k: int, ids, scores, progress) -> None:
        """Batch by batch: every device scans its share, the host merges (`engine.merge`)."""
        rows, columns = self.shape.rows, self._sorted
        for start in range(0, len(queries), rows):
            part = exclude.take(start, min(len(queries), start + rows))
            q = np.zeros((rows, self.dim), np.float32)
            q[: len(part)] = queries[start : start + rows]
            pairs = (np.repeat(np.arange(len(part)), part.lengths), part.ids.astype(np.int64))
            tasks = [
                functools.partial(scan, q, len(part), pairs, k, cols, self.shape.cols, device)
                for cols, device in zip(columns, self.devices)
            ]
            found = execution.run_per_core(tasks) if self.per_core else [task() for task in tasks]
            vals = np.concatenate([v for v, _ in found], axis=1)
            found = np.concatenate([i for _, i in found], axis=1)
            vals, found = engine.merge(vals, found, k)
            stop = start + len(part)
            scores[start:stop], ids[start:stop] = vals[: len(part)], found[: len(part)]
            if progress is not None:
                progress(len(part))


def scan(
    queries: np.ndarray,
    real: int,
    excluded: tuple[np.ndarray, np.ndarray],
    k: int,
    cols: SortedColumns,
    block: int,
    device: Any,
) -> tuple[np.ndarray, np.ndarray]:
    """The exact top `k` (float64 scores, ids; -inf / -1 padding) of the first `real` rows of
    `queries` [B, d] (the rest: padding, left empty, as are rows whose query is zero: the caller
    answers them) over one device's columns, excluding the (row, column id) pairs `excluded`."""
    b, d = queries.shape
    top = RunningTopK(b, k)
    q64 = queries.astype(np.float64)
    qnorm = np.linalg.norm(q64, axis=1)
    live = (qnorm > 0) & (np.arange(b) < real)
    at = cols.position[excluded[1]]
    mine = at >= 0
    ex_rows, ex_pos = excluded[0][mine], at[mine]
    ex_keys = np.sort(ex_rows * len(cols.ids) + ex_pos)
    if not live.any():
        return top.vals, top.ids
    _dense_block(top, q64, live, cols, ex_rows, ex_pos)
    margin = 4 * d * EPS32 * qnorm * cols.max_norm
    reach = np.where(live, norm_order.round_up(qnorm * (1 + 8 * d * EPS32)), 0.0).astype(np.float32)
    reach = jax.device_put(reach, device)
    kernel = _scan_kernel(block)
    q_dev = jax.device_put(queries, device)
    blocks = len(cols.ids) // block if cols.real > SEED_COLUMNS else 0
    first, count = 0, 1
    while first < blocks:
        count = min(count, blocks - first, CHUNK_BLOCKS)
        kth = top.kth()
        threshold = np.where(live, norm_order.round_down(kth - margin), np.inf).astype(np.float32)
        flags, done = kernel(
            q_dev,
            cols.table,
            cols.block_norms,
            jax.device_put(threshold, device),
            reach,
            np.int32(first),
            np.int32(count),
        )
        done = int(done)
        _rescore(top, queries, threshold, np.asarray(flags)[:, :done], first, block, cols, ex_keys)
        if done < count:
            break
        first += count
        count *= 2
    return top.vals, top.ids


def _contains(sorted_keys: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Which `keys` are in the ascending array `sorted_keys`."""
    if not len(sorted_keys):
        return np.zeros(len(keys), bool)
    at = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
    return sorted_keys[at] == keys


def _dense_block(top, q64, live, cols: SortedColumns, ex_rows, ex_pos) -> None:
    """Rank the first `SEED_COLUMNS` positions (the first blocks: the largest norms) of the `live`
    rows on the host, in float64: the first threshold."""
    seed = min(SEED_COLUMNS, len(cols.ids))
    scores = q64 @ cols.host[:seed].astype(np.float64).T
    first = ex_pos < seed
    scores[ex_rows[first], ex_pos[first]] = -np.inf
    scores[:, cols.ids[:seed] < 0] = -np.inf
    scores[~live] = -np.inf
    k = min(top.k, seed)
    kth = -np.partition(-scores, k - 1, axis=1)[:, k - 1]
    rows, at = np.nonzero((scores >= kth[:, None]) & np.isfinite(scores))
    top.merge(rows, scores[rows, at], cols.ids[at])


def _rescore(top, queries, threshold, flags, first, block, cols: SortedColumns, ex_keys) -> None:
    """Re-score the flagged groups: in float32 against the device's `threshold` (the rounding
    margin below the K-th best), then the columns that pass in float64, merging those that can
    enter the top K."""
    rows, j, w = np.nonzero(flags)
    if not len(rows):
        return
    bits = np.unpackbits(
        flags[rows, j, w].astype("<u4").view(np.uint8).reshape(-1, 4), axis=1, bitorder="little"
    )
    at, bit = np.nonzero(bits)
    groups = (first + j[at]) * (block // GROUP) + w[at] * 32 + bit
    # the first groups were ranked by `_dense_block`
    fresh = groups >= SEED_COLUMNS // GROUP
    rows, groups = rows[at][fresh], groups[fresh]
    by_group = cols.host.reshape(-1, GROUP, cols.host.shape[1])
    for lo in range(0, len(rows), RESCORE_GROUPS):
        r, g = rows[lo : lo + RESCORE_GROUPS], groups[lo : lo + RESCORE_GROUPS]
        rough = np.matmul(by_group[g], queries[r][:, :, None])[:, :, 0]
        n, c = np.nonzero(rough >= threshold[r][:, None])
        r, positions = r[n], g[n] * GROUP + c
        scores = np.einsum(
            "nd,nd->n", cols.host[positions].astype(np.float64), queries[r].astype(np.float64)
        )
        keep = (
            (scores >= top.kth()[r])
            & (cols.ids[positions] >= 0)
            & ~_contains(ex_keys, r * len(cols.ids) + positions)
        )
        top.merge(r[keep], scores[keep], cols.ids[positions[keep]])
