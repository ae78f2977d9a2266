"""Row lookups and updates inside `shard_map` (paper 4.2): a device's shard, and the sharded
gather/scatter.

- sharded gather: `all_gather` the batch ids, masked lookup in the local shard, `psum_scatter`
  (the reduce half of the paper's all-reduce: each device keeps only its own batch).
- sharded scatter: `all_gather` the solved rows and their ids, masked local update.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from alx_trainer.execution import AXIS, StepSpec
from alx_trainer.ops.table_storage import as_float32, as_stored


def shard_start(table_l: jax.Array) -> jax.Array:
    """The global row id of this device's first table row (inside `shard_map`)."""
    return jax.lax.axis_index(AXIS) * table_l.shape[0]


def local_lookup(table_l: jax.Array, ids: jax.Array, start) -> jax.Array:
    """Rows of the local shard for `ids` counted from `start`; zero where the id lives elsewhere."""
    shard = table_l.shape[0]
    local = ids - start
    mine = (local >= 0) & (local < shard)
    rows = as_float32(jnp.take(table_l, jnp.where(mine, local, 0), axis=0))
    return jnp.where(mine[..., None], rows, 0.0)


def sharded_gather(table_l: jax.Array, ids: jax.Array) -> jax.Array:
    """float32 embeddings of this device's `ids` ([...]) from the row-sharded table."""
    all_ids = jax.lax.all_gather(ids, AXIS)  # [D, ...]
    found = local_lookup(table_l, all_ids, shard_start(table_l))
    return jax.lax.psum_scatter(found, AXIS, scatter_dimension=0, tiled=True)[0]


def local_update(table_l: jax.Array, ids: jax.Array, values: jax.Array, start) -> jax.Array:
    """Write the rows of `values` [n, d] whose `ids` [n] (counted from `start`) live in this
    shard."""
    shard = table_l.shape[0]
    local = ids - start
    mine = (local >= 0) & (local < shard)
    return table_l.at[jnp.where(mine, local, shard)].set(
        as_stored(values, table_l.dtype), mode="drop"
    )


def sharded_scatter(table_l: jax.Array, ids: jax.Array, values: jax.Array) -> jax.Array:
    """Write `values` [R, d] at global row `ids` [R] (PAD -1 ignored) into the sharded table."""
    all_ids = jax.lax.all_gather(ids, AXIS).reshape(-1)
    all_values = jax.lax.all_gather(values, AXIS).reshape(-1, values.shape[-1])
    return local_update(table_l, all_ids, all_values, shard_start(table_l))


def rows_in(spec: StepSpec, table_l: jax.Array, ids: jax.Array) -> jax.Array:
    """float32 rows `ids` of the table being solved ('owner': ids are rows of this device's
    shard)."""
    return local_lookup(table_l, ids, 0) if spec.owner else sharded_gather(table_l, ids)


def rows_out(spec: StepSpec, table_l: jax.Array, ids: jax.Array, values: jax.Array) -> jax.Array:
    return (
        local_update(table_l, ids, values, 0)
        if spec.owner
        else sharded_scatter(table_l, ids, values)
    )


def fixed_rows(spec: StepSpec, src_l: jax.Array, ids: jax.Array) -> jax.Array:
    """float32 rows `ids` of the fixed table (zeros at padding ids)."""
    if spec.replicated_src:  # a plain local lookup, no collective
        return row_gather(src_l, ids)
    return sharded_gather(src_l, ids)


def stored_rows(spec: StepSpec, src_l: jax.Array, ids: jax.Array) -> jax.Array:
    """Rows `ids` of the fixed table in its storage dtype (bfloat16, or its `BF16_BITS`, stay so),
    zeros at padding ids: the matrix-free kernels widen them inside each product."""
    if spec.replicated_src:
        return masked_gather(src_l, ids)
    all_ids = jax.lax.all_gather(ids, AXIS)
    local = all_ids - shard_start(src_l)
    # as `sharded_gather`, one device holds each row: a sum of one value and zeros (+0.0, bits 0)
    # is exact in any dtype
    mine = (local >= 0) & (local < src_l.shape[0])
    found = jnp.where(mine[..., None], jnp.take(src_l, jnp.where(mine, local, 0), axis=0), 0)
    return jax.lax.psum_scatter(found, AXIS, scatter_dimension=0, tiled=True)[0]


def _unmasked_gather(table: jax.Array, ids: jax.Array) -> jax.Array:
    """Whole rows `ids` of `table` promised in bounds (a padding id reads row 0)."""
    dims = jax.lax.GatherDimensionNumbers(
        offset_dims=(ids.ndim,), collapsed_slice_dims=(0,), start_index_map=(0,)
    )
    return jax.lax.gather(
        table,
        jnp.maximum(ids, 0)[..., None],
        dims,
        (1, table.shape[1]),
        mode=jax.lax.GatherScatterMode.PROMISE_IN_BOUNDS,
    )


def masked_gather(table: jax.Array, ids: jax.Array) -> jax.Array:
    """Rows `ids` of `table` in its own dtype, zeros at padding ids: the gather promised in bounds
    times the mask in the table's dtype (exact: 0 or 1; for `BF16_BITS` an integer product, and
    bits 0 are +0.0). No more bytes than the bare gather: the mask comes from the ids it reads.

    The product is also what keeps XLA:CPU fast: it runs a fusion whose root is the bare gather
    as a slow copy (measured in docs/benchmarks.md, "Figures behind code choices").
    """
    return _unmasked_gather(table, ids) * (ids >= 0)[..., None].astype(table.dtype)


def row_gather(table: jax.Array, ids: jax.Array) -> jax.Array:
    """float32 rows `ids` ([...], PAD_ID -1 allowed) of `table`, zeros at padding: [..., d].

    A gather of whole rows promised in bounds (padding reads row 0), then a multiply by the
    mask. XLA:CPU compiles the bounds-checked form (`take(mode="fill")` or a `where` after it)
    into one per-element loop that re-derives every element's index, several times slower.
    """
    return as_float32(_unmasked_gather(table, ids)) * (ids >= 0)[..., None].astype(jnp.float32)
