"""Table storage forms: bfloat16 tables on CPU handed to the kernels as their uint16 bits.

XLA:CPU converts bfloat16 operands of gathers, scatters and dynamic-update-slices to float32
whole; the uint16 bits of the same memory avoid every such copy (see `solving_form`, `gather_form`).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

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
def bitcast(dtype):
    return jax.jit(lambda t: jax.lax.bitcast_convert_type(t, dtype), donate_argnums=(0,))


def bitcast_shards(table: jax.Array, dtype) -> jax.Array:
    """`table` reinterpreted as `dtype` (same width), one shard at a time, each shard donated."""
    parts = [bitcast(dtype)(s.data) for s in table.addressable_shards]
    return jax.make_array_from_single_device_arrays(table.shape, table.sharding, parts)


def solving_form(table: jax.Array) -> jax.Array:
    """The table a half-epoch solves into: a bfloat16 table on CPU becomes its uint16 bits.

    XLA:CPU has no bfloat16 scatter: it converts the whole shard to float32, scatters there and
    converts back, so each step held two shards' worth of float32 temporaries (and touched the
    whole shard per update). A uint16 scatter updates the rows in place. The reinterpretation
    itself holds one shard of temporary, shard by shard, once per half-epoch.
    """
    return bitcast_shards(table, BF16_BITS) if bits_dtype(table) == BF16_BITS else table


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
    bits = bits_dtype(table)
    if bits == table.dtype:
        return table
    parts = [
        jax.device_put(np.asarray(s.data).view(bits), s.device, may_alias=True)
        for s in table.addressable_shards
    ]
    return jax.make_array_from_single_device_arrays(table.shape, table.sharding, parts)


def bits_dtype(table: jax.Array) -> np.dtype:
    """The dtype XLA:CPU kernels take `table` as: `BF16_BITS` for bfloat16 on CPU, else its own."""
    cpu = all(d.platform == "cpu" for d in table.sharding.device_set)
    return np.dtype(BF16_BITS) if cpu and table.dtype == jnp.bfloat16 else np.dtype(table.dtype)


def stored_form(table: jax.Array) -> jax.Array:
    """The inverse of `solving_form`."""
    return bitcast_shards(table, jnp.bfloat16) if table.dtype == BF16_BITS else table
