"""Every input file accounted for: read whole, partly read (where the damage starts) or unreadable
(why).

Each reader (WAT, edge list) ends every file with `account_file`, which counts it
(`files.read`, `files.partly_read`, `files.unreadable` plus `unreadable_files.<reason>`, and
`files.matched` for every one, so it is their sum; a pattern or listed path that matches no file
is one unreadable entry), logs one line naming it, notes it in the list `file_problems` of its
counts (`LocalCounts.note`, for stats.json and the end-of-job summary) and, with
`fail_on_unreadable`, stops the job with that line.

Public API:

- `READ`, `PARTLY_READ`, `UNREADABLE`: the three outcomes.
- `UnreadableFileError`: raised for a damaged or unreadable file under `fail_on_unreadable`.
- `account_file(path, status, reason, detail, fail, counts)`.
- `file_problems(entries) -> list[dict]`: the `file_problems` notes of a job as
  `{"file", "status", "reason", "detail"}` of every file not read whole, sorted by file (detail:
  where the damage starts, or why unreadable).
- `problem_line(problem) -> str`: one problem as the summary prints it.
"""

from __future__ import annotations

import logging
from typing import Iterable

from webgraph_pipeline.counters import LocalCounts

READ, PARTLY_READ, UNREADABLE = "read", "partly_read", "unreadable"
FILE_PROBLEMS = "file_problems"  # notes `status<TAB>path<TAB>reason<TAB>detail`


class UnreadableFileError(IOError):
    """An input file (or pattern) was unreadable or damaged and `fail_on_unreadable` is set."""


def problem_line(problem: dict[str, str]) -> str:
    """`unreadable input file PATH: not_warc (no WARC record ...)` or `partly read input file PATH:
    ... at ...`."""
    if problem["status"] == UNREADABLE:
        return f"unreadable input file {problem['file']}: {problem['reason']} ({problem['detail']})"
    return f"partly read input file {problem['file']}: {problem['reason']} at {problem['detail']}"


def account_file(
    path: str, status: str, reason: str, detail: str, fail: bool, counts: LocalCounts
) -> None:
    """Count, log and remember how one input file ended; raise under `fail` unless it was read
    whole.

    For an unreadable file the counts its reader made so far are replaced by its one reason.
    """
    if status == READ:
        counts.inc("files.matched")
        counts.inc("files.read")
        return
    problem = {"file": path, "status": status, "reason": reason, "detail": detail}
    line = problem_line(problem)
    if fail:
        raise UnreadableFileError(f"{line} (--fail_on_unreadable)")
    if status == UNREADABLE:
        counts.clear()
        counts.inc(f"unreadable_files.{reason}")
    counts.inc("files.matched")
    counts.inc(f"files.{status}")
    logging.warning(line)
    counts.note(FILE_PROBLEMS, "\t".join((status, path, reason, detail)))


def file_problems(entries: Iterable[str]) -> list[dict[str, str]]:
    """Every file a finished job did not read whole (its `file_problems` notes), as dicts sorted
    by file."""
    out = []
    for entry in entries:
        status, path, reason, detail = entry.split("\t")
        out.append({"file": path, "status": status, "reason": reason, "detail": detail})
    return sorted(out, key=lambda p: (p["file"], p["status"]))
