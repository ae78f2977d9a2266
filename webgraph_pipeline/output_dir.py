"""The job's output directory: checked before any input is read, written only through a staging
copy.

A run writes its whole dataset into a staging directory beside `--output` (same parent, so the same
filesystem or bucket) and swaps it in only once the job and stats.json have succeeded. Until then
the previous dataset in `--output` is untouched, whatever happens to the run (a bad input found
late, kill -9, a full disk). On a local filesystem the swap is two directory renames; on an object
store (gs://, s3://), where directories do not exist, the staged files are moved in one by one with
stats.json last, after the old stats.json is gone, so a half-moved dataset never looks complete.
The staging and the swap are `webgraph_contract/staged_dir.py`'s, shared with the trainer's exports.

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
import logging
import os
import uuid

from webgraph_contract import fileio, layout, staged_dir, stats_json
from webgraph_pipeline.write import DEGREE_PLOT

STAGING_TAG = staged_dir.STAGING_TAG
OWNER_FILE = ".webgraph-staging-owner.json"
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


def is_dataset_file(name: str) -> bool:
    """Whether a file name is one this job writes (a split shard, vocabulary shard, stats.json,
    plot)."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in DATASET_PATTERNS)


def foreign_entries(output_dir: str) -> list[str]:
    """What `output_dir` holds besides this job's dataset files (empty for a new or a dataset
    directory)."""
    return [e for e in staged_dir.entries(output_dir) if not is_dataset_file(e)]


def real_output(output_dir: str) -> str:
    """The directory a local --output that is a symbolic link points to (followed to the end);
    any other --output as it is. The job writes there, so the link stays a link."""
    target = output_dir.rstrip("/")
    return (
        os.path.realpath(target)
        if fileio.is_local(target) and os.path.islink(target)
        else output_dir
    )


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
    parent = staged_dir.parent_of(target)
    probe = staged_dir.join(parent, f".{os.path.basename(target)}.write-check-{uuid.uuid4().hex}")
    try:
        fileio.makedirs(parent)
        with fileio.open_file(probe, "w") as f:
            f.write("ok")
        fileio.remove(probe)
    except OSError as e:
        raise OutputError(
            f"--output {output_dir!r}: cannot write beside it in {parent!r} ({type(e).__name__})"
        ) from None


def _live_run(staging: str, owner: dict) -> OutputError:
    output = staging.rsplit(STAGING_TAG, 1)[0]
    return OutputError(
        f"--output {output!r} is being written by process {owner['pid']} ({staging}); "
        "wait for it to finish or stop it"
    )


def clean_stale_staging(output_dir: str) -> list[str]:
    """Remove the staging directories a killed run left beside `output_dir`; returns those removed.

    Removed: ours by name, with an owner marker naming a process of this host that no longer runs.
    Kept, with a warning: a marker of another host, or none. A live owner on this host is an
    OutputError (another run is writing this output). A previous dataset parked by an interrupted
    swap (`.staging-old-*`) is put back when `output_dir` is missing, else removed.
    """
    return staged_dir.clean_stale_staging(
        output_dir,
        OWNER_FILE,
        noun="dataset",
        writer="process",
        live_error=_live_run,
        other_hosts_live=False,
        log=logging.getLogger(),
    )


def staging_dir(output_dir: str) -> str:
    """A new, unique staging directory beside `output_dir` (created, with this process's owner
    marker)."""
    return staged_dir.make_staging(output_dir, OWNER_FILE)


def discard(staging: str) -> None:
    """Remove a staging directory (best effort: a failed run must not fail again while cleaning
    up)."""
    staged_dir.discard(staging)


def swap_in(staging: str, output_dir: str) -> None:
    """Make the staged dataset the content of `output_dir`, replacing the dataset files there.

    Files in `output_dir` that are not ours (allowed by --overwrite) stay where they are.
    """
    staged_dir.swap_in(staging, output_dir, OWNER_FILE, stats_json.STATS_FILE, is_dataset_file)
