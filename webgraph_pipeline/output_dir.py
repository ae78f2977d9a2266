"""The job's output directory: checked before any input is read, written only through a staging
copy.

A run writes its whole dataset into a staging directory beside `--output` (same parent, so the same
filesystem or bucket) and swaps it in only once the job and stats.json have succeeded. Until then
the previous dataset in `--output` is untouched, whatever happens to the run (a bad input found
late, kill -9, a full disk). On a local filesystem the swap is two directory renames; on an object
store (gs://, s3://), where directories do not exist, the staged files are moved in one by one with
stats.json last, after the old stats.json is gone, so a half-moved dataset never looks complete.

A staging directory holds an owner marker (host, pid and the process's start time) until the swap.
A run killed with kill -9 leaves its staging directory behind; the next run on the same output
removes those whose owner is a dead process of this host (`clean_stale_staging`), leaves those of
other hosts or without a marker (named in a warning), and refuses to start while a live process of
this host is writing the same output. Only names made by `staging_dir` are considered.

An --output that is a symbolic link (local) is written through: the dataset goes into the
directory it points to (`real_output`), staged beside that directory, and the link stays.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import posixpath
import re
import socket
import uuid
from typing import Optional

from webgraph_contract import fileio, layout, stats_json
from webgraph_pipeline.write import DEGREE_PLOT

STAGING_TAG = ".staging-"
OWNER_FILE = ".webgraph-staging-owner.json"
_STAGING_ID = r"(old-)?[0-9a-f]{12}"
# The names this job writes into its output directory; anything else there is not ours.
DATASET_PATTERNS = tuple(
    [f"{prefix}{layout.TFRECORD_SUFFIX}-*-of-*" for prefix in layout.ALL_SPLIT_PREFIXES.values()]
    + [
        f"{layout.VOCAB_PREFIX}-*-of-*",
        f"{layout.COL_VOCAB_PREFIX}-*-of-*",
        stats_json.STATS_FILE,
        DEGREE_PLOT,
    ]
)


class OutputError(ValueError):
    """An --output the job must not or cannot write to."""


def _is_local(path: str) -> bool:
    return "://" not in path


def _join(directory: str, name: str) -> str:
    return (
        os.path.join(directory, name) if _is_local(directory) else posixpath.join(directory, name)
    )


def is_dataset_file(name: str) -> bool:
    """Whether a file name is one this job writes (a split shard, vocabulary shard, stats.json,
    plot)."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in DATASET_PATTERNS)


def _entries(directory: str) -> list[str]:
    return sorted(fileio.listdir(directory)) if fileio.isdir(directory) else []


def foreign_entries(output_dir: str) -> list[str]:
    """What `output_dir` holds besides this job's dataset files (empty for a new or a dataset
    directory)."""
    return [e for e in _entries(output_dir) if not is_dataset_file(e)]


def real_output(output_dir: str) -> str:
    """The directory a local --output that is a symbolic link points to (followed to the end);
    any other --output as it is. The job writes there, so the link stays a link."""
    target = output_dir.rstrip("/")
    return os.path.realpath(target) if _is_local(target) and os.path.islink(target) else output_dir


def check_output(output_dir: str, overwrite: bool) -> None:
    """Refuse an --output that is a file, holds something other than our dataset (unless
    `overwrite`), or cannot be written: all before any input is read. Creates the directory's parent
    if needed. A symbolic link is checked as the directory it points to (`real_output`)."""
    target = real_output(output_dir).rstrip("/")
    if not target:
        raise OutputError("--output is empty")
    if fileio.exists(target) and not fileio.isdir(target):
        raise OutputError(f"--output {output_dir!r} is a file, not a directory")
    foreign = foreign_entries(target)
    if foreign and not overwrite:
        shown = ", ".join(foreign[:3]) + (
            f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        )
        raise OutputError(
            f"--output {output_dir!r} holds files that are not a WebGraph dataset ({shown}); "
            "choose an empty or new directory, or pass --overwrite to write the dataset beside them"
        )
    parent = (
        posixpath.dirname(target)
        if not _is_local(target)
        else os.path.dirname(os.path.abspath(target))
    )
    probe = _join(parent, f".{os.path.basename(target)}.write-check-{uuid.uuid4().hex}")
    try:
        fileio.makedirs(parent)
        with fileio.open_file(probe, "w") as f:
            f.write("ok")
        fileio.remove(probe)
    except OSError as e:
        raise OutputError(
            f"--output {output_dir!r}: cannot write beside it in {parent!r} ({type(e).__name__})"
        ) from None


def _process_start(pid: int) -> Optional[str]:
    """The start time of a process in clock ticks since boot (Linux /proc), None where unknown;
    with the pid it names one process even after the pid is reused."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def _owner() -> dict:
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "start": _process_start(pid)}


def _is_alive(owner: dict) -> bool:
    """Whether the process a marker names (on this host) still runs."""
    try:
        os.kill(int(owner["pid"]), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        pass
    start = _process_start(int(owner["pid"]))
    return owner.get("start") is None or start is None or start == owner["start"]


def _staging_dirs(output_dir: str) -> list[str]:
    """The staging directories this job's naming rule gives for `output_dir` that exist now."""
    target = output_dir.rstrip("/")
    parent = (
        posixpath.dirname(target)
        if not _is_local(target)
        else os.path.dirname(os.path.abspath(target))
    )
    base = os.path.basename(target)
    name_rule = re.compile(re.escape(base + STAGING_TAG) + _STAGING_ID + r"\Z")
    return [_join(parent, e) for e in _entries(parent) if name_rule.match(e)]


def _read_owner(staging: str) -> Optional[dict]:
    try:
        with fileio.open_file(_join(staging, OWNER_FILE)) as f:
            owner = json.loads(f.read())
        return owner if isinstance(owner, dict) and "pid" in owner and "host" in owner else None
    except (OSError, ValueError):
        return None


def clean_stale_staging(output_dir: str) -> list[str]:
    """Remove the staging directories a killed run left beside `output_dir`; returns those removed.

    Removed: ours by name, with an owner marker naming a process of this host that no longer runs.
    Kept, with a warning: a marker of another host, or none. A live owner on this host is an
    OutputError (another run is writing this output). A previous dataset parked by an interrupted
    swap (`.staging-old-*`) is put back when `output_dir` is missing, else removed.
    """
    target = output_dir.rstrip("/")
    removed = []
    here = socket.gethostname()
    for staging in _staging_dirs(target):
        if f"{STAGING_TAG}old-" in staging:
            if _is_local(target) and not fileio.exists(target):
                os.rename(staging, target)
                logging.warning(
                    "put back the previous dataset %s, parked there by an interrupted run", staging
                )
            else:
                discard(staging)
                removed.append(staging)
            continue
        owner = _read_owner(staging)
        if owner is None or owner["host"] != here:
            who = f"host {owner['host']}" if owner else "no owner marker"
            logging.warning(
                "left %s in place (%s): remove it by hand once no run writes %s",
                staging,
                who,
                target,
            )
        elif _is_alive(owner):
            raise OutputError(
                f"--output {output_dir!r} is being written by process {owner['pid']} ({staging}); "
                "wait for it to finish or stop it"
            )
        else:
            discard(staging)
            removed.append(staging)
            logging.warning(
                "removed %s, left by process %s that no longer runs", staging, owner["pid"]
            )
    return removed


def staging_dir(output_dir: str) -> str:
    """A new, unique staging directory beside `output_dir` (created, with this process's owner
    marker)."""
    path = f"{output_dir.rstrip('/')}{STAGING_TAG}{uuid.uuid4().hex[:12]}"
    fileio.makedirs(path)
    with fileio.open_file(_join(path, OWNER_FILE), "w") as f:
        f.write(json.dumps(_owner()))
    return path


def discard(staging: str) -> None:
    """Remove a staging directory (best effort: a failed run must not fail again while cleaning
    up)."""
    try:
        fileio.rmtree(staging)
    except OSError:
        pass


def swap_in(staging: str, output_dir: str) -> None:
    """Make the staged dataset the content of `output_dir`, replacing the dataset files there.

    Files in `output_dir` that are not ours (allowed by --overwrite) stay where they are.
    """
    fileio.remove(_join(staging, OWNER_FILE))
    target = output_dir.rstrip("/")
    if _is_local(target) and not foreign_entries(target):
        old = f"{target}{STAGING_TAG}old-{uuid.uuid4().hex[:12]}"
        had_old = fileio.exists(target)
        if had_old:
            os.rename(target, old)
        try:
            os.rename(staging, target)
        except OSError:
            if had_old:
                os.rename(old, target)  # the previous dataset back in place
            raise
        if had_old:
            discard(old)  # left behind only if it cannot be removed: the next run removes it
        return
    fileio.makedirs(target)
    stats = _join(target, stats_json.STATS_FILE)
    if fileio.exists(stats):
        fileio.remove(stats)
    new = _entries(staging)
    for name in _entries(target):
        if is_dataset_file(name) and name not in new:
            fileio.remove(_join(target, name))
    for name in sorted(new, key=lambda n: n == stats_json.STATS_FILE):
        fileio.rename(_join(staging, name), _join(target, name))
    discard(staging)
