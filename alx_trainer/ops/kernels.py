"""The compiled `shard_map` kernels of one half-epoch (paper 4.2, Algorithm 2).

- `make_gramian`: local `T_mu^T T_mu`, then `psum`.
- a step (`make_step`): gather the fixed rows of K stacked dense batches (`gather_scatter`), solve
  each row's normal equations (paper Eq. 4) with the configured solver in float32 ('block': the
  iALS++ sweep of `block_solver`; CG 'matvec': without building d x d matrices), write the rows
  back; a `lax.scan` over the K batches, so fewer dispatches per half-epoch. On a CPU host split
  into one device per core, the 'owner' step also compiles per device (`make_device_step`) and
  each device's calls run in their own pinned thread (`execution.run_per_core`).
- "local statistics" (paper 4.2 alternative): each device builds partial d x d statistics of every
  device's batch from its own shard only, then one `psum_scatter` sums them.
- an epoch in one call (`make_epoch`: the accelerator path with resident batches): both
  half-epochs (`make_half_epoch`'s body each) and the gramians of the solved tables.
- long rows (more than one batch): `make_long_stats` (a part of their statistics per device),
  `make_solve_scatter` (solve from summed statistics, write back).
Every step kernel also returns the loss terms of the rows it solved (observed loss, weighted L2,
row count); the matrix-free kernel skips the observed loss when `observed_loss` is off. Each
factory makes its program once per parameters, its executables kept across runs
(`compile_cache.kept_program`).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from alx_trainer.compile_cache import kept_program
from alx_trainer.execution import AXIS, Fixed, StepSpec
from alx_trainer.ops import block_solver, solvers
from alx_trainer.ops.gather_scatter import (
    fixed_rows,
    local_lookup,
    rows_in,
    rows_out,
    shard_start,
    sharded_gather,
    sharded_scatter,
    stored_rows,
)
from alx_trainer.ops.table_storage import as_float32


def _gramian_local(table_l: jax.Array) -> jax.Array:
    """`T^T T` summed over the devices' shards (`T_mu^T T_mu` each), float32."""
    t = table_l.astype(jnp.float32)
    return jax.lax.psum(t.T @ t, AXIS)


@kept_program
def make_gramian(mesh: Mesh):
    """`gramian(table) -> [d, d]` float32, replicated."""
    return jax.jit(
        jax.shard_map(_gramian_local, mesh=mesh, in_specs=P(AXIS), out_specs=P(), check_vma=False)
    )


def row_reg(num_other: int, hyper, row_len, xp=jnp):
    """lambda * (n + alpha * num_other) ** nu per row (plain lambda when nu = 0), in the dtype of
    `hyper` and the array namespace `xp` (NumPy float64 for the host's long rows).

    A row with no link at alpha = 0 has base 0, whose power is 0 or inf: its objective is then
    lambda 0^nu |x|^2 with no other term, minimized (least norm, or in the limit) by x = 0, which
    plain lambda gives as well (its right-hand side is 0); 0 or inf would make the exact solvers'
    systems singular or infinite."""
    alpha, reg, nu = hyper[0], hyper[1], hyper[2]
    base = row_len.astype(hyper.dtype) + alpha * num_other
    scaled = (nu != 0) & (base > 0)
    return reg * xp.where(scaled, xp.where(base > 0, base, 1.0) ** nu, 1.0)


def outer_sums(h: jax.Array, precision: str) -> jax.Array:
    """sum over l of h_l h_l^T per leading index ([..., L, d] -> [..., d, d]), summed in float32.

    'float32': full float32 products; 'tf32': float32 inputs at the backend's default matmul
    precision (TF32 on NVIDIA matrix units, float32 on CPU); 'bfloat16': inputs rounded to bfloat16.
    """
    if precision == "bfloat16":
        hb = h.astype(jnp.bfloat16)
        return jnp.einsum("...ld,...le->...de", hb, hb, preferred_element_type=jnp.float32)
    exact = jax.lax.Precision.HIGHEST if precision == "float32" else jax.lax.Precision.DEFAULT
    return jnp.einsum("...ld,...le->...de", h, h, precision=exact)


def _explicit_stats(
    h: jax.Array, seg: jax.Array, rows: int, precision: str
) -> tuple[jax.Array, jax.Array]:
    """Per-row sum_i h_i h_i^T [R, d, d] and sum_i h_i [R, d] from pieces h [B, L, d]."""
    outer = outer_sums(h, precision)
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
    x = solvers.solve_explicit(
        spec.solver, a, jnp.where(valid[:, None], b, 0), x0, spec.cg_iters, spec.block_size
    )
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


def _matvec_cg(spec: StepSpec, fixed: Fixed, h, ids, seg, x0, row_ids, row_len):
    """Matrix-free CG on one batch: h [B, L, d] (the table's dtype; padding masked by `dots`, so
    its rows there may be anything finite), x0 [R, d].

    Every pass over h is a product that widens h to float32 inside it (never a float32 copy of
    h): `dots` (h_l . v of each entry's row) and `sums` (sum over a row's entries of w_l h_l).
    r0 = sum_l (1 - h_l.x0) h_l - (alpha G + lambda) x0 takes two passes and each CG step two;
    the observed loss takes none: h_l.x = h_l.x0 + sum_k step_k h_l.p_k from the steps' `dots`.
    """
    gram, hyper = fixed
    alpha, rows = hyper[0], row_ids.shape[0]
    valid = row_ids >= 0
    lam = row_reg(spec.num_other, hyper, row_len)
    mask = (ids >= 0).astype(jnp.float32)
    wide = as_float32(h)  # converted inside each consuming fusion (XLA duplicates the convert)

    # [R, ...] -> [B, ...]: the value of each piece's row (zero for padding pieces)
    def per_piece(
        v,
    ):
        return jnp.take(v, seg, axis=0, mode="fill", fill_value=0)

    # Batched products (dot_general): on CPU an elementwise product and sum of the same shape ran
    # the per-core path about 2x slower per epoch.
    def dots(v):  # [R, d] -> [B, L]
        return mask * jnp.einsum("bld,bd->bl", wide, per_piece(v))

    def sums(w):  # [B, L] -> [R, d]
        return jax.ops.segment_sum(jnp.einsum("bl,bld->bd", w, wide), seg, num_segments=rows)

    def rest(v):  # (alpha G + lambda) v
        return alpha * (v @ gram) + lam[:, None] * v

    hx = dots(x0)
    state = solvers.cg_start(x0, sums(mask - hx) - rest(x0))

    def step(_, carry):
        state, hx = carry
        hp = dots(state.p)
        state, size = solvers.cg_update(state, sums(hp) + rest(state.p))
        return state, (hx + per_piece(size) * hp if spec.observed_loss else hx)

    state, hx = jax.lax.fori_loop(0, spec.cg_iters, step, (state, hx), unroll=spec.unroll)
    x = jnp.where(valid[:, None], state.x, 0)
    if spec.observed_loss:
        observed = jax.ops.segment_sum((mask * (1 - hx) ** 2).sum(axis=1), seg, num_segments=rows)
    else:
        observed = jnp.zeros(rows, jnp.float32)
    return x, _loss_terms(valid, observed, lam, x)


def _batch_gather(spec: StepSpec, src_l, dst_l, fixed: Fixed, ids, seg, row_ids, row_len):
    """Solve one dense batch (ids [B, L], seg [B], row_ids/row_len [R]); returns (dst_l, terms)."""
    gram, hyper = fixed
    alpha = hyper[0]
    rows = row_ids.shape[0]
    matvec = spec.cg_matvec
    x0 = rows_in(spec, dst_l, row_ids)  # warm start [R, d]
    # [B, L, d], zeros at padding: in the table's dtype for the matrix-free CG, else float32
    h = stored_rows(spec, src_l, ids) if matvec else fixed_rows(spec, src_l, ids)
    if spec.solver == "block":  # iALS++: never builds the d x d matrices
        valid = row_ids >= 0
        lam = row_reg(spec.num_other, hyper, row_len)
        x, err = block_solver.sweep(h, seg, x0, gram, lam, alpha, valid, spec.block_size)
        # errors of the final x: the observed loss
        per_entry = jnp.where(ids >= 0, err**2, 0).sum(axis=1)
        terms = _loss_terms(valid, jax.ops.segment_sum(per_entry, seg, num_segments=rows), lam, x)
    elif matvec:
        x, terms = _matvec_cg(spec, fixed, h, ids, seg, x0, row_ids, row_len)
    else:
        a_obs, b = _explicit_stats(h, seg, rows, spec.precision)
        x, terms = _solve_explicit(spec, fixed, a_obs, b, x0, row_ids, row_len)
    return rows_out(spec, dst_l, row_ids, x), terms


def _batch_local(spec: StepSpec, src_l, dst_l, fixed: Fixed, ids, seg, row_ids, row_len):
    """One dense batch with the paper's "local statistics" (sharded layout only)."""
    rows = row_ids.shape[0]
    all_ids = jax.lax.all_gather(ids, AXIS)  # [D, B, L]
    all_seg = jax.lax.all_gather(seg, AXIS)  # [D, B]
    h = local_lookup(src_l, all_ids, shard_start(src_l))  # only this shard's rows, zeros elsewhere
    a_part, b_part = jax.vmap(lambda hh, ss: _explicit_stats(hh, ss, rows, spec.precision))(
        h, all_seg
    )
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
        return jax.lax.cond(
            jnp.any(batch[2] >= 0),
            lambda t: body(t, fixed, *batch),
            lambda t: (t, jnp.zeros(3)),
            dst_l,
        )

    dst_l, terms = jax.lax.scan(
        one, dst_l, (ids[0], seg[0], row_ids[0], row_len[0]), unroll=spec.unroll
    )
    terms = terms.sum(axis=0)
    return dst_l, (terms[None] if spec.owner else jax.lax.psum(terms, AXIS))


def _terms_spec(spec: StepSpec):
    """Loss terms come back summed over devices ([3], replicated), or per device ([D, 3]) for
    'owner'."""
    return P(AXIS) if spec.owner else P()


def _solve_program(mesh: Mesh, spec: StepSpec, body, terms_spec: P):
    """`body(spec, src, dst, fixed, 4 batch arrays) -> (dst, terms)` compiled over the mesh: `src`
    replicated or sharded by the layout, `dst` sharded and donated, the batch arrays sharded."""
    fn = jax.shard_map(
        functools.partial(body, spec),
        mesh=mesh,
        in_specs=(P() if spec.replicated_src else P(AXIS), P(AXIS), P(), *(P(AXIS),) * 4),
        out_specs=(P(AXIS), terms_spec),
        check_vma=False,
    )
    return jax.jit(fn, donate_argnums=(1,))


@kept_program
def make_step(mesh: Mesh, spec: StepSpec):
    """`step(src, dst, (gram, hyper), ids, seg, row_ids, row_len) -> (dst, terms)`.

    `src` is the fixed table (replicated unless the layout is 'sharded'), `dst` the table being
    solved (donated, updated in place); the batch arrays are [D, K, ...] (K batches per device).
    """
    return _solve_program(mesh, spec, _step, _terms_spec(spec))


@kept_program
def make_device_step(spec: StepSpec):
    """The 'owner' step of one device on single-device arrays (no mesh: run per device, see
    `execution.run_per_core`).

    Same arguments as `make_step` with a leading device axis of 1; one compilation per device.
    """
    if not spec.owner:
        raise ValueError("a per-device step needs the 'owner' layout (it has no collective)")
    return jax.jit(functools.partial(_step, spec), donate_argnums=(1,))


@kept_program
def make_replicate(mesh: Mesh):
    """`replicate(table)`: the whole table on every device (one all-gather)."""
    return jax.jit(lambda t: t, out_shardings=NamedSharding(mesh, P()))


def _long_stats(spec: StepSpec, src_l, ids):
    h = fixed_rows(spec, src_l, ids[0])  # [B, L, d]
    a = jnp.einsum("bld,ble->de", h, h)
    return a[None], h.sum(axis=(0, 1))[None]


@kept_program
def make_long_stats(mesh: Mesh, spec: StepSpec):
    """`long_stats(src, ids [D, B, L]) -> (A_obs [D, d, d], b [D, d])`: one long-row part per
    device."""
    fn = jax.shard_map(
        functools.partial(_long_stats, spec),
        mesh=mesh,
        in_specs=(P() if spec.replicated_src else P(AXIS), P(AXIS)),
        out_specs=(P(AXIS), P(AXIS)),
        check_vma=False,
    )
    return jax.jit(fn)


def _solve_scatter(spec: StepSpec, dst_l, fixed: Fixed, a_obs, b, row_ids, row_len):
    x0 = rows_in(spec, dst_l, row_ids[0])
    x, terms = _solve_explicit(spec, fixed, a_obs[0], b[0], x0, row_ids[0], row_len[0])
    return rows_out(spec, dst_l, row_ids[0], x), (
        terms[None] if spec.owner else jax.lax.psum(terms, AXIS)
    )


@kept_program
def make_solve_scatter(mesh: Mesh, spec: StepSpec):
    """`solve_scatter(dst, (gram, hyper), A_obs [D,R,d,d], b [D,R,d], row_ids, row_len) -> (dst,
    terms)` for long rows."""
    fn = jax.shard_map(
        functools.partial(_solve_scatter, spec),
        mesh=mesh,
        in_specs=(P(AXIS), P(), P(AXIS), P(AXIS), P(AXIS), P(AXIS)),
        out_specs=(P(AXIS), _terms_spec(spec)),
        check_vma=False,
    )
    return jax.jit(fn, donate_argnums=(0,))


def _long_solve(spec: StepSpec, src_l, dst_l, fixed: Fixed, ids, slot, row_ids, row_len):
    """This device's long rows: K batches ([1, K, B, L]) each of one row (its slot in [1, K], R for
    padding) summed into R rows' statistics, then solved and written back as a normal batch's."""
    rows, d = row_ids.shape[1], fixed.gramian.shape[0]

    def one(acc, batch):
        a, b = acc
        ids_k, slot_k = batch
        h = fixed_rows(spec, src_l, ids_k).reshape(1, -1, d)  # [1, B*L, d]
        return (
            a.at[slot_k].add(outer_sums(h, spec.precision)[0]),
            b.at[slot_k].add(h[0].sum(axis=0)),
        ), None

    init = (jnp.zeros((rows + 1, d, d), jnp.float32), jnp.zeros((rows + 1, d), jnp.float32))
    (a, b), _ = jax.lax.scan(one, init, (ids[0], slot[0]), unroll=spec.unroll)
    return _solve_scatter(spec, dst_l, fixed, a[None, :rows], b[None, :rows], row_ids, row_len)


@kept_program
def make_long_solve(mesh: Mesh, spec: StepSpec):
    """`long_solve(src, dst, (gram, hyper), ids [D,K,B,L], slot [D,K], row_ids [D,R], row_len [D,R])
    -> (dst, terms)`:
    long rows wholly on the devices (the accelerator path; 'sharded' or 'replicated' layout)."""
    if spec.owner:
        raise ValueError("the device long-row solve takes the 'sharded' or 'replicated' layout")
    return _solve_program(mesh, spec, _long_solve, P())


def _half_epoch(spec: StepSpec, src_l, dst_l, fixed: Fixed, normal, longs):
    """A whole half-epoch on resident batches: the normal rows' scan (`normal`: its 4 arrays, or
    None), each long-row call's solve (`longs`), then the gramian of the solved table."""
    if spec.layout == "replicated":  # the fixed table whole on every device, inside this program
        src_l = jax.lax.all_gather(src_l, AXIS, tiled=True)
    terms = jnp.zeros(3, jnp.float32)
    if normal is not None:
        dst_l, terms = _step(spec, src_l, dst_l, fixed, *normal)
    for call in longs:
        dst_l, more = _long_solve(spec, src_l, dst_l, fixed, *call)
        terms = terms + more
    return dst_l, terms, _gramian_local(as_float32(dst_l))


@kept_program
def make_half_epoch(mesh: Mesh, spec: StepSpec, normal: bool, longs: int):
    """`half_epoch(src, dst, (gram, hyper), normal, longs) -> (dst, terms, gramian(dst))`: one
    compiled call per half-epoch (the accelerator path's resident batches; 'sharded' or
    'replicated', `src` sharded either way). `normal` is a `make_step` call's 4 batch arrays (or
    None when `normal` is False), `longs` a tuple of `longs` `make_long_solve` calls' 4 arrays."""
    if spec.owner:
        raise ValueError("a one-call half-epoch takes the 'sharded' or 'replicated' layout")
    batch = (P(AXIS),) * 4
    fn = jax.shard_map(
        functools.partial(_half_epoch, spec),
        mesh=mesh,
        in_specs=(P(AXIS), P(AXIS), P(), batch if normal else None, (batch,) * longs),
        out_specs=(P(AXIS), P(), P()),
        check_vma=False,
    )
    return jax.jit(fn, donate_argnums=(1,))


def _epoch(row_spec: StepSpec, col_spec: StepSpec, tables, fixed: Fixed, row_batches, col_batches):
    """A whole epoch on resident batches: the row half-epoch against `fixed` (the gramian of the
    fixed table, which the caller holds from the last epoch, and the hyperparameters), then the
    column half-epoch against the gramian of the solved rows (`_half_epoch` each): two gramians
    computed, those of the solved tables. `tables` is (row, col), or (table,) when tied: both
    half-epochs then solve the one table, each reading it as it was when the half-epoch began."""
    tied = len(tables) == 1
    row_l, other_l = tables[0], tables[-1]
    row_l, terms_r, g_row = _half_epoch(row_spec, other_l, row_l, fixed, *row_batches)
    col_l, terms_c, g_col = _half_epoch(
        col_spec, row_l, row_l if tied else other_l, Fixed(g_row, fixed.hyper), *col_batches
    )
    return (col_l,) if tied else (row_l, col_l), jnp.stack([terms_r, terms_c]), (g_row, g_col)


@kept_program
def make_epoch(
    mesh: Mesh, row_spec: StepSpec, col_spec: StepSpec, tied: bool, row_calls, col_calls
):
    """`epoch(tables, (gram, hyper), row_batches, col_batches) -> (tables, terms [2, 3], (gramian
    of the solved rows, gramian of the solved columns))`: one compiled call per epoch (the
    accelerator path with both sides' batches resident; 'sharded' or 'replicated'). `tables`
    (donated) is (row, col), or (table,) when `tied`; `gram` is the gramian of the table the row
    side reads (the column table; the table itself when `tied`); each side's batches are
    `(normal, longs)` as `make_half_epoch` takes them, and `row_calls`, `col_calls` their
    (normal, longs) counts."""
    if row_spec.owner or col_spec.owner:
        raise ValueError("a one-call epoch takes the 'sharded' or 'replicated' layout")
    batch = (P(AXIS),) * 4

    def batches(calls: tuple[bool, int]):
        normal, longs = calls
        return (batch if normal else None, (batch,) * longs)

    fn = jax.shard_map(
        functools.partial(_epoch, row_spec, col_spec),
        mesh=mesh,
        in_specs=((P(AXIS),) * (1 if tied else 2), P(), batches(row_calls), batches(col_calls)),
        out_specs=((P(AXIS),) * (1 if tied else 2), P(), (P(), P())),
        check_vma=False,
    )
    return jax.jit(fn, donate_argnums=(0,))
