"""All-or-nothing output directories of `export`: a new export is written into a staging directory
beside `--out_dir` (same parent, so the same filesystem) and swapped in whole once complete, as the
pipeline swaps in its `--output` (`webgraph_pipeline/output_dir.py`).

A failure or Ctrl-C before the swap leaves the previous export as it was and removes the staging
directory. The swap of a local directory that holds nothing but this kind of export is two
renames: the old directory is renamed away, the new one in, then the old one removed. Where the
directory also holds other files (kept, as before) or is not local, the export's manifest (which
readers require) is removed first, the new files are moved in, the earlier export's files removed,
and the manifest moved in last: the directory never shows a manifest beside a mix of two exports.

A staging directory holds an owner marker (host and pid) until the swap. One that a killed export
left (kill -9) is removed by the next export into the same directory when its owner no longer
runs; while it does, the next export is refused (two exports into one directory); a previous
export parked by an interrupted swap (`.staging-old-*`) is put back when `out_dir` is missing.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import socket
import uuid
from typing import Iterator

from webgraph_contract import fileio, layout

log = logging.getLogger(__name__)

STAGING_TAG = ".staging-"
OWNER_FILE = ".export-owner.json"


def check_out_dir(out_dir: str, flag: str = "--out_dir") -> None:
    """A one-line error when `out_dir` cannot be a directory: it is a file, or a file stands
    where one of its parents should be."""
    if not out_dir:
        raise ValueError(f"{flag} is empty; give a directory")
    if fileio.exists(out_dir) and not fileio.isdir(out_dir):
        raise FileExistsError(f"{flag} {out_dir} is a file, not a directory; give a directory")
    if not fileio.is_local(out_dir):
        return
    parent = os.path.dirname(os.path.abspath(out_dir))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise NotADirectoryError(
            f"{flag} {out_dir}: {parent} is a file, not a directory; give a directory"
        )


def _ours(names: str) -> re.Pattern:
    """The names `names` (a regex) and the temporary files of their writers."""
    return re.compile(rf"\.(?:{names}){fileio.TEMP_SUFFIX}|(?:{names})(?:{fileio.TEMP_SUFFIX})?")


@contextlib.contextmanager
def staged(out_dir: str, names: str, manifest: str) -> Iterator[str]:
    """A new staging directory beside `out_dir` to write an export into; swapped in (`swap_in`)
    when the block ends without an error, removed otherwise. `names` is the regex of the export's
    file names, `manifest` the name of the file that readers require, written last."""
    check_out_dir(out_dir)
    target = _target(out_dir)
    if fileio.is_local(target):
        clean_stale_staging(target)
    staging = f"{target}{STAGING_TAG}{uuid.uuid4().hex[:12]}"
    fileio.makedirs(staging)
    owner = os.path.join(staging, OWNER_FILE)
    try:
        fileio.write_atomic(owner, json.dumps({"host": socket.gethostname(), "pid": os.getpid()}))
        yield staging
        fileio.remove(owner)
        swap_in(staging, target, names, manifest)
    finally:
        if fileio.exists(staging):
            with contextlib.suppress(OSError):
                fileio.rmtree(staging)


def _alive(owner: dict) -> bool:
    """Whether the process an owner marker names, on this host, still runs (another host's:
    assumed to)."""
    if owner.get("host") != socket.gethostname():
        return True
    try:
        os.kill(int(owner["pid"]), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def clean_stale_staging(target: str) -> None:
    """Remove the staging directories beside `target` that killed exports left (their owner no
    longer runs); put back a previous export parked by an interrupted swap when `target` is
    missing; a one-line error while another live export writes `target`."""
    parent, base = os.path.split(target)
    rule = re.compile(re.escape(base + STAGING_TAG) + r"(old-)?[0-9a-f]{12}\Z")
    for name in sorted(os.listdir(parent)) if os.path.isdir(parent) else []:
        found = rule.match(name)
        path = os.path.join(parent, name)
        if not found or not os.path.isdir(path):
            continue
        if found.group(1):
            if not os.path.exists(target):
                os.rename(path, target)
                log.warning(
                    "put back the previous export %s, parked there by an interrupted one", path
                )
            else:
                fileio.rmtree(path)
            continue
        try:
            with open(os.path.join(path, OWNER_FILE), encoding="utf-8") as f:
                owner = json.load(f)
        except (OSError, ValueError):
            # no marker yet (just made) or unreadable: not ours to judge
            continue
        if _alive(owner):
            raise FileExistsError(
                f"--out_dir {target} is being written by process {owner['pid']} on "
                f"{owner['host']} ({path}); wait for it to finish or stop it"
            )
        fileio.rmtree(path)
        log.warning("removed %s, left by export process %s that no longer runs", path, owner["pid"])


def _target(out_dir: str) -> str:
    """`out_dir` without a trailing slash, absolute when local."""
    return os.path.abspath(out_dir) if fileio.is_local(out_dir) else out_dir.rstrip("/")


def swap_in(staging: str, target: str, names: str, manifest: str) -> list[str]:
    """Make the files of `staging` the export in `target`; the files of an earlier export (and
    of killed writers) that it replaced, which are removed."""
    ours = _ours(names)
    entries = sorted(fileio.listdir(target)) if fileio.isdir(target) else []
    foreign = [e for e in entries if not ours.fullmatch(e)]
    new = sorted(fileio.listdir(staging))
    here = os.path.abspath(os.getcwd())
    whole = (
        fileio.is_local(target)
        and not foreign
        and not os.path.islink(target)
        and not (here + os.sep).startswith(target + os.sep)
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
                # the previous export back in place
                os.rename(old, target)
            raise
        if had_old:
            with contextlib.suppress(OSError):
                fileio.rmtree(old)
        removed = [os.path.join(target, e) for e in entries if e not in new]
    else:
        fileio.makedirs(target)
        marker = os.path.join(target, manifest)
        if fileio.exists(marker):
            fileio.remove(marker)
        for name in new:
            if name != manifest:
                fileio.rename(os.path.join(staging, name), os.path.join(target, name))
        removed = layout.remove_stale(target, names, new)
        fileio.rename(os.path.join(staging, manifest), marker)
    if removed:
        log.info(
            "export: removed %d file(s) of an earlier or killed export: %s",
            len(removed),
            " ".join(os.path.basename(p) for p in removed),
        )
    return removed
