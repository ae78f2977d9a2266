"""How the pipeline counts what it keeps and drops, with or without Beam.

Counter names are `<kind>.<reason>` in the Beam metrics namespace `webgraph`, for example
`records.response`, `dropped_records.not_json`, `dropped_links.javascript_scheme`,
`damage.corrupt_region`, `unreadable_files.not_found`. Record-level functions never touch Beam:
they take an `inc(name, n=1)` function (the pattern of TFDS c4's `get_counter_inc_fn`).

Public API:

- `Inc`: the type of an `inc(name, n=1)` function.
- `LocalCounts`: a `collections.Counter` with an `inc` method; tests use it directly, and the Beam
  DoFns use one per input file and `flush_to_beam` it, so a hot loop never calls Beam per link.
- `flush_to_beam(counts)`: add a `LocalCounts` to Beam counters and clear it.
- `collect_counters(pipeline_result) -> dict[str, int]`: every `webgraph` counter of a finished
  pipeline, summed over steps (committed values where the runner has them).
- `collect_string_set(pipeline_result, name) -> list[str]`: a string set, sorted (`file_accounting`
  keeps the files that were not read whole in one).
"""

from __future__ import annotations

import collections
from typing import Any, Protocol

NAMESPACE = "webgraph"


class Inc(Protocol):
    def __call__(self, name: str, n: int = 1) -> None: ...


class LocalCounts(collections.Counter):
    """Counts kept in memory; `counts.inc` is an `Inc`."""

    def inc(self, name: str, n: int = 1) -> None:
        self[name] += n


def flush_to_beam(counts: LocalCounts) -> None:
    """Add the local counts to the Beam counters of namespace `webgraph`, then clear them."""
    from apache_beam.metrics import Metrics

    for name, value in counts.items():
        if value:
            Metrics.counter(NAMESPACE, name).inc(value)
    counts.clear()


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


def collect_string_set(pipeline_result: Any, name: str) -> list[str]:
    """The sorted strings of one `webgraph` string set of a finished pipeline."""
    from apache_beam.metrics.metric import MetricsFilter

    query = pipeline_result.metrics().query(
        MetricsFilter().with_namespace(NAMESPACE).with_name(name)
    )
    names: set[str] = set()
    for string_set in query.get("string_sets", []):
        names.update(_value(string_set) or ())
    return sorted(names)
