"""The device mesh and the `shard_map` kernels of one half-epoch (paper 4.2, Algorithm 2).

Both tables are `[rows_padded, d]` arrays sharded by rows over the 1-D mesh axis `AXIS`. Kernels:
- `gramian`: local `T_mu^T T_mu`, then `psum`.
- sharded gather: `all_gather` the batch ids, masked lookup in the local shard, `psum_scatter`
  (the reduce half of the paper's all-reduce: each device keeps only its own batch).
- solve: per-row normal equations (paper Eq. 4) with the configured solver, in float32 ('block':
  the iALS++ sweep of `block_solver`, from the gathered rows without building d x d matrices).
- sharded scatter: `all_gather` the solved rows and their ids, masked local update.
Layouts (`StepSpec.layout`): 'sharded' is the paper's (both tables sharded, the gather and scatter
above every step); 'replicated' copies the fixed table whole to every device once per half-epoch,
so a step's gather is a local lookup; 'owner' adds that each device solves only rows of its own
shard (the trainer routes them there), so a step needs no collective at all, its loss terms come
back per device, and the per-half-epoch gramian and replication go through the host (one process).
A step kernel runs a `lax.scan` over K stacked dense batches: fewer dispatches per half-epoch.
On a CPU host split into one device per core, the 'owner' step also compiles per device
(`make_device_step`) and each device's calls run in their own pinned thread (`per_core`).
- "local statistics" (paper 4.2 alternative): each device builds partial d x d statistics of every
  device's batch from its own shard only, then one `psum_scatter` sums them.
Every step kernel also returns the loss terms of the rows it solved (observed loss, weighted L2,
row count); the matrix-free kernel skips the observed loss when `observed_loss` is off.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import os
import queue
import threading
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from threadpoolctl import ThreadpoolController

from alx_trainer.ops import block_solver, solvers

AXIS = "d"
LAYOUTS = ("sharded", "replicated", "owner")


def make_mesh(devices=None) -> Mesh:
    """A 1-D mesh over all devices (of every process)."""
    return Mesh(np.asarray(devices if devices is not None else jax.devices()), (AXIS,))


def padded_rows(n: int, mesh: Mesh) -> int:
    """Rows of a table padded to a multiple of the device count."""
    d = mesh.size
    return max(d, -(-n // d) * d)


def row_sharding(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P(AXIS))


@dataclasses.dataclass(frozen=True)
class StepSpec:
    """Static parameters of a step kernel (one compiled program per distinct spec and shape).

    The objective's weights (alpha, lambda, nu) are not static: they reach the kernels as an array
    `hyper` beside the gramian (`Fixed`), so a sweep over them reuses the compiled programs.
    """

    num_other: int  # real rows of the fixed table (the "number of columns" of frequency scaling)
    solver: str
    cg_iters: int
    matvec: bool  # CG without building the d x d matrices (gather mode only)
    local_stats: bool
    observed_loss: bool = True  # compute sum (1 - h.x)^2 (one more pass over the gathered ids)
    layout: str = "sharded"  # one of LAYOUTS (see the module docstring)
    block_size: int = 0  # coordinates per block of the 'block' solver (iALS++)

    @property
    def replicated_src(self) -> bool:
        """The fixed table arrives whole on every device (`replicate`)."""
        return self.layout != "sharded"

    @property
    def owner(self) -> bool:
        return self.layout == "owner"


# What a step sees of the fixed side besides its rows: (gramian [d, d], hyper [3] = alpha, lambda, nu).
Fixed = tuple[jax.Array, jax.Array]


def hyper_params(alpha: float, reg: float, reg_exponent: float) -> np.ndarray:
    """The `hyper` array of the kernels: float32 [alpha, lambda, nu]."""
    return np.array([alpha, reg, reg_exponent], np.float32)


def host_threads() -> int:
    """The cores this process may run on (threads for host-side work)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


INIT_CHUNK = 16384  # rows per generator stream and per block: initialization holds a shard and a few blocks


_SCRATCH = threading.local()  # each init thread's float32 chunk, reused (freed blocks stayed in glibc's thread arenas)


def init_rows(seed: int, lo: int, n: int, stddev: float, out: np.ndarray) -> None:
    """Fill `out` ([rows, d], any float dtype) with rows lo.. of the initial table: N(0, stddev), zero from row n.

    Rows are generated in global chunks of `INIT_CHUNK`: chunk c is NumPy's PCG64 stream seeded by
    (seed, c), so row r depends on the seed and r only (not on the mesh, the shards or the threads).
    """
    hi, dim = lo + len(out), out.shape[1]
    scratch = getattr(_SCRATCH, "rows", None)
    if scratch is None or scratch.shape != (INIT_CHUNK, dim):
        scratch = _SCRATCH.rows = np.empty((INIT_CHUNK, dim), np.float32)
    out[max(n, lo) - lo :] = 0
    for c in range(lo // INIT_CHUNK, -(-min(hi, n) // INIT_CHUNK)):
        first = c * INIT_CHUNK
        a, b = max(lo, first), min(hi, first + INIT_CHUNK, n)
        if a >= b:  # rows lo.. are all padding
            continue
        values = scratch[: b - first]  # a prefix of the chunk's stream
        np.random.default_rng([seed, c]).standard_normal(out=values, dtype=np.float32)
        np.multiply(values[a - first :], np.float32(stddev), out=values[a - first :])
        out[a - lo : b - lo] = values[a - first :]


@functools.partial(jax.jit, donate_argnums=(0,))
def _write_block(out: jax.Array, block: jax.Array, at) -> jax.Array:
    return jax.lax.dynamic_update_slice(out, block, (at, 0))


def init_table(mesh: Mesh, seed: int, n: int, dim: int, stddev: float, dtype) -> jax.Array:
    """Normal(0, stddev) rows for the `n` real rows, zeros for the padding; independent of the mesh.

    Blocks of `INIT_CHUNK` rows are generated on the host by a thread per core (`init_rows`;
    NumPy's generators release the GIL) into a few reused buffers, copied to the device and
    written into its shard in place: time in proportion to the bytes, memory a shard plus a
    block per thread (a per-row `jax.random` key, one device after the other, took 587 s for two
    19.7M x 128 tables).
    """
    n_pad = padded_rows(n, mesh)
    shard = n_pad // mesh.size
    block = min(INIT_CHUNK, shard)
    dtype = jnp.dtype(dtype)
    # bfloat16 shards are written as their uint16 bits: XLA:CPU's bfloat16 dynamic-update-slice
    # converted the whole shard to float32 and back for every block (quadratic in the shard)
    bits = BF16_BITS if dtype == jnp.bfloat16 else dtype
    sharding = row_sharding(mesh)
    workers = host_threads()
    free: queue.Queue = queue.Queue()
    for _ in range(workers + 1):
        free.put(np.empty((block, dim), dtype))

    def make(lo: int) -> np.ndarray:
        buf = free.get()
        init_rows(seed, lo, n, stddev, buf)
        return buf

    parts = []
    with ThreadPoolExecutor(workers, thread_name_prefix="alx-init") as pool:
        for device, index in sharding.addressable_devices_indices_map((n_pad, dim)).items():
            start = index[0].start or 0
            # blocks on global chunk boundaries (one stream each); the first and last clamped into the shard
            chunks = range(start // INIT_CHUNK, -(-(start + shard) // INIT_CHUNK))
            offsets = sorted({min(max(c * INIT_CHUNK - start, 0), shard - block) for c in chunks})
            with jax.default_device(device):
                out = jnp.zeros((shard, dim), bits)
            pending: collections.deque = collections.deque()
            for k, at in enumerate(offsets):
                pending.append((at, pool.submit(make, start + at)))
                while len(pending) > workers or (pending and k == len(offsets) - 1):
                    done_at, future = pending.popleft()
                    buf = future.result()
                    out = _write_block(out, jax.device_put(buf.view(bits), device, may_alias=False), np.int32(done_at))
                    free.put(buf)
            parts.append(out if bits == dtype else _bitcast(dtype)(out))
    return jax.make_array_from_single_device_arrays((n_pad, dim), sharding, parts)


def table_from_numpy(mesh: Mesh, values: np.ndarray, dtype) -> jax.Array:
    """A sharded, padded table from host values (the same on every process)."""
    n_pad = padded_rows(values.shape[0], mesh)
    padded = np.zeros((n_pad, values.shape[1]), np.float32)
    padded[: values.shape[0]] = values
    sharding = row_sharding(mesh)
    return jax.make_array_from_callback(padded.shape, sharding, lambda idx: padded[idx].astype(dtype))


# A bfloat16 table while a half-epoch solves it on CPU: its bits as uint16 (see `solving_form`).
BF16_BITS = jnp.uint16


def as_float32(rows: jax.Array) -> jax.Array:
    """float32 values of table rows (of a bfloat16 table held as `BF16_BITS` too)."""
    if rows.dtype == BF16_BITS:
        rows = jax.lax.bitcast_convert_type(rows, jnp.bfloat16)
    return rows.astype(jnp.float32)


def as_stored(values: jax.Array, dtype) -> jax.Array:
    """`values` in a table's storage dtype (`BF16_BITS`: the bits of their bfloat16 rounding)."""
    if dtype == BF16_BITS:
        return jax.lax.bitcast_convert_type(values.astype(jnp.bfloat16), BF16_BITS)
    return values.astype(dtype)


@functools.lru_cache(maxsize=None)
def _bitcast(dtype):
    return jax.jit(lambda t: jax.lax.bitcast_convert_type(t, dtype), donate_argnums=(0,))


def _bitcast_shards(table: jax.Array, dtype) -> jax.Array:
    """`table` reinterpreted as `dtype` (same width), one shard at a time, each shard donated."""
    parts = [_bitcast(dtype)(s.data) for s in table.addressable_shards]
    return jax.make_array_from_single_device_arrays(table.shape, table.sharding, parts)


def solving_form(table: jax.Array) -> jax.Array:
    """The table a half-epoch solves into: a bfloat16 table on CPU becomes its uint16 bits.

    XLA:CPU has no bfloat16 scatter: it converts the whole shard to float32, scatters there and
    converts back, so each step held two shards' worth of float32 temporaries (and touched the
    whole shard per update). A uint16 scatter updates the rows in place. The reinterpretation
    itself holds one shard of temporary, shard by shard, once per half-epoch.
    """
    return _bitcast_shards(table, BF16_BITS) if _bits_dtype(table) == BF16_BITS else table


def gather_form(table: jax.Array) -> jax.Array:
    """The fixed table as the step kernels gather from it: a bfloat16 table on CPU as its
    `BF16_BITS`, each shard a zero-copy view of the same host memory (no copy, nothing donated).

    XLA:CPU gathers bfloat16 rows by converting the operand to float32 first, and when the gather
    sits in a loop over batches (the long rows' `lax.map`, the 'sharded' and 'replicated' steps'
    `scan`), loop-invariant code motion hoists that convert out of the loop: a float32 copy of the
    whole fixed table per call, 2x its bytes (9.4 GiB per device for the de-sparse 19.7M x 128
    replica). A uint16 gather needs no convert; only the gathered rows are widened (`as_float32`).
    A bitcast inside the program does not help: XLA:CPU materializes it as a copy.
    """
    bits = _bits_dtype(table)
    if bits == table.dtype:
        return table
    parts = [jax.device_put(np.asarray(s.data).view(bits), s.device, may_alias=True) for s in table.addressable_shards]
    return jax.make_array_from_single_device_arrays(table.shape, table.sharding, parts)


def _bits_dtype(table: jax.Array) -> np.dtype:
    """The dtype XLA:CPU kernels take `table` as: `BF16_BITS` for bfloat16 on CPU, else its own."""
    cpu = all(d.platform == "cpu" for d in table.sharding.device_set)
    return np.dtype(BF16_BITS) if cpu and table.dtype == jnp.bfloat16 else np.dtype(table.dtype)


def stored_form(table: jax.Array) -> jax.Array:
    """The inverse of `solving_form`."""
    return _bitcast_shards(table, jnp.bfloat16) if table.dtype == BF16_BITS else table


def _shard_start(table_l: jax.Array) -> jax.Array:
    """The global row id of this device's first table row (inside `shard_map`)."""
    return jax.lax.axis_index(AXIS) * table_l.shape[0]


def _local_lookup(table_l: jax.Array, ids: jax.Array, start) -> jax.Array:
    """Rows of the local shard for `ids` counted from `start`; zero where the id lives elsewhere."""
    shard = table_l.shape[0]
    local = ids - start
    mine = (local >= 0) & (local < shard)
    rows = as_float32(jnp.take(table_l, jnp.where(mine, local, 0), axis=0))
    return jnp.where(mine[..., None], rows, 0.0)


def sharded_gather(table_l: jax.Array, ids: jax.Array) -> jax.Array:
    """float32 embeddings of this device's `ids` ([...]) from the row-sharded table."""
    all_ids = jax.lax.all_gather(ids, AXIS)  # [D, ...]
    found = _local_lookup(table_l, all_ids, _shard_start(table_l))
    return jax.lax.psum_scatter(found, AXIS, scatter_dimension=0, tiled=True)[0]


def local_update(table_l: jax.Array, ids: jax.Array, values: jax.Array, start) -> jax.Array:
    """Write the rows of `values` [n, d] whose `ids` [n] (counted from `start`) live in this shard."""
    shard = table_l.shape[0]
    local = ids - start
    mine = (local >= 0) & (local < shard)
    return table_l.at[jnp.where(mine, local, shard)].set(as_stored(values, table_l.dtype), mode="drop")


def sharded_scatter(table_l: jax.Array, ids: jax.Array, values: jax.Array) -> jax.Array:
    """Write `values` [R, d] at global row `ids` [R] (PAD -1 ignored) into the sharded table."""
    all_ids = jax.lax.all_gather(ids, AXIS).reshape(-1)
    all_values = jax.lax.all_gather(values, AXIS).reshape(-1, values.shape[-1])
    return local_update(table_l, all_ids, all_values, _shard_start(table_l))


def _rows_in(spec: StepSpec, table_l: jax.Array, ids: jax.Array) -> jax.Array:
    """float32 rows `ids` of the table being solved ('owner': ids are rows of this device's shard)."""
    return _local_lookup(table_l, ids, 0) if spec.owner else sharded_gather(table_l, ids)


def _rows_out(spec: StepSpec, table_l: jax.Array, ids: jax.Array, values: jax.Array) -> jax.Array:
    return local_update(table_l, ids, values, 0) if spec.owner else sharded_scatter(table_l, ids, values)


def _fixed_rows(spec: StepSpec, src_l: jax.Array, ids: jax.Array) -> jax.Array:
    """float32 rows `ids` of the fixed table (zeros at padding ids)."""
    if spec.replicated_src:  # a plain local lookup, no collective
        return row_gather(src_l, ids)
    return sharded_gather(src_l, ids)


def row_gather(table: jax.Array, ids: jax.Array) -> jax.Array:
    """float32 rows `ids` ([...], PAD_ID -1 allowed) of `table`, zeros at padding: [..., d].

    A gather of whole rows promised in bounds (padding reads row 0), then a multiply by the
    mask. XLA:CPU compiled the bounds-checked form (`take(mode="fill")` or a `where` after it)
    into one per-element loop that re-derived every element's index: 3x slower at d=64 (see
    `benchmarks/trainer_profile.py --trace`, where this gather was most of an epoch).
    """
    dims = jax.lax.GatherDimensionNumbers(offset_dims=(ids.ndim,), collapsed_slice_dims=(0,), start_index_map=(0,))
    rows = jax.lax.gather(table, jnp.maximum(ids, 0)[..., None], dims, (1, table.shape[1]),
                          mode=jax.lax.GatherScatterMode.PROMISE_IN_BOUNDS)
    return as_float32(rows) * (ids >= 0)[..., None].astype(jnp.float32)


def _local_gramian(table_l: jax.Array) -> jax.Array:
    """`T_mu^T T_mu` of this device's shard, float32."""
    t = table_l.astype(jnp.float32)
    return t.T @ t


def _gramian_local(table_l: jax.Array) -> jax.Array:
    return jax.lax.psum(_local_gramian(table_l), AXIS)


@functools.lru_cache(maxsize=None)
def make_gramian(mesh: Mesh):
    """`gramian(table) -> [d, d]` float32, replicated."""
    return jax.jit(jax.shard_map(_gramian_local, mesh=mesh, in_specs=P(AXIS), out_specs=P(), check_vma=False))


def row_reg(num_other: int, hyper, row_len, xp=jnp):
    """lambda * (n + alpha * num_other) ** nu per row (plain lambda when nu = 0), in the dtype of
    `hyper` and the array namespace `xp` (NumPy float64 for the host's long rows)."""
    alpha, reg, nu = hyper[0], hyper[1], hyper[2]
    n = row_len.astype(hyper.dtype)
    return reg * xp.where(nu == 0, 1.0, (n + alpha * num_other) ** nu)


def _explicit_stats(h: jax.Array, seg: jax.Array, rows: int) -> tuple[jax.Array, jax.Array]:
    """Per-row sum_i h_i h_i^T [R, d, d] and sum_i h_i [R, d] from pieces h [B, L, d]."""
    outer = jnp.einsum("bld,ble->bde", h, h)
    a = jax.ops.segment_sum(outer, seg, num_segments=rows)
    b = jax.ops.segment_sum(h.sum(axis=1), seg, num_segments=rows)
    return a, b


def _solve_explicit(spec: StepSpec, fixed: Fixed, a_obs, b, x0, row_ids, row_len):
    """Solve (A_obs + alpha G + lambda_r I) x = b; return x and the loss terms of valid rows."""
    gram, hyper = fixed
    d = gram.shape[0]
    valid = row_ids >= 0
    lam = row_reg(spec.num_other, hyper, row_len)
    eye = jnp.eye(d, dtype=jnp.float32)
    a = a_obs + hyper[0] * gram + lam[:, None, None] * eye
    a = jnp.where(valid[:, None, None], a, eye)  # padding slots: a harmless identity system
    x = solvers.solve_explicit(spec.solver, a, jnp.where(valid[:, None], b, 0), x0, spec.cg_iters, spec.block_size)
    x = jnp.where(valid[:, None], x, 0)
    # sum_i (1 - h_i.x)^2 = n - 2 x.b + x^T A_obs x
    observed = row_len - 2 * jnp.sum(x * b, -1) + jnp.einsum("rd,rde,re->r", x, a_obs, x)
    return x, _loss_terms(valid, observed, lam, x)


def _loss_terms(valid, observed, lam, x):
    """This device's [observed, reg, rows] of the rows it solved."""
    observed = jnp.sum(jnp.where(valid, observed, 0))
    reg = jnp.sum(jnp.where(valid, lam * jnp.sum(x * x, -1), 0))
    rows = jnp.sum(valid.astype(jnp.float32))
    return jnp.stack([observed, reg, rows])


def _batch_gather(spec: StepSpec, src_l, dst_l, fixed: Fixed, ids, seg, row_ids, row_len):
    """Solve one dense batch (ids [B, L], seg [B], row_ids/row_len [R]); returns (dst_l, terms)."""
    gram, hyper = fixed
    alpha = hyper[0]
    rows = row_ids.shape[0]
    h = _fixed_rows(spec, src_l, ids)  # [B, L, d] float32, zeros at padding
    x0 = _rows_in(spec, dst_l, row_ids)  # warm start [R, d]
    if spec.solver == "block":  # iALS++: never builds the d x d matrices
        valid = row_ids >= 0
        lam = row_reg(spec.num_other, hyper, row_len)
        x, err = block_solver.sweep(h, seg, x0, gram, lam, alpha, valid, spec.block_size)
        per_entry = jnp.where(ids >= 0, err**2, 0).sum(axis=1)  # errors of the final x: the observed loss
        terms = _loss_terms(valid, jax.ops.segment_sum(per_entry, seg, num_segments=rows), lam, x)
    elif spec.matvec and spec.solver == "cg":
        valid = row_ids >= 0
        lam = row_reg(spec.num_other, hyper, row_len)

        def per_row(p):  # [R, d] -> [B, d]: each piece's row vector (zero for padding pieces)
            return jnp.take(p, seg, axis=0, mode="fill", fill_value=0)

        def matvec(p):
            hp = jnp.einsum("bld,bd->bl", h, per_row(p))
            obs = jax.ops.segment_sum(jnp.einsum("bl,bld->bd", hp, h), seg, num_segments=rows)
            return obs + alpha * (p @ gram) + lam[:, None] * p

        # r0 = b - A x0 = sum_i h_i (1 - h_i.x0) - (alpha G + lambda) x0: b and A x0 in one pass.
        residual = jnp.einsum("bl,bld->bd", 1 - jnp.einsum("bld,bd->bl", h, per_row(x0)), h)
        r0 = jax.ops.segment_sum(residual, seg, num_segments=rows) - alpha * (x0 @ gram) - lam[:, None] * x0
        x = solvers.cg(matvec, None, x0, spec.cg_iters, r0=r0)
        x = jnp.where(valid[:, None], x, 0)
        if spec.observed_loss:
            hx = jnp.einsum("bld,bd->bl", h, jnp.take(x, seg, axis=0, mode="fill", fill_value=0))
            per_entry = jnp.where(ids >= 0, (1 - hx) ** 2, 0).sum(axis=1)
            observed = jax.ops.segment_sum(per_entry, seg, num_segments=rows)
        else:
            observed = jnp.zeros(rows, jnp.float32)
        terms = _loss_terms(valid, observed, lam, x)
    else:
        a_obs, b = _explicit_stats(h, seg, rows)
        x, terms = _solve_explicit(spec, fixed, a_obs, b, x0, row_ids, row_len)
    return _rows_out(spec, dst_l, row_ids, x), terms


def _batch_local(spec: StepSpec, src_l, dst_l, fixed: Fixed, ids, seg, row_ids, row_len):
    """One dense batch with the paper's "local statistics" (sharded layout only)."""
    rows = row_ids.shape[0]
    all_ids = jax.lax.all_gather(ids, AXIS)  # [D, B, L]
    all_seg = jax.lax.all_gather(seg, AXIS)  # [D, B]
    h = _local_lookup(src_l, all_ids, _shard_start(src_l))  # only this shard's rows, zeros elsewhere
    a_part, b_part = jax.vmap(lambda hh, ss: _explicit_stats(hh, ss, rows))(h, all_seg)
    a_obs = jax.lax.psum_scatter(a_part, AXIS, scatter_dimension=0, tiled=True)[0]
    b = jax.lax.psum_scatter(b_part, AXIS, scatter_dimension=0, tiled=True)[0]
    x0 = sharded_gather(dst_l, row_ids)
    x, terms = _solve_explicit(spec, fixed, a_obs, b, x0, row_ids, row_len)
    return sharded_scatter(dst_l, row_ids, x), terms


def _step(spec: StepSpec, src_l, dst_l, fixed: Fixed, ids, seg, row_ids, row_len):
    """Scan this device's K stacked batches ([1, K, ...]); loss terms summed over them."""
    body = functools.partial(_batch_local if spec.local_stats else _batch_gather, spec, src_l)

    def one(dst_l, batch):
        if not spec.owner:  # collectives inside: every device runs every batch
            return body(dst_l, fixed, *batch)
        # No collective: a device skips its padding batches (row slots all empty).
        return jax.lax.cond(jnp.any(batch[2] >= 0), lambda t: body(t, fixed, *batch), lambda t: (t, jnp.zeros(3)), dst_l)

    dst_l, terms = jax.lax.scan(one, dst_l, (ids[0], seg[0], row_ids[0], row_len[0]))
    terms = terms.sum(axis=0)
    return dst_l, (terms[None] if spec.owner else jax.lax.psum(terms, AXIS))


def _terms_spec(spec: StepSpec):
    """Loss terms come back summed over devices ([3], replicated) or per device ([D, 3]) for 'owner'."""
    return P(AXIS) if spec.owner else P()


@functools.lru_cache(maxsize=None)
def make_step(mesh: Mesh, spec: StepSpec):
    """`step(src, dst, (gram, hyper), ids, seg, row_ids, row_len) -> (dst, terms)`.

    `src` is the fixed table (replicated unless the layout is 'sharded'), `dst` the table being
    solved (donated, updated in place); the batch arrays are [D, K, ...] (K batches per device).
    """
    fn = jax.shard_map(
        functools.partial(_step, spec),
        mesh=mesh,
        in_specs=(P() if spec.replicated_src else P(AXIS), P(AXIS), P(), P(AXIS), P(AXIS), P(AXIS), P(AXIS)),
        out_specs=(P(AXIS), _terms_spec(spec)),
        check_vma=False,
    )
    return jax.jit(fn, donate_argnums=(1,))


@functools.lru_cache(maxsize=None)
def make_device_step(spec: StepSpec):
    """The 'owner' step of one device on single-device arrays (no mesh: run per device, see `per_core`).

    Same arguments as `make_step` with a leading device axis of 1; one compilation per device.
    """
    if not spec.owner:
        raise ValueError("a per-device step needs the 'owner' layout (it has no collective)")
    return jax.jit(functools.partial(_step, spec), donate_argnums=(1,))


def device_parts(array: jax.Array) -> dict:
    """This process's shards of `array` by device (single-device arrays sharing its buffers)."""
    return {s.device: s.data for s in array.addressable_shards}


@functools.lru_cache(maxsize=None)
def make_replicate(mesh: Mesh):
    """`replicate(table)`: the whole table on every device (one all-gather)."""
    return jax.jit(lambda t: t, out_shardings=NamedSharding(mesh, P()))


def replicate_via_host(mesh: Mesh, table: jax.Array, buffer: ReplicaBuffer | None = None) -> jax.Array:
    """The whole table on every device through host memory (no collective; one process), in `gather_form`.

    One host copy: CPU devices alias it (`may_alias`, 64-byte aligned), so per-core devices share
    one fixed table instead of holding one each; one device just keeps the table it has. With
    `buffer`, the copy goes into its memory (see `ReplicaBuffer`), else into a fresh allocation.
    """
    if mesh.size == 1:
        return gather_form(table)
    bits = _bits_dtype(table)
    host = aligned_empty(table.shape, bits) if buffer is None else buffer.view(table.shape, bits)

    def copy(shard) -> None:  # NumPy releases the GIL: the shards' copies (and first-touch faults) in parallel
        host[shard.index] = np.asarray(shard.data).view(host.dtype)

    with ThreadPoolExecutor(host_threads(), thread_name_prefix="alx-replica") as pool:
        list(pool.map(copy, table.addressable_shards))
    return jax.device_put(host, NamedSharding(mesh, P()), may_alias=True)


class ReplicaBuffer:
    """Host memory for the fixed-table replica, kept from one half-epoch to the next.

    A fresh allocation per half-epoch is touched for the first time by the copy: a page fault per
    page (4 KiB pages: 0.5 s for the 512 MB replica of a 1M x 128 float32 table, against 0.04 s
    for the copy alone into memory already mapped; 0.1 s on huge pages). Grown to the largest
    table it has held. A replica made in it is valid until the next one is: hold one at a time.
    """

    def __init__(self) -> None:
        self._raw: np.ndarray | None = None

    def view(self, shape: tuple[int, ...], dtype) -> np.ndarray:
        """An uninitialized, 64-byte aligned array of `shape` and `dtype` in the kept memory."""
        size = int(np.prod(shape)) * np.dtype(dtype).itemsize
        if self._raw is None or self._raw.nbytes < size:
            self._raw = None  # the old memory goes before the new is taken
            self._raw = aligned_empty((size,), np.uint8)
        return self._raw[:size].view(dtype).reshape(shape)


def aligned_empty(shape: tuple[int, ...], dtype, align: int = 64) -> np.ndarray:
    """An uninitialized host array starting on an `align`-byte boundary (XLA:CPU aliases only such buffers)."""
    dtype = np.dtype(dtype)
    size = int(np.prod(shape)) * dtype.itemsize
    raw = np.empty(size + align, np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start : start + size].view(dtype).reshape(shape)


GRAM_CHUNK = 65536  # rows cast to float32 at a time by `gramian_via_host`


@functools.cache
def _blas() -> ThreadpoolController:
    """threadpoolctl's handle on the loaded BLAS libraries, found once: `threadpool_limits` scans
    every loaded library at each call (py-spy: about 48 ms an epoch at ML-1M's shape, load 3-4)."""
    return ThreadpoolController()


def gramian_via_host(mesh: Mesh, table: jax.Array) -> jax.Array:
    """`T^T T` [d, d] float32, replicated, summed in host memory (no collective; one process).

    Each shard is read in place (a NumPy view of its CPU buffer) and cast to float32 a chunk of
    rows at a time, so a bfloat16 table never gets a float32 copy; parts are summed in float64.
    The chunks are shared among a thread per core, each with its own sum and scratch.
    """
    d = table.shape[1]
    chunks = [(rows, lo) for rows in (np.asarray(s.data) for s in table.addressable_shards)
              for lo in range(0, len(rows), GRAM_CHUNK)]
    workers = max(1, min(host_threads(), len(chunks)))

    def part(w: int) -> np.ndarray:
        total = np.zeros((d, d))
        bits = np.empty((min(GRAM_CHUNK, table.shape[0]), d), np.uint32)
        for rows, lo in chunks[w::workers]:
            t = host_float32(rows[lo : lo + GRAM_CHUNK], bits)
            total += t.T @ t
        return total

    # BLAS at one thread per caller: its spinning pool threads ran this 6x slower on the busy per-core host
    with _blas().limit(limits=1, user_api="blas"):
        if workers == 1:
            total = part(0)
        else:
            with ThreadPoolExecutor(workers, thread_name_prefix="alx-gram") as pool:
                total = sum(pool.map(part, range(workers)))
    return jax.device_put(total.astype(np.float32), NamedSharding(mesh, P()))


def host_float32(rows: np.ndarray, scratch: np.ndarray | None = None) -> np.ndarray:
    """float32 `rows` of a table on the host; bfloat16 (or its `BF16_BITS` solving form) by shifting
    its bits, into `scratch` when given (5x faster than ml_dtypes' cast)."""
    if rows.dtype not in (jnp.bfloat16, BF16_BITS):
        return np.asarray(rows, np.float32)  # float32 rows as they are (no copy)
    out = np.empty(rows.shape, np.uint32) if scratch is None else scratch[: len(rows)]
    np.left_shift(rows.view(np.uint16), 16, out=out, dtype=np.uint32)
    return out.view(np.float32)


def _long_stats(spec: StepSpec, src_l, ids):
    h = _fixed_rows(spec, src_l, ids[0])  # [B, L, d]
    a = jnp.einsum("bld,ble->de", h, h)
    return a[None], h.sum(axis=(0, 1))[None]


@functools.lru_cache(maxsize=None)
def make_long_stats(mesh: Mesh, spec: StepSpec):
    """`long_stats(src, ids [D, B, L]) -> (A_obs [D, d, d], b [D, d])`: one long-row part per device."""
    fn = jax.shard_map(
        functools.partial(_long_stats, spec),
        mesh=mesh,
        in_specs=(P() if spec.replicated_src else P(AXIS), P(AXIS)),
        out_specs=(P(AXIS), P(AXIS)),
        check_vma=False,
    )
    return jax.jit(fn)


@functools.partial(jax.jit, static_argnames=("iters", "chunk", "resident", "loss"))
def long_cg(src, ids, slot, x0, lam, gram, alpha, iters: int, chunk: int, resident: bool, loss: bool):
    """Matrix-free CG for a group of long rows on one device (the fixed table `src` whole there), float32.

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

    def batch_pass(h, ids_b, p_b, target):  # batches [..., B*L]: sum_i h_i e_i [..., d], sum_i e_i^2 [...]
        e = jnp.where(ids_b >= 0, target - jnp.einsum("...nd,...d->...n", h, p_b), 0)
        return jnp.einsum("...n,...nd->...d", e, h), jnp.sum(e * e, axis=-1)

    def passes(p, target):  # p [K, d]: each batch's row vector
        if resident and k == chunk:  # the whole block at once: no slice of it copied
            return batch_pass(block, flat, p, target)

        def one(xs):
            ids_b, p_b = xs[:2]
            return jax.lax.cond(
                ids_b[0] >= 0,
                lambda: batch_pass(xs[2] if resident else row_gather(src, ids_b), ids_b, p_b, target),
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
    """`table_l` (one device's shard) with rows `ids` (shard-local, PAD_ID ignored) set to `values`."""
    return local_update(table_l, ids, values, 0)


def _solve_scatter(spec: StepSpec, dst_l, fixed: Fixed, a_obs, b, row_ids, row_len):
    x0 = _rows_in(spec, dst_l, row_ids[0])
    x, terms = _solve_explicit(spec, fixed, a_obs[0], b[0], x0, row_ids[0], row_len[0])
    return _rows_out(spec, dst_l, row_ids[0], x), (terms[None] if spec.owner else jax.lax.psum(terms, AXIS))


@functools.lru_cache(maxsize=None)
def make_solve_scatter(mesh: Mesh, spec: StepSpec):
    """`solve_scatter(dst, (gram, hyper), A_obs [D,R,d,d], b [D,R,d], row_ids, row_len) -> (dst, terms)` for long rows."""
    fn = jax.shard_map(
        functools.partial(_solve_scatter, spec),
        mesh=mesh,
        in_specs=(P(AXIS), P(), P(AXIS), P(AXIS), P(AXIS), P(AXIS)),
        out_specs=(P(AXIS), _terms_spec(spec)),
        check_vma=False,
    )
    return jax.jit(fn, donate_argnums=(0,))


def host_batch(mesh: Mesh, local: np.ndarray) -> jax.Array:
    """A global [devices, ...] array sharded by its first axis from this process's [local devices, ...] part."""
    sharding = row_sharding(mesh)
    global_shape = (mesh.size,) + local.shape[1:]
    return jax.make_array_from_process_local_data(sharding, local, global_shape)


def local_rows(array: jax.Array) -> np.ndarray:
    """This process's rows of an array sharded by its first axis, in order."""
    shards = sorted(array.addressable_shards, key=lambda s: s.index[0].start or 0)
    return np.concatenate([np.asarray(s.data) for s in shards])
