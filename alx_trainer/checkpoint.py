"""Orbax checkpoints of the two tables, the epoch and the config under `<model_dir>/checkpoints`.

A checkpoint is written atomically (orbax renames a finished temporary directory), so a process
killed at any moment leaves the last complete epoch to resume from. Step number = epochs done.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any, Iterator, Sequence

import jax
import numpy as np
import orbax.checkpoint as ocp

from alx_trainer.data import integrity
from alx_trainer.data.host_cores import widened
from webgraph_contract import fileio

CHECKPOINT_SUBDIR = "checkpoints"


def manager(model_dir: str, keep: int = 3, read_only: bool = False) -> ocp.CheckpointManager:
    path = os.path.join(model_dir, CHECKPOINT_SUBDIR)
    path = fileio.absolute(path)
    # read-only: the settings orbax would otherwise change itself, with a warning each
    options = ocp.CheckpointManagerOptions(
        max_to_keep=None if read_only else keep,
        save_interval_steps=0 if read_only else 1,
        create=not read_only,
        read_only=read_only,
        enable_async_checkpointing=False,
    )
    # Uncompressed tables: zstd gains little on float tables and its encoded copy nearly doubles
    # the peak memory of a save (docs/benchmarks.md, "Figures behind code choices").
    handlers = {
        "tables": ocp.PyTreeCheckpointHandler(use_compression=False),
        "meta": ocp.JsonCheckpointHandler(),
    }
    with _without_read_only_notice():
        return ocp.CheckpointManager(
            path, options=options, item_names=("tables", "meta"), item_handlers=handlers
        )


class _ReadOnlyNotice(logging.Filter):
    """Drops orbax's `Given directory is read only=...` warning: reading a model is no problem."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Given directory is read only")


@contextlib.contextmanager
def _without_read_only_notice() -> Iterator[None]:
    """orbax (through absl's Python logger) without its read-only notice for the block."""
    logger, notice = logging.getLogger("absl"), _ReadOnlyNotice()
    logger.addFilter(notice)
    try:
        yield
    finally:
        logger.removeFilter(notice)


def save(
    mgr: ocp.CheckpointManager, epoch: int, tables: dict[str, jax.Array], meta: dict[str, Any]
) -> None:
    """Save the sharded tables (every process writes its shards) and JSON metadata for `epoch`."""
    # a plain dict: orbax knows the pytree of no mapping type but dict's
    tree = ocp.args.PyTreeSave(dict(tables))
    mgr.save(epoch, args=ocp.args.Composite(tables=tree, meta=ocp.args.JsonSave(meta)))
    mgr.wait_until_finished()


def _restore_args(abstract: dict[str, jax.ShapeDtypeStruct]) -> ocp.args.PyTreeRestore:
    """Restore the tables as `abstract` says (shape, dtype, sharding)."""
    return ocp.args.PyTreeRestore(
        item=abstract, restore_args=ocp.checkpoint_utils.construct_restore_args(abstract)
    )


def resume(
    mgr: ocp.CheckpointManager,
    tables: dict[str, jax.Array],
    model_dir: str,
    data: str,
    fingerprint: str | None,
) -> int:
    """Restore the latest checkpoint into `tables` (in place, with their shapes, dtypes and
    shardings); the epoch it holds (0: none).

    A checkpoint of another dataset (its recorded fingerprint differs from `fingerprint`, that of
    `--data data`) or of other table shapes is refused before its tables are read.
    """
    epoch = mgr.latest_step() or 0
    if not epoch:
        return 0
    meta = mgr.restore(epoch, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
    integrity.check_same_data(
        model_dir,
        meta.get("dataset_fingerprint"),
        meta.get("config", {}).get("data", "?"),
        data,
        fingerprint,
    )
    shapes = {k: list(v.shape) for k, v in tables.items()}
    if meta["table_shapes"] != shapes:
        raise ValueError(
            f"{model_dir}: checkpoint tables {meta['table_shapes']} do not match this run "
            f"({shapes}); same dataset, dim, tied and device count needed to resume"
        )
    abstract = {
        k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=v.sharding) for k, v in tables.items()
    }
    out = mgr.restore(epoch, args=ocp.args.Composite(tables=_restore_args(abstract)))
    for name, table in out["tables"].items():
        tables[name] = table
    return epoch


def restore_numpy(
    model_dir: str, epoch: int | None = None, names: Sequence[str] | None = None
) -> tuple[dict[str, np.ndarray], dict, int]:
    """Tables as host NumPy arrays (padded), the metadata and the epoch; FileNotFoundError if
    none. `names`: only those of the saved tables (None: all)."""
    path = os.path.join(model_dir, CHECKPOINT_SUBDIR)
    if not fileio.isdir(path):
        raise FileNotFoundError(f"{path}: no checkpoints; train a model into {model_dir} first")
    mgr = manager(model_dir, read_only=True)
    epoch = mgr.latest_step() if epoch is None else epoch
    if epoch is None:
        raise FileNotFoundError(f"{path}: no complete checkpoint")
    meta = mgr.restore(epoch, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
    # knows bfloat16
    dtype = jax.numpy.dtype(meta["table_dtype"])
    # a table at a time, straight to host NumPy in the saved dtype (no device copy), widened to
    # float32 before the next is read
    tables = {}
    for name in meta["table_shapes"]:
        if names is not None and name not in names:
            continue
        args = ocp.args.PyTreeRestore(
            item={name: np.zeros(0, dtype)},
            restore_args={name: ocp.RestoreArgs(restore_type=np.ndarray, dtype=dtype)},
            partial_restore=True,
        )
        saved = mgr.restore(epoch, args=ocp.args.Composite(tables=args))["tables"][name]
        tables[name] = widened(saved)
        del saved
    mgr.close()
    return tables, dict(meta), epoch
