"""The accelerators' top-K engine: each device scores its column blocks in one compiled loop.

The columns are dealt over the devices in blocks of descending norm (`norm_order`). For each batch
of rows every device runs one compiled program, a loop over its column blocks: a block's scores
`[rows per batch, columns per block]` are computed into the same buffer each time and merged into a
running top K, so memory is bounded by the block shape whatever the column count. The loop ends at
the first block that no live row can take anything from: a score is at most |q| times the block's
largest norm (with a rounding margin, `REACH_MARGIN`), and once that is below every row's running
K-th best, so is every later block. On power-law data most blocks are never scored (`blocks` says
how many were). The devices' top K are merged on the host (`engine.merge`).

Exclusions travel as they are given: the batch's (row, column id) pairs, flat, padded to a fixed
length (`EXCLUDE_PER_ROW` per row of the batch, or the next power of two of the longest list), so
one program serves every batch (a batch holds fewer rows when its lists are long). Each block finds
the excluded ids among its own (a block's ids are ascending: a binary search) and sets their scores
to -inf: no per-column table lookup on the host, nothing as wide as the longest list times the rows.

Exact selection in a block: columns form groups of `GROUP` (in ascending id order inside a
block); a group can hold an entry of the final top K only if its best score reaches the running
K-th best (equal scores: the lower id wins, which may be the new one). When no group of any row of
the batch does so, nothing is merged; when at most M do (M from `TIERS`), the M best groups are
gathered and merged; otherwise the K best groups are (a row's K best entries lie in its K best
groups: each group ranked above an entry's own holds a better entry), so no block is ranked whole
unless it has at most K groups. All are exact; the first ones are cheap once the running top K has
filled, which is most blocks. Merges sort by score, then id (`engine`'s order). The approximate
option selects per block with `lax.approx_max_k`.
"""

from __future__ import annotations

import copy
import functools
import math
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from alx_trainer import execution
from alx_trainer.compile_cache import kept_program
from alx_trainer.evaluation import engine, norm_order
from webgraph_contract.ragged import RaggedRows

# columns per group of the exact selection (a block holds a whole number of groups)
GROUP = 32
# groups gathered per row when every row of a batch has at most this many candidates
TIERS = (4, 16)
# a score computed from inputs rounded to bfloat16 or TF32 exceeds |q| |h| by less than this share
REACH_MARGIN = 2.0**-6
# excluded ids a batch carries per row (more when one row has more): a batch of long lists holds
# fewer rows
EXCLUDE_PER_ROW = 128


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
            # ties: the lower group, so the lower ids
            _, picked = jax.lax.top_k(best, m)
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
    # the first tier that holds every row's groups
    index = jnp.searchsorted(jnp.asarray((0,) + tiers), need)
    unchanged = lambda: (run_vals, run_ids)
    return jax.lax.switch(index, [unchanged] + [gathered(m) for m in tiers] + [last])


def _excluded(scores, ids, ex_rows, ex_ids):
    """`scores` [B, C] of the block's columns `ids` (ascending, -1 padding last) with the pairs
    (ex_rows[e], ex_ids[e]) set to -inf (ex_ids -1: no pair): a binary search of each excluded id
    among the block's, in place on the product."""
    cols = ids.shape[0]
    keys = jnp.where(ids < 0, jnp.iinfo(ids.dtype).max, ids)
    at = jnp.minimum(jnp.searchsorted(keys, ex_ids), cols - 1)
    local = jnp.where((ex_ids >= 0) & (keys[at] == ex_ids), at, cols)
    return scores.at[ex_rows, local].set(-jnp.inf, mode="drop")


@kept_program
def _kernel(k: int, cols: int, approx: bool, recall_target: float):
    """One device's program: (queries [B, d], table [blocks * cols, d] and its column ids
    (`norm_order.Share`), block norms [blocks], excluded pairs [2, E] (rows, column ids), reach [B]
    (|q| with a rounding margin, 0 for a zero query: not live)) -> (running top K values [B, k],
    column ids [B, k], blocks scored). Blocks are scored in order until none can hold a score
    that reaches a live row's K-th best: a score is at most reach * the block's norm."""

    def run(queries, table, col_ids, block_norms, excluded, reach):
        b, blocks = queries.shape[0], block_norms.shape[0]
        live = reach > 0

        def more(state):
            j, (run_vals, _) = state
            bound = reach * block_norms[jnp.minimum(j, blocks - 1)]
            return (j < blocks) & jnp.any(live & (bound >= run_vals[:, -1]))

        def block(state):
            j, (run_vals, run_ids) = state
            start = j * cols
            part = jax.lax.dynamic_slice_in_dim(table, start, cols)
            ids = jax.lax.dynamic_slice_in_dim(col_ids, start, cols)
            scores = jnp.dot(queries, part.T, preferred_element_type=jnp.float32)
            scores = _excluded(scores, ids, excluded[0], excluded[1])
            return j + 1, _merge_block(run_vals, run_ids, scores, ids, k, approx, recall_target)

        init = (jnp.full((b, k), -jnp.inf, jnp.float32), jnp.full((b, k), -1, jnp.int32))
        j, (vals, ids) = jax.lax.while_loop(more, block, (jnp.int32(0), init))
        return vals, ids, j

    return jax.jit(run)


def batches(lengths: np.ndarray, rows: int, width: int) -> list[tuple[int, int]]:
    """Consecutive row ranges [lo, hi) of at most `rows` rows whose lists hold at most `width` ids
    in all (a row longer than `width` is not allowed)."""
    ends = np.cumsum(lengths)
    out, lo = [], 0
    while lo < len(lengths):
        before = ends[lo - 1] if lo else 0
        hi = int(np.searchsorted(ends, before + width, side="right"))
        hi = min(max(hi, lo + 1), lo + rows)
        out.append((lo, hi))
        lo = hi
    return out


class BlockLoop(engine.Engine):
    """The block loop over columns dealt to `devices` (accelerators; CPU devices too, in pinned
    threads when they are per-core devices); `approx`: `lax.approx_max_k` per block with
    `recall_target` instead of the exact selection."""

    def __init__(
        self,
        col_table: np.ndarray,
        devices: Sequence[Any] | None = None,
        shape: engine.BlockShape | None = None,
        *,
        approx: bool = False,
        recall_target: float = 0.95,
    ):
        super().__init__(col_table, devices, shape)
        per_device = math.ceil(max(self.num_cols, 1) / len(self.devices))
        # no block wider than a device's share
        self.shape = self.shape._replace(cols=min(self.shape.cols, -(-per_device // GROUP) * GROUP))
        self.approx, self.recall_target = bool(approx), float(recall_target)
        self.per_core = execution.per_core_applies(self.devices) and len(self.devices) > 1
        # excluded ids carried per batch: grows (one more compile) only for a longer list
        self.exclude_width = self.shape.rows * EXCLUDE_PER_ROW

    @functools.cached_property
    def _shares(self) -> list[tuple[Any, Any, Any]]:
        """(table, column ids int32, block norms) of each device's share (`norm_order.deal`)."""
        shares = norm_order.deal(norm_order.norms(self._table), len(self.devices), self.shape.cols)
        out = []
        for share, device in zip(shares, self.devices):
            part = norm_order.gather_rows(self._table, share.ids)
            arrays = (part, share.ids.astype(np.int32), share.block_norms)
            out.append(tuple(jax.device_put(a, device) for a in arrays))
        return out

    def place(self) -> None:
        _ = self._shares

    def approximate(self, recall_target: float = 0.95) -> BlockLoop:
        """This engine selecting by `lax.approx_max_k` with `recall_target`, on the same layout
        once placed (the columns are not put on the devices twice)."""
        other = copy.copy(self)
        other.approx, other.recall_target, other.blocks = True, float(recall_target), [0, 0]
        return other

    def describe(self, k: int) -> str:
        return super().describe(k) + (" approximate" if self.approx else "")

    def _search(self, queries, exclude: RaggedRows, k: int, ids, scores, progress) -> None:
        """Batch by batch, the next batch dispatched before the last one is read back."""
        kernel = _kernel(k, self.shape.cols, self.approx, self.recall_target)
        lengths = exclude.lengths
        longest = int(lengths.max(initial=0))
        if longest > self.exclude_width:
            self.exclude_width = 1 << (longest - 1).bit_length()
        pending = None
        for span in batches(lengths, self.shape.rows, self.exclude_width) + [None]:
            launched = (
                None if span is None else (span, self._launch(kernel, queries, exclude, *span))
            )
            if pending is not None:
                (lo, hi), results = pending
                vals, found = self._merge(results, k)
                ids[lo:hi], scores[lo:hi] = found[: hi - lo], vals[: hi - lo]
                if progress is not None:
                    progress(hi - lo)
            pending = launched

    def _launch(self, kernel, queries, exclude: RaggedRows, lo: int, hi: int) -> list:
        """Every device's program on rows [lo, hi): dispatched (accelerators), or run in one pinned
        thread per device (per-core CPU devices, `execution.run_per_core`). Rows of a zero query
        (padding included) do not hold the loop: `Engine.top_k` answers them."""
        rows, width = self.shape.rows, self.exclude_width
        q = np.zeros((rows, self.dim), np.float32)
        q[: hi - lo] = queries[lo:hi]
        qnorm = np.linalg.norm(q.astype(np.float64), axis=1)
        reach = norm_order.round_up(qnorm * (1 + REACH_MARGIN))
        part = exclude.take(lo, hi)
        # rows (0 for padding) and column ids (-1 for padding) of the excluded pairs
        excluded = np.zeros((2, width), np.int32)
        excluded[1, part.nnz :] = -1
        excluded[0, : part.nnz] = np.repeat(np.arange(hi - lo, dtype=np.int32), part.lengths)
        excluded[1, : part.nnz] = part.ids

        # the layout, made here (once) rather than in the devices' threads
        shares = self._shares

        def task(i: int):
            device = self.devices[i]
            q_on, excluded_on, reach_on = (jax.device_put(a, device) for a in (q, excluded, reach))
            return kernel(q_on, *shares[i], excluded_on, reach_on)

        if self.per_core:
            return execution.run_per_core(
                [functools.partial(task, i) for i in range(len(self.devices))]
            )
        return [task(i) for i in range(len(self.devices))]

    def _merge(self, results: list, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The devices' top K merged (`engine.merge`); counts the blocks they scored."""
        vals = np.concatenate([np.asarray(v) for v, _, _ in results], axis=1)
        found = np.concatenate([np.asarray(j).astype(np.int64) for _, j, _ in results], axis=1)
        self.blocks[0] += sum(int(n) for _, _, n in results)
        self.blocks[1] += sum(norms.shape[0] for _, _, norms in self._shares)
        return engine.merge(vals, found, k) if len(results) > 1 else (vals, found)
