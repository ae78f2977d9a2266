"""Rows longer than one device batch: their statistics summed over several batches, then one solve.

Two forms: `solve_explicit` (any layout: a part of each row's d x d statistics per batch from
`kernels.make_long_stats`, summed on the host in float64, then solved by
`kernels.make_solve_scatter`) and `solve_cg` ('owner' layout with matrix-free CG, one process:
the rows go in groups (`plan_groups`) over the device threads, each group one call
of `long_cg`, which gathers the group's fixed-table rows once and runs r0, the CG steps and the
loss on the device in float32, as a normal row's solve).

Groups. Which long rows are solved together: groups of whole rows whose gathered block is bounded.

A long row (more than `batch_pieces` pieces) arrives as whole device batches of its own. Its
matrix-free CG reads every entry five times (r0, three matvecs, the loss), and gathering a
fixed-table row is a random read, so a group of rows is gathered once into one contiguous
float32 block that all five passes read (`long_cg`). Sizes are counted in batches and
are powers of two (one compiled program per size):

- the chunk, the batches whose block fits a core's share of the cache (`cache`). A group of one
  chunk packs several short long rows and is one batched product per pass that stays in cache
  for the whole solve: one read from memory per entry instead of five.
- a row longer than a chunk gets a group of its own, rounded up (shorter rows fill the rest),
  read from its block a batch at a time, each pass.
- no group holds more than `budget` batches: a longer row is streamed (each pass gathers it a
  batch at a time again), so the budget, not the long rows' total, bounds what a device holds.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq

import jax
import jax.numpy as jnp
import numpy as np

from alx_trainer import execution
from alx_trainer.data import batching
from alx_trainer.data.batching import SidePlan
from alx_trainer.execution import (
    Fixed,
    StepSpec,
    device_parts,
    host_batch,
    host_float32,
    local_rows,
)
from alx_trainer.ops import solvers
from alx_trainer.ops.gather_scatter import local_update, row_gather
from alx_trainer.ops.kernels import make_long_stats, make_solve_scatter, row_reg

# A chunk's float32 block fits LONG_CACHE_BYTES (a core's share of the 32 MiB L3, beside the
# other core's chunk); a device holds no group block above LONG_BLOCK_BYTES.
# The retired `benchmarks/long_rows.py` (docs/benchmarks.md; two pinned devices, 1.5M x 128 table,
# d=128; ns per entry, whole solve): a one-chunk group 157-178, blocks of 8/32 batches
# 279-296/301-338,
# streamed 335-458.
LONG_CACHE_BYTES = 8 << 20
LONG_BLOCK_BYTES = 64 << 20


@dataclasses.dataclass
class Group:
    """Rows (indices into the long rows) solved in one call, in `size` batches (padding at the
    end)."""

    rows: list[int]
    size: int
    resident: bool  # gathered once (else streamed)


def pow2_at_least(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def pow2_at_most(n: int) -> int:
    return 1 << (max(int(n), 1).bit_length() - 1)


def plan_groups(
    batches_per_row: np.ndarray, cache: int, budget: int, workers: int
) -> tuple[int, list[list[Group]]]:
    """The chunk and each of `workers` devices' groups for long rows of `batches_per_row` batches.

    `cache`, `budget`: the batches whose float32 block fits a core's cache share and the bound
    per device. Rows are placed longest first, each into the fullest open group with room for it
    (best fit), else into a new group of its length rounded up to a power of two, at least a
    chunk; the groups then go to the least loaded device, largest first.
    """
    budget = pow2_at_most(budget)
    # tiny inputs: a tiny chunk
    chunk = min(pow2_at_most(cache), budget, pow2_at_least(int(np.sum(batches_per_row))))
    groups: list[Group] = []
    room: list[int] = []  # free batches per group
    # free batches -> resident groups with that room
    open_with: list[list[int]] = [[] for _ in range(budget + 1)]
    for r in np.argsort(-batches_per_row, kind="stable").tolist():
        n = int(batches_per_row[r])
        if n > budget:
            groups.append(Group([r], pow2_at_least(n), resident=False))
            room.append(0)
            continue
        g = next((open_with[f].pop() for f in range(n, budget + 1) if open_with[f]), None)
        if g is None:
            g = len(groups)
            groups.append(Group([], max(chunk, pow2_at_least(n)), resident=True))
            room.append(groups[g].size)
        groups[g].rows.append(r)
        room[g] -= n
        open_with[room[g]].append(g)
    load = [(0, w) for w in range(workers)]
    per_worker: list[list[Group]] = [[] for _ in range(workers)]
    for g in sorted(groups, key=lambda g: -g.size):
        total, w = heapq.heappop(load)
        per_worker[w].append(g)
        heapq.heappush(load, (total + g.size, w))
    return chunk, per_worker


@functools.partial(jax.jit, static_argnames=("iters", "chunk", "resident", "loss"))
def long_cg(
    src, ids, slot, x0, lam, gram, alpha, iters: int, chunk: int, resident: bool, loss: bool
):
    """Matrix-free CG for a group of long rows on one device (the fixed table `src` whole there),
    float32.

    ids [K, B, L]: K batches, each holding entries of one row, the rows' batches first (then
    padding batches: PAD_ID only); slot [K]: that row's index in x0 [R, d] and lam [R] (its
    lambda). Runs `iters` CG steps on (A_obs + alpha G + lam I) x = b from x0 (`solvers.cg`, as a
    normal row) implicit's way: each matvec is a pass sum_i h_i (h_i . p) over the rows' entries,
    4 |S| d FLOPs, no d x d matrix. Returns x [R, d] and per row the observed loss
    sum_i (1 - h_i . x)^2 (zeros unless `loss`).

    `resident`: the group's fixed-table rows are gathered once into a [K, B*L, d] float32 block
    that r0, every matvec and the loss read, one random gather per entry instead of five. A group
    of `chunk` batches (a core's cache share) is one batched product per pass and stays in cache
    through the whole solve; a larger one is read a batch at a time. Not `resident` (a row too
    long for the block budget): every pass gathers it a batch at a time, as a normal batch is.
    Padding batches are skipped.
    """
    rows, k = x0.shape[0], ids.shape[0]
    flat = ids.reshape(k, -1)  # [K, B*L]
    block = row_gather(src, flat) if resident else None  # [K, B*L, d]

    # batches [..., B*L]: sum_i h_i e_i [..., d], sum_i e_i^2 [...]
    def batch_pass(h, ids_b, p_b, target):
        e = jnp.where(ids_b >= 0, target - jnp.einsum("...nd,...d->...n", h, p_b), 0)
        return jnp.einsum("...n,...nd->...d", e, h), jnp.sum(e * e, axis=-1)

    def passes(p, target):  # p [K, d]: each batch's row vector
        if resident and k == chunk:  # the whole block at once: no slice of it copied
            return batch_pass(block, flat, p, target)

        def one(xs):
            ids_b, p_b = xs[:2]
            return jax.lax.cond(
                ids_b[0] >= 0,
                lambda: batch_pass(
                    xs[2] if resident else row_gather(src, ids_b), ids_b, p_b, target
                ),
                lambda: (jnp.zeros_like(p_b), jnp.zeros(())),
            )

        return jax.lax.map(one, (flat, p) + ((block,) if resident else ()))

    def observed(p, target):  # per row: sum_i h_i e_i and sum_i e_i^2, e_i = target - h_i . p
        v, sq = passes(p[slot], target)
        return jax.ops.segment_sum(v, slot, rows), jax.ops.segment_sum(sq, slot, rows)

    def matvec(p):
        return -observed(p, 0.0)[0] + alpha * (p @ gram) + lam[:, None] * p

    r0 = observed(x0, 1.0)[0] - alpha * (x0 @ gram) - lam[:, None] * x0  # b - A x0 in one pass
    x = solvers.cg(matvec, None, x0, iters, r0=r0)
    return x, observed(x, 1.0)[1] if loss else jnp.zeros(rows, jnp.float32)


@functools.partial(jax.jit, donate_argnums=(0,))
def write_rows(table_l: jax.Array, ids: jax.Array, values: jax.Array) -> jax.Array:
    """`table_l` (one device's shard) with rows `ids` (shard-local, PAD_ID ignored) set to
    `values`."""
    return local_update(table_l, ids, values, 0)


def solve_explicit(
    mesh, spec: StepSpec, plan: SidePlan, shard: int, batches, src, dst, fixed: Fixed
) -> tuple[jax.Array, list]:
    """Rows longer than one device batch: sum their statistics over parts, then solve."""
    L, B, R = plan.shape
    per_step = len(mesh.local_devices)
    long_stats, solve_scatter = make_long_stats(mesh, spec), make_solve_scatter(mesh, spec)
    d = src.shape[1]
    acc: dict[int, list] = {}  # row id -> [A_obs (float64), b, length]
    make_empty = lambda k: batching.empty_long(k, L, B)  # noqa: E731
    for batch in batching.group_steps(batches, per_step, plan.long_steps, make_empty):
        a, b = long_stats(src, host_batch(mesh, batch.ids))
        a, b = local_rows(a), local_rows(b)
        for k, owner in enumerate(batch.owner.tolist()):
            if owner == batching.PAD_ID:
                continue
            slot = acc.setdefault(owner, [np.zeros((d, d)), np.zeros(d), int(batch.owner_len[k])])
            slot[0] += a[k]
            slot[1] += b[k]
    owners = sorted(acc)
    if spec.owner:  # slot j of every solve holds rows of device j's shard
        queues = [[o for o in owners if o // shard == j] for j in range(per_step)]
    else:
        queues = [owners[j::per_step] for j in range(per_step)]
    terms = []
    for s in range(plan.long_solves):
        a = np.zeros((per_step, R, d, d), np.float32)
        b = np.zeros((per_step, R, d), np.float32)
        ids = np.full((per_step, R), batching.PAD_ID, np.int32)
        lens = np.zeros((per_step, R), np.int32)
        for j, queue in enumerate(queues):
            for i, owner in enumerate(queue[s * R : (s + 1) * R]):
                a[j, i], b[j, i], lens[j, i] = acc[owner]
                ids[j, i] = owner - j * shard if spec.owner else owner  # 'owner': shard-local
        dst, t = solve_scatter(dst, fixed, *[host_batch(mesh, x) for x in (a, b, ids, lens)])
        terms.append(t)
    return dst, terms


def solve_cg(
    mesh,
    spec: StepSpec,
    shard: int,
    per_device: bool,
    hyper: np.ndarray,
    batches,
    src,
    dst,
    fixed: Fixed,
) -> tuple[jax.Array, list]:
    """Rows longer than one device batch by matrix-free CG ('owner' layout, one process; see above).

    The new rows go back to their owners' shards (`write_rows`).
    """
    batches = batching.merge(list(batches))
    owners, slot = np.unique(batches.owner, return_inverse=True)
    lengths = np.zeros(len(owners), np.int64)
    lengths[slot] = batches.owner_len
    per_row = np.bincount(slot, minlength=len(owners))
    first = np.concatenate([[0], np.cumsum(per_row)[:-1]])
    order = np.argsort(slot, kind="stable")  # each row's batches, together
    d = src.shape[1]
    batch_bytes = batches.ids[0].size * d * 4  # one batch's float32 block
    devices = mesh.local_devices if per_device else mesh.local_devices[:1]
    chunk, plan = plan_groups(
        per_row, LONG_CACHE_BYTES // batch_bytes, LONG_BLOCK_BYTES // batch_bytes, len(devices)
    )

    parts = device_parts(dst)
    local = mesh.local_devices
    owner_device, local_ids = owners // shard, (owners % shard).astype(np.int32)
    x0 = np.zeros((len(owners), d), np.float32)
    for j, device in enumerate(local):
        here = owner_device == j
        x0[here] = host_float32(np.asarray(parts[device])[local_ids[here]])
    hyper = np.asarray(hyper, np.float64)
    lam = row_reg(spec.num_other, hyper, lengths, np)  # float64
    srcs, grams = device_parts(src), device_parts(fixed.gramian)
    alpha = np.float32(hyper[0])
    x, sq = np.zeros_like(x0), np.zeros(len(owners))

    def task(w: int) -> None:
        device = devices[w]
        for group in plan[w]:
            rows = np.asarray(group.rows)
            pick = np.concatenate([order[first[r] : first[r] + per_row[r]] for r in group.rows])
            ids = np.full((group.size,) + batches.ids.shape[1:], batching.PAD_ID, np.int32)
            ids[: len(pick)] = batches.ids[pick]
            at = np.zeros(group.size, np.int32)
            at[: len(pick)] = np.repeat(np.arange(len(rows)), per_row[rows])
            start, reg = np.zeros((group.size, d), np.float32), np.zeros(group.size, np.float32)
            start[: len(rows)], reg[: len(rows)] = x0[rows], lam[rows]
            ids, at, start, reg = (jax.device_put(a, device) for a in (ids, at, start, reg))
            got, loss = long_cg(
                srcs[device],
                ids,
                at,
                start,
                reg,
                grams[device],
                alpha,
                spec.cg_iters,
                chunk,
                group.resident,
                spec.observed_loss,
            )
            x[rows], sq[rows] = np.asarray(got)[: len(rows)], np.asarray(loss)[: len(rows)]

    tasks = [functools.partial(task, w) for w in range(len(devices))]
    if per_device:
        execution.run_per_core(tasks)
    else:
        tasks[0]()
    for j, device in enumerate(local):
        here = owner_device == j
        if here.any():
            parts[device] = write_rows(parts[device], local_ids[here], x[here])
    dst = jax.make_array_from_single_device_arrays(
        dst.shape, dst.sharding, [parts[dv] for dv in local]
    )
    x64 = x.astype(np.float64)
    return dst, [np.array([sq.sum(), np.sum(lam * np.sum(x64 * x64, axis=1)), len(owners)])]
