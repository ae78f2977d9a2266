"""The one module that reaches into JAX's private modules (`jax._src`); everything else asks here.

JAX keeps no public handle on its distributed runtime's key-value store or preemption service:
`jax._src.distributed.global_state` holds both once `jax.distributed.initialize` has run. A JAX
release that moves them breaks this module only (`tests/test_jax_compat.py` checks the names).
"""

from __future__ import annotations

from typing import Any

from jax._src import distributed as _distributed


def distributed_client() -> Any | None:
    """The distributed runtime's client (its key-value store: `key_value_set`,
    `blocking_key_value_get`), or None when `jax.distributed` is not initialized."""
    return _distributed.global_state.client


def preemption_service_on() -> bool:
    """Whether JAX's preemption service runs (a multi-process run: it takes SIGTERM and agrees on a
    step every process reaches, `multihost_utils.reached_preemption_sync_point`)."""
    return _distributed.global_state.preemption_sync_manager is not None
