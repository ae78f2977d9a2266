"""How the pipeline counts what it keeps and drops, with or without Beam.

Counter names are `<kind>.<reason>` in the Beam metrics namespace `webgraph`, for example
`records.response`, `dropped_records.not_json`, `dropped_links.javascript_scheme`,
`damage.corrupt_region`, `unreadable_files.not_found`. Record-level functions never touch Beam:
they take an `inc(name, n=1)` function (the pattern of TFDS c4's `get_counter_inc_fn`).

Public API:

- `Inc`: the type of an `inc(name, n=1)` function.
- `LocalCounts`: a `collections.Counter` with an `inc` method, and `note(name, entry)` that keeps
  an entry of a named list for stats.json (the files not read whole, the first lines of each drop
  reason...); tests use it directly, and the Beam DoFns use one per input file and
  `flush_to_beam` it, so a hot loop never calls Beam per link.
- `flush_to_beam(counts)`: add a `LocalCounts` to Beam counters and clear it.
- `tagged_notes(counts)`: its notes as outputs tagged `NOTES` (then cleared). The notes travel as
  data, not as Beam string-set metrics: Beam's local runner keeps one worker's set of a step and
  drops the others' (`--direct_running_mode multi_processing`).
- `write_notes(notes, directory)` / `take_notes(directory)`: every note of a job into one file of
  the output directory, and back (the file removed) once the job has run.
- `collect_counters(pipeline_result) -> dict[str, int]`: every `webgraph` counter of a finished
  pipeline, summed over steps (committed values where the runner has them).
"""

from __future__ import annotations

import collections
import json
from typing import Any, Iterable, Iterator, Protocol

from webgraph_contract import fileio

NAMESPACE = "webgraph"
NOTES = "notes"  # tag of a reading step's second output: (list name, entry) pairs
NOTES_FILE = ".webgraph-notes.json"  # in the output directory until the job has run


class Inc(Protocol):
    def __call__(self, name: str, n: int = 1) -> None: ...


class LocalCounts(collections.Counter):
    """Counts kept in memory; `counts.inc` is an `Inc`; `counts.notes` the (name, entry) notes."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.notes: list[tuple[str, str]] = []

    def inc(self, name: str, n: int = 1) -> None:
        self[name] += n

    def note(self, name: str, entry: str) -> None:
        """Keep `entry` for the list `name` of stats.json."""
        self.notes.append((name, entry))


def flush_to_beam(counts: LocalCounts) -> None:
    """Add the local counts to the Beam counters of namespace `webgraph`, then clear them."""
    from apache_beam.metrics import Metrics

    for name, value in counts.items():
        if value:
            Metrics.counter(NAMESPACE, name).inc(value)
    counts.clear()


def tagged_notes(counts: LocalCounts) -> Iterator[Any]:
    """The notes of `counts` as outputs tagged `NOTES`; then it has none."""
    from apache_beam import pvalue

    for note in counts.notes:
        yield pvalue.TaggedOutput(NOTES, note)
    counts.notes.clear()


def write_notes(notes: Iterable[tuple[str, str]], directory: str) -> None:
    """Write every (name, entry) note of a job into `directory`: {name: sorted distinct entries}."""
    lists: dict[str, set[str]] = collections.defaultdict(set)
    for name, entry in notes:
        lists[name].add(entry)
    fileio.write_atomic(
        f"{directory.rstrip('/')}/{NOTES_FILE}",
        json.dumps({name: sorted(entries) for name, entries in sorted(lists.items())}),
    )


def take_notes(directory: str) -> dict[str, list[str]]:
    """The notes `write_notes` wrote into `directory`, by name; the file is removed."""
    path = f"{directory.rstrip('/')}/{NOTES_FILE}"
    with fileio.open_file(path) as f:
        notes = json.loads(f.read())
    fileio.remove(path)
    return notes


def _value(result: Any) -> Any:
    committed = getattr(result, "committed", None)
    return committed if committed is not None else result.attempted


def collect_counters(pipeline_result: Any) -> dict[str, int]:
    """All `webgraph` counters of a finished pipeline as `{name: value}`, sorted by name."""
    from apache_beam.metrics.metric import MetricsFilter

    query = pipeline_result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))
    totals: collections.Counter = collections.Counter()
    for counter in query["counters"]:
        totals[counter.key.metric.name] += int(_value(counter) or 0)
    return dict(sorted(totals.items()))
