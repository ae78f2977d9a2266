"""The fixed table through host memory ('owner' layout, one process): its replica and its gramian.

No collective: CPU devices alias one host copy of the fixed table, and the gramian is summed
by a thread per core from the shards read in place.
"""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from threadpoolctl import ThreadpoolController

from alx_trainer.data.host_cores import host_threads
from alx_trainer.ops.table_storage import BF16_BITS, bits_dtype, gather_form


def replicate_via_host(
    mesh: Mesh, table: jax.Array, buffer: ReplicaBuffer | None = None
) -> jax.Array:
    """The whole table on every device through host memory (no collective; one process), in
    `gather_form`.

    One host copy: CPU devices alias it (`may_alias`, 64-byte aligned), so per-core devices share
    one fixed table instead of holding one each; one device just keeps the table it has. With
    `buffer`, the copy goes into its memory (see `ReplicaBuffer`), else into a fresh allocation.
    """
    if mesh.size == 1:
        return gather_form(table)
    bits = bits_dtype(table)
    host = aligned_empty(table.shape, bits) if buffer is None else buffer.view(table.shape, bits)

    # NumPy releases the GIL: the shards' copies (and first-touch faults) in parallel
    def copy(shard) -> None:
        host[shard.index] = np.asarray(shard.data).view(host.dtype)

    with ThreadPoolExecutor(host_threads(), thread_name_prefix="alx-replica") as pool:
        list(pool.map(copy, table.addressable_shards))
    return jax.device_put(host, NamedSharding(mesh, P()), may_alias=True)


class ReplicaBuffer:
    """Host memory for the fixed-table replica, kept from one half-epoch to the next.

    A fresh allocation per half-epoch is touched for the first time by the copy: a page fault per
    page, which costs many times the copy itself. Grown to the largest table it has held. A
    replica made in it is valid until the next one is: hold one at a time.
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
    """An uninitialized host array starting on an `align`-byte boundary (XLA:CPU aliases only such
    buffers)."""
    dtype = np.dtype(dtype)
    size = int(np.prod(shape)) * dtype.itemsize
    raw = np.empty(size + align, np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start : start + size].view(dtype).reshape(shape)


GRAM_CHUNK = 65536  # rows cast to float32 at a time by `gramian_via_host`


@functools.cache
def _blas() -> ThreadpoolController:
    """threadpoolctl's handle on the loaded BLAS libraries, found once: `threadpool_limits` scans
    every loaded library at each call, tens of milliseconds an epoch at ML-1M's shape."""
    return ThreadpoolController()


def gramian_via_host(mesh: Mesh, table: jax.Array) -> jax.Array:
    """`T^T T` [d, d] float32, replicated, summed in host memory (no collective; one process).

    Each shard is read in place (a NumPy view of its CPU buffer) and cast to float32 a chunk of
    rows at a time, so a bfloat16 table never gets a float32 copy; parts are summed in float64.
    The chunks are shared among a thread per core, each with its own sum and scratch.
    """
    d = table.shape[1]
    chunks = [
        (rows, lo)
        for rows in (np.asarray(s.data) for s in table.addressable_shards)
        for lo in range(0, len(rows), GRAM_CHUNK)
    ]
    workers = max(1, min(host_threads(), len(chunks)))

    def part(w: int) -> np.ndarray:
        total = np.zeros((d, d))
        bits = np.empty((min(GRAM_CHUNK, table.shape[0]), d), np.uint32)
        for rows, lo in chunks[w::workers]:
            t = host_float32(rows[lo : lo + GRAM_CHUNK], bits)
            total += t.T @ t
        return total

    # BLAS at one thread per caller: its spinning pool threads slow this down severely on a
    # per-core host whose cores are all busy
    with _blas().limit(limits=1, user_api="blas"):
        if workers == 1:
            total = part(0)
        else:
            with ThreadPoolExecutor(workers, thread_name_prefix="alx-gram") as pool:
                total = sum(pool.map(part, range(workers)))
    return jax.device_put(total.astype(np.float32), NamedSharding(mesh, P()))


def host_float32(rows: np.ndarray, scratch: np.ndarray | None = None) -> np.ndarray:
    """float32 `rows` of a table on the host; bfloat16 (or its `BF16_BITS` solving form) by shifting
    its bits, into `scratch` when given (faster than ml_dtypes' cast)."""
    if rows.dtype not in (jnp.bfloat16, BF16_BITS):
        return np.asarray(rows, np.float32)  # float32 rows as they are (no copy)
    out = np.empty(rows.shape, np.uint32) if scratch is None else scratch[: len(rows)]
    np.left_shift(rows.view(np.uint16), 16, out=out, dtype=np.uint32)
    return out.view(np.float32)
