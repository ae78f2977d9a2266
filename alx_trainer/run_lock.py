"""One training per model directory: `<model_dir>/train.lock` holds the writer's host, pid and
start.

On a local filesystem `hold(model_dir)` opens the lock file and takes an exclusive `flock` on it,
which the kernel gives to one process at a time and releases when that process ends, however it
ends; of trainings started into one directory exactly one gets it, even when they all find a lock
left by a killed run, and the others stop with `LockHeld` naming the holder, before they write
anything. Under the flock the file's record is checked as well: a record of another host is never
guessed stale (the message says to remove the file once that training is known to be gone); one
of this host whose pid no longer runs, or runs but started at another time (the pid was reused),
is taken over with a warning. The file is removed at the end, before the flock is released.
On object stores (gs://) there is neither flock nor exclusive create: the check and the write are
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
from typing import Iterator, Optional

from webgraph_contract import fileio, staged_dir

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


def _parse(text: str) -> dict:
    """The owner record of a lock file's text; {} (an unknown owner) when it is not one."""
    try:
        owner = json.loads(text)
    except ValueError:
        return {}  # half written: treated as held by an unknown owner
    return owner if isinstance(owner, dict) else {}


def _read(path: str) -> Optional[dict]:
    """The owner record of the lock file at `path`; None when there is none."""
    try:
        with fileio.open_file(path, "r") as f:
            return _parse(f.read())
    except FileNotFoundError:
        return None
    except (ValueError, OSError):
        return {}  # unreadable: treated as held by an unknown owner


def describe(owner: dict) -> str:
    return (
        f"pid {owner.get('pid', '?')} on host {owner.get('host', '?')}, "
        f"started {owner.get('started', 'at an unknown time')}"
    )


def _stale(owner: dict) -> bool:
    if owner.get("host") != socket.gethostname() or not isinstance(owner.get("pid"), int):
        return False
    return not staged_dir.runs(owner["pid"], owner.get("pid_start_ticks"))


def _create(path: str, owner: dict) -> bool:
    """Write the lock file of an object store only if it does not exist; whether this call wrote
    it."""
    if fileio.exists(path):
        return False
    with fileio.open_file(path, "w") as f:
        f.write(json.dumps(owner, sort_keys=True) + "\n")
    return True


def _held(model_dir: str, path: str, held: dict) -> LockHeld:
    return LockHeld(
        f"{model_dir} is being trained by {describe(held)} (lock file {path}); wait for that "
        "training to end or use another --model_dir (if that process is gone, remove the lock "
        "file)"
    )


def _took_over(model_dir: str, held: dict) -> None:
    log.warning("%s: took over a stale lock of %s, which no longer runs", model_dir, describe(held))


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
            raise _held(model_dir, path, _read(path) or {}) from None
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
            held = _parse(text)
            if not _stale(held):
                raise _held(model_dir, path, held)
            _took_over(model_dir, held)
        data = (json.dumps(owner, sort_keys=True) + "\n").encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
    except BaseException:
        os.close(fd)
        raise
    _LOCKED[path] = fd
    return True


def acquire(model_dir: str) -> dict:
    """Take the lock of `model_dir` (an existing directory); LockHeld naming the holder if it is
    taken."""
    path = os.path.join(model_dir, LOCK_FILE)
    owner = owner_record()
    for _ in range(3):  # the lock file removed by its holder meanwhile: try again
        if fileio.is_local(path):
            if _acquire_local(model_dir, path, owner):
                return owner
            continue
        if _create(path, owner):
            return owner
        held = _read(path)
        if held is None:
            continue
        if not _stale(held):
            raise _held(model_dir, path, held)
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


def release(model_dir: str, owner: dict) -> None:
    """Remove the lock file if it is still this owner's, then let go of its flock."""
    path = os.path.join(model_dir, LOCK_FILE)
    try:
        held = _read(path)
        if held and held.get("pid") == owner["pid"] and held.get("host") == owner["host"]:
            fileio.remove(path)
    finally:
        fd = _LOCKED.pop(path, None)
        if fd is not None:
            os.close(fd)


@contextlib.contextmanager
def hold(model_dir: str) -> Iterator[dict]:
    """The lock of `model_dir` for the duration of a `with` block."""
    owner = acquire(model_dir)
    try:
        yield owner
    finally:
        release(model_dir, owner)
