"""`alx_trainer.jax_compat`: the private JAX names it relies on exist in the installed JAX, and it
is the only module of the trainer that imports `jax._src`."""

import pathlib

from jax._src import distributed

from alx_trainer import jax_compat

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_private_names_exist_in_installed_jax():
    state = distributed.global_state
    assert hasattr(state, "client") and hasattr(state, "preemption_sync_manager")
    # not initialized in this process: no client, no preemption service
    assert jax_compat.distributed_client() is None
    assert jax_compat.preemption_service_on() is False


def test_only_jax_compat_imports_jax_private_modules():
    users = [
        str(p.relative_to(ROOT))
        for p in (ROOT / "alx_trainer").rglob("*.py")
        if "jax._src" in p.read_text(encoding="utf-8")
    ]
    assert users == ["alx_trainer/jax_compat.py"]
