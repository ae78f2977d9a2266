"""All-or-nothing output directories: a writer writes into a staging directory beside its target
(same parent, so the same filesystem or bucket) and swaps it in whole once complete. The pipeline's
dataset (`webgraph_pipeline/output_dir.py`) and the trainer's exports (`alx_trainer/tools/
output_swap.py`) are written this way; each says which files are its own and which one (the
manifest) readers require.

The swap of a local directory that holds nothing but the writer's files is two renames: the old
directory is renamed away (`.staging-old-*`), the new one in, then the old one removed. Where the
directory also holds other files (kept), is a symbolic link, holds the working directory or is not
local (gs://, s3://: no directories), the manifest is removed first, the new files are moved in,
the earlier write's files removed and the manifest moved in last: the directory never shows a
manifest beside a mix of two writes.

A staging directory holds an owner marker (host, pid and the process's start time) until the swap.
One that a killed writer left (kill -9) is removed by the next writer of the same target when its
owner is a process of this host that no longer runs (`clean_stale_staging`); a live owner refuses
the next writer; a previous write parked by an interrupted swap is put back when the target is
missing. Only names made by `make_staging` are considered.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import re
import socket
import uuid
from typing import Callable, Optional

from webgraph_contract import fileio

STAGING_TAG = ".staging-"
_STAGING_ID = r"(old-)?[0-9a-f]{12}"


def join(directory: str, name: str) -> str:
    """`directory`/`name`, for a local path or a URL."""
    return (
        os.path.join(directory, name)
        if fileio.is_local(directory)
        else posixpath.join(directory, name)
    )


def entries(directory: str) -> list[str]:
    """The names in `directory`, sorted; none when it does not exist."""
    return sorted(fileio.listdir(directory)) if fileio.isdir(directory) else []


def parent_of(target: str) -> str:
    """The directory that holds `target` (absolute when local), where its staging directories go."""
    target = target.rstrip("/")
    return (
        os.path.dirname(os.path.abspath(target))
        if fileio.is_local(target)
        else posixpath.dirname(target)
    )


def process_start(pid: int) -> Optional[str]:
    """The start time of a process in clock ticks since boot (Linux /proc), None where unknown;
    with the pid it names one process even after the pid is reused."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def runs(pid: int, start: object) -> bool:
    """Whether process `pid` of this host runs and is the one that started at `start` (clock
    ticks as `process_start` reads them; a process whose start is unknown, or no `start`, is
    judged by its pid alone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        # another user's live process
        pass
    now = process_start(pid)
    return start is None or now is None or str(start) == now


def is_alive(owner: dict) -> bool:
    """Whether the process an owner marker names (taken to be of this host) still runs."""
    return runs(int(owner["pid"]), owner.get("start"))


def make_staging(target: str, owner_file: str) -> str:
    """A new, unique staging directory beside `target` (created, with this process's owner marker
    in `owner_file`)."""
    path = f"{target.rstrip('/')}{STAGING_TAG}{uuid.uuid4().hex[:12]}"
    fileio.makedirs(path)
    pid = os.getpid()
    owner = {"host": socket.gethostname(), "pid": pid, "start": process_start(pid)}
    fileio.write_atomic(join(path, owner_file), json.dumps(owner))
    return path


def discard(staging: str) -> None:
    """Remove a staging directory (best effort: a failed write must not fail again while cleaning
    up; the next writer removes what is left)."""
    try:
        fileio.rmtree(staging)
    except OSError:
        pass


def read_owner(staging: str, owner_file: str) -> Optional[dict]:
    """The owner marker of a staging directory; None when it has none (just made) or it is
    unreadable."""
    try:
        with fileio.open_file(join(staging, owner_file)) as f:
            owner = json.loads(f.read())
        return owner if isinstance(owner, dict) and "pid" in owner and "host" in owner else None
    except (OSError, ValueError):
        return None


def clean_stale_staging(
    target: str,
    owner_file: str,
    *,
    noun: str,
    writer: str,
    live_error: Callable[[str, dict], Exception],
    other_hosts_live: bool,
    log: logging.Logger,
) -> list[str]:
    """Remove the staging directories a killed writer left beside `target`; returns those removed.

    Removed: ours by name, with an owner marker naming a process of this host that no longer runs.
    Kept, with a warning: one without a marker, and one of another host unless `other_hosts_live`
    (then that owner is taken to run). A live owner raises `live_error(staging, owner)`. A previous
    write parked by an interrupted swap (`.staging-old-*`) is put back when `target` is missing,
    else removed. `noun` names what is written (`dataset`), `writer` its process in the messages
    (`process`), both logged on `log`.
    """
    target = target.rstrip("/")
    rule = re.compile(re.escape(os.path.basename(target) + STAGING_TAG) + _STAGING_ID + r"\Z")
    parent = parent_of(target)
    here = socket.gethostname()
    removed = []
    for name in entries(parent):
        found = rule.match(name)
        staging = join(parent, name)
        if not found or not fileio.isdir(staging):
            continue
        if found.group(1):
            if fileio.is_local(target) and not fileio.exists(target):
                os.rename(staging, target)
                log.warning(
                    "put back the previous %s %s, parked there by an interrupted one", noun, staging
                )
            else:
                discard(staging)
                removed.append(staging)
            continue
        owner = read_owner(staging, owner_file)
        foreign = owner is not None and owner["host"] != here
        if owner is None or (foreign and not other_hosts_live):
            who = f"host {owner['host']}" if owner else "no owner marker"
            log.warning(
                "left %s in place (%s): remove it by hand once nothing writes %s",
                staging,
                who,
                target,
            )
        elif foreign or is_alive(owner):
            raise live_error(staging, owner)
        else:
            discard(staging)
            removed.append(staging)
            log.warning(
                "removed %s, left by %s %s that no longer runs", staging, writer, owner["pid"]
            )
    return removed


def swap_in(
    staging: str,
    target: str,
    owner_file: str,
    manifest: str,
    is_ours: Callable[[str], bool],
) -> list[str]:
    """Make the files of `staging` the content of `target` (its owner marker dropped); returns the
    files of an earlier write (and of killed writers) that it replaced, which are removed.

    `is_ours(name)` says which names in `target` the writer makes; the others stay where they are.
    `manifest` is the file readers require, moved in last.
    """
    fileio.remove(join(staging, owner_file))
    target = target.rstrip("/")
    old_entries = entries(target)
    new = entries(staging)
    local = fileio.is_local(target)
    here = os.path.abspath(os.getcwd())
    whole = (
        local
        and all(is_ours(e) for e in old_entries)
        and not os.path.islink(target)
        and not (here + os.sep).startswith(os.path.abspath(target) + os.sep)
    )
    if whole:
        old = f"{target}{STAGING_TAG}old-{uuid.uuid4().hex[:12]}"
        had_old = os.path.isdir(target)
        if had_old:
            os.rename(target, old)
        try:
            os.rename(staging, target)
        except OSError:
            if had_old:
                # the previous write back in place
                os.rename(old, target)
            raise
        if had_old:
            discard(old)
        return [join(target, e) for e in old_entries if e not in new]
    fileio.makedirs(target)
    marker = join(target, manifest)
    if fileio.exists(marker):
        fileio.remove(marker)
    for name in new:
        if name != manifest:
            fileio.rename(join(staging, name), join(target, name))
    removed = [join(target, e) for e in old_entries if is_ours(e) and e not in new]
    for path in removed:
        fileio.remove(path)
    fileio.rename(join(staging, manifest), marker)
    discard(staging)
    return removed
