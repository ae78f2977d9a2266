"""All-or-nothing output directories of `export`: a new export is written into a staging directory
beside `--out_dir` (same parent, so the same filesystem) and swapped in whole once complete, as the
pipeline swaps in its `--output`; both through `webgraph_contract/staged_dir.py`.

A failure or Ctrl-C before the swap leaves the previous export as it was and removes the staging
directory. The swap of a local directory that holds nothing but this kind of export is two
renames; where the directory also holds other files (kept, as before) or is not local, the
export's manifest (which readers require) is removed first and moved in last: the directory never
shows a manifest beside a mix of two exports.

A staging directory holds an owner marker until the swap. One that a killed export left (kill -9)
is removed by the next export into the same directory when its owner no longer runs; while it
does (or it is of another host), the next export is refused (two exports into one directory); a
previous export parked by an interrupted swap (`.staging-old-*`) is put back when `out_dir` is
missing.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Iterator

from webgraph_contract import fileio, layout, staged_dir

log = logging.getLogger(__name__)

STAGING_TAG = staged_dir.STAGING_TAG
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


@contextlib.contextmanager
def staged(out_dir: str, names: str, manifest: str) -> Iterator[str]:
    """A new staging directory beside `out_dir` to write an export into; swapped in (`swap_in`)
    when the block ends without an error, removed otherwise. `names` is the regex of the export's
    file names, `manifest` the name of the file that readers require, written last."""
    check_out_dir(out_dir)
    target = _target(out_dir)
    if fileio.is_local(target):
        clean_stale_staging(target)
    staging = staged_dir.make_staging(target, OWNER_FILE)
    try:
        yield staging
        swap_in(staging, target, names, manifest)
    finally:
        if fileio.exists(staging):
            staged_dir.discard(staging)


def _live_export(staging: str, owner: dict) -> FileExistsError:
    target = staging.rsplit(STAGING_TAG, 1)[0]
    return FileExistsError(
        f"--out_dir {target} is being written by process {owner['pid']} on "
        f"{owner['host']} ({staging}); wait for it to finish or stop it"
    )


def clean_stale_staging(target: str) -> None:
    """Remove the staging directories beside `target` that killed exports left (their owner no
    longer runs); put back a previous export parked by an interrupted swap when `target` is
    missing; a one-line error while another live export (or one of another host) writes
    `target`."""
    staged_dir.clean_stale_staging(
        target,
        OWNER_FILE,
        noun="export",
        writer="export process",
        live_error=_live_export,
        other_hosts_live=True,
        log=log,
    )


def _target(out_dir: str) -> str:
    """`out_dir` without a trailing slash, absolute when local."""
    return os.path.abspath(out_dir) if fileio.is_local(out_dir) else out_dir.rstrip("/")


def swap_in(staging: str, target: str, names: str, manifest: str) -> list[str]:
    """Make the files of `staging` the export in `target`; the files of an earlier export (and
    of killed writers: the temporary files of the names `names`, a regex) that it replaced, which
    are removed."""
    ours = layout.written_names(names).fullmatch
    removed = staged_dir.swap_in(staging, target, OWNER_FILE, manifest, ours)
    if removed:
        log.info(
            "export: removed %d file(s) of an earlier or killed export: %s",
            len(removed),
            " ".join(os.path.basename(p) for p in removed),
        )
    return removed
