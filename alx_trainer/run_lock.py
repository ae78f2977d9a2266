"""One training per model directory: `<model_dir>/train.lock` holds the writer's host, pid and
start.

`hold(model_dir)` creates the lock file with `O_CREAT | O_EXCL` (atomic on a local filesystem), so
of two trainings started into one directory exactly one gets it; the other stops with `LockHeld`
naming the holder, before it writes anything. A lock left by a process that died (kill -9, a
crash) on this host is stale when that pid no longer runs, or runs but started at another time
(the pid was reused); it is taken over with a warning. A lock from another host is never
guessed stale: the message says to remove the file once that training is known to be gone.
On object stores (gs://) there is no exclusive create: the check and the write are two steps,
so two trainings started within the same second can both pass.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import socket
import uuid
from typing import Iterator, Optional

from webgraph_contract import fileio

log = logging.getLogger(__name__)

LOCK_FILE = "train.lock"


class LockHeld(OSError):
    """Another training holds the model directory."""


def _start_ticks(pid: int) -> Optional[int]:
    """When a process started, in clock ticks since boot (Linux /proc); None where unknown."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _alive(pid: int, start_ticks: Optional[int]) -> bool:
    """Whether `pid` runs on this host and is the process that started at `start_ticks`."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        pass
    now = _start_ticks(pid)
    return start_ticks is None or now is None or now == start_ticks


def owner_record() -> dict:
    """This process as a lock owner: host, pid, its start (ticks, to detect pid reuse) and the
    time."""
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "pid_start_ticks": _start_ticks(os.getpid()),
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def _read(path: str) -> Optional[dict]:
    try:
        with fileio.open_file(path, "r") as f:
            owner = json.loads(f.read())
        return owner if isinstance(owner, dict) else {}
    except FileNotFoundError:
        return None
    except (ValueError, OSError):
        return {}  # unreadable or half written: treated as held by an unknown owner


def describe(owner: dict) -> str:
    return (
        f"pid {owner.get('pid', '?')} on host {owner.get('host', '?')}, "
        f"started {owner.get('started', 'at an unknown time')}"
    )


def _stale(owner: dict) -> bool:
    if owner.get("host") != socket.gethostname() or not isinstance(owner.get("pid"), int):
        return False
    return not _alive(owner["pid"], owner.get("pid_start_ticks"))


def _create(path: str, owner: dict) -> bool:
    """Write the lock file only if it does not exist; whether this call created it."""
    text = json.dumps(owner, sort_keys=True) + "\n"
    if "://" in path:
        if fileio.exists(path):
            return False
        with fileio.open_file(path, "w") as f:
            f.write(text)
        return True
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return True


def acquire(model_dir: str) -> dict:
    """Take the lock of `model_dir` (an existing directory); LockHeld naming the holder if it is
    taken."""
    path = os.path.join(model_dir, LOCK_FILE)
    owner = owner_record()
    for _ in range(3):  # a stale lock removed by another process meanwhile: try again
        if _create(path, owner):
            return owner
        held = _read(path)
        if held is None:
            continue
        if not _stale(held):
            raise LockHeld(
                f"{model_dir} is being trained by {describe(held)} (lock file {path}); wait for "
                "that training "
                "to end or use another --model_dir (if that process is gone, remove the lock file)"
            )
        # Move the stale file aside under a unique name: of several processes taking it over, one
        # wins.
        aside = f"{path}.stale-{uuid.uuid4().hex[:8]}"
        try:
            fileio.rename(path, aside)
        except OSError:
            continue
        fileio.remove(aside)
        log.warning(
            "%s: took over a stale lock of %s, which no longer runs", model_dir, describe(held)
        )
    raise LockHeld(
        f"{model_dir}: could not take the lock file {path}; another training is starting there"
    )


def release(model_dir: str, owner: dict) -> None:
    """Remove the lock file if it is still this owner's."""
    path = os.path.join(model_dir, LOCK_FILE)
    held = _read(path)
    if held and held.get("pid") == owner["pid"] and held.get("host") == owner["host"]:
        fileio.remove(path)


@contextlib.contextmanager
def hold(model_dir: str) -> Iterator[dict]:
    """The lock of `model_dir` for the duration of a `with` block."""
    owner = acquire(model_dir)
    try:
        yield owner
    finally:
        release(model_dir, owner)
