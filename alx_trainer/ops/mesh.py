"""The 1-D device mesh, its row sharding, and moving [devices, ...] arrays between host and mesh.

Both tables are `[rows_padded, d]` arrays sharded by rows over the mesh axis `AXIS`.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = "d"


def make_mesh(devices=None) -> Mesh:
    """A 1-D mesh over all devices (of every process)."""
    return Mesh(np.asarray(devices if devices is not None else jax.devices()), (AXIS,))


def padded_rows(n: int, mesh: Mesh) -> int:
    """Rows of a table padded to a multiple of the device count."""
    d = mesh.size
    return max(d, -(-n // d) * d)


def row_sharding(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P(AXIS))


def device_parts(array: jax.Array) -> dict:
    """This process's shards of `array` by device (single-device arrays sharing its buffers)."""
    return {s.device: s.data for s in array.addressable_shards}


def host_batch(mesh: Mesh, local: np.ndarray) -> jax.Array:
    """A global [devices, ...] array sharded by its first axis from this process's [local devices,
    ...] part."""
    sharding = row_sharding(mesh)
    global_shape = (mesh.size,) + local.shape[1:]
    return jax.make_array_from_process_local_data(sharding, local, global_shape)


def local_rows(array: jax.Array) -> np.ndarray:
    """This process's rows of an array sharded by its first axis, in order."""
    shards = sorted(array.addressable_shards, key=lambda s: s.index[0].start or 0)
    return np.concatenate([np.asarray(s.data) for s in shards])


def replicated(mesh: Mesh) -> NamedSharding:
    """The whole array on every device of `mesh`."""
    return NamedSharding(mesh, P())
