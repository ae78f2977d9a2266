"""A model directory's writes: one training at a time (its lock), and orbax checkpoints of the two
tables, the epoch and the config under `<model_dir>/checkpoints`.

A checkpoint is written atomically (orbax renames a finished temporary directory), so a process
killed at any moment leaves the last complete epoch to resume from. Step number = epochs done.

The lock, `<model_dir>/train.lock`, holds the writer's host, pid and start. On a local
filesystem `hold_lock(model_dir)` opens the lock file and takes an exclusive `flock` on it, which
the kernel gives to one process at a time and releases when that process ends, however it ends;
of trainings started into one directory exactly one gets it, even when they all find a lock left
by a killed run, and the others stop with `LockHeld` naming the holder, before they write
anything. Under the flock the file's record is checked as well: a record of another host is never
guessed stale (the message says to remove the file once that training is known to be gone); one
of this host whose pid no longer runs, or runs but started at another time (the pid was reused),
is taken over with a warning. The file is removed at the end, before the flock is released. On
object stores (gs://) there is neither flock nor exclusive create: the check and the write are
two steps, so two trainings started within the same second can both pass.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import logging
import os
import socket
import uuid
from typing import Any, Iterator, Optional, Sequence

import jax
import numpy as np
import orbax.checkpoint as ocp

from alx_trainer.data.dataset import check_same_data
from alx_trainer.execution import widened
from webgraph_contract import fileio, staged_dir

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
    check_same_data(
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


# One training per model directory: the lock

log = logging.getLogger(__name__)

LOCK_FILE = "train.lock"


class LockHeld(OSError):
    """Another training holds the model directory."""


def owner_record() -> dict:
    """This process as a lock owner: host, pid, its start (ticks, to detect pid reuse) and the
    time."""
    start = staged_dir.process_start(os.getpid())
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "pid_start_ticks": None if start is None else int(start),
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def _parse_owner(text: str) -> dict:
    """The owner record of a lock file's text; {} (an unknown owner) when it is not one."""
    try:
        owner = json.loads(text)
    except ValueError:
        return {}  # half written: treated as held by an unknown owner
    return owner if isinstance(owner, dict) else {}


def _read_owner(path: str) -> Optional[dict]:
    """The owner record of the lock file at `path`; None when there is none."""
    try:
        with fileio.open_file(path, "r") as f:
            return _parse_owner(f.read())
    except FileNotFoundError:
        return None
    except (ValueError, OSError):
        return {}  # unreadable: treated as held by an unknown owner


def describe_owner(owner: dict) -> str:
    return (
        f"pid {owner.get('pid', '?')} on host {owner.get('host', '?')}, "
        f"started {owner.get('started', 'at an unknown time')}"
    )


def _stale_owner(owner: dict) -> bool:
    if owner.get("host") != socket.gethostname() or not isinstance(owner.get("pid"), int):
        return False
    return not staged_dir.runs(owner["pid"], owner.get("pid_start_ticks"))


def _create_lock(path: str, owner: dict) -> bool:
    """Write the lock file of an object store only if it does not exist; whether this call wrote
    it."""
    if fileio.exists(path):
        return False
    with fileio.open_file(path, "w") as f:
        f.write(json.dumps(owner, sort_keys=True) + "\n")
    return True


def _lock_held(model_dir: str, path: str, held: dict) -> LockHeld:
    return LockHeld(
        f"{model_dir} is being trained by {describe_owner(held)} (lock file {path}); wait for that "
        "training to end or use another --model_dir (if that process is gone, remove the lock "
        "file)"
    )


def _took_over(model_dir: str, held: dict) -> None:
    log.warning(
        "%s: took over a stale lock of %s, which no longer runs", model_dir, describe_owner(held)
    )


def _is_file_at(fd: int, path: str) -> bool:
    """Whether the open file `fd` is the file at `path` now."""
    try:
        now = os.stat(path)
    except FileNotFoundError:
        return False
    opened = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (opened.st_dev, opened.st_ino)


# lock file -> the open file this process holds its flock on (until `release`)
_LOCKED: dict[str, int] = {}


def _acquire_local(model_dir: str, path: str, owner: dict) -> bool:
    """Take the flock of the lock file at `path` and write `owner` into it; False when the file
    was removed or replaced while this process waited (try again)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _lock_held(model_dir, path, _read_owner(path) or {}) from None
        except OSError as e:
            raise OSError(
                f"{path}: cannot lock the file ({e.strerror}); give a --model_dir on a filesystem "
                "with file locks"
            ) from None
        if not _is_file_at(fd, path):
            os.close(fd)  # its holder removed it as it ended: this flock is on a removed file
            return False
        text = os.pread(fd, 1 << 16, 0).decode("utf-8", "replace")
        if text.strip():
            held = _parse_owner(text)
            if not _stale_owner(held):
                raise _lock_held(model_dir, path, held)
            _took_over(model_dir, held)
        data = (json.dumps(owner, sort_keys=True) + "\n").encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
    except BaseException:
        os.close(fd)
        raise
    _LOCKED[path] = fd
    return True


def acquire_lock(model_dir: str) -> dict:
    """Take the lock of `model_dir` (an existing directory); LockHeld naming the holder if it is
    taken."""
    path = os.path.join(model_dir, LOCK_FILE)
    owner = owner_record()
    for _ in range(3):  # the lock file removed by its holder meanwhile: try again
        if fileio.is_local(path):
            if _acquire_local(model_dir, path, owner):
                return owner
            continue
        if _create_lock(path, owner):
            return owner
        held = _read_owner(path)
        if held is None:
            continue
        if not _stale_owner(held):
            raise _lock_held(model_dir, path, held)
        # Move the stale file aside under a unique name, then create it anew (not atomic here).
        aside = f"{path}.stale-{uuid.uuid4().hex[:8]}"
        try:
            fileio.rename(path, aside)
        except OSError:
            continue
        fileio.remove(aside)
        _took_over(model_dir, held)
    raise LockHeld(
        f"{model_dir}: could not take the lock file {path}; another training is starting there"
    )


def release_lock(model_dir: str, owner: dict) -> None:
    """Remove the lock file if it is still this owner's, then let go of its flock."""
    path = os.path.join(model_dir, LOCK_FILE)
    try:
        held = _read_owner(path)
        if held and held.get("pid") == owner["pid"] and held.get("host") == owner["host"]:
            fileio.remove(path)
    finally:
        fd = _LOCKED.pop(path, None)
        if fd is not None:
            os.close(fd)


@contextlib.contextmanager
def hold_lock(model_dir: str) -> Iterator[dict]:
    """The lock of `model_dir` for the duration of a `with` block."""
    owner = acquire_lock(model_dir)
    try:
        yield owner
    finally:
        release_lock(model_dir, owner)
