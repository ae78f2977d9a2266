"""JAX profiler traces read back: program launches, and XLA's own time per operation."""

from __future__ import annotations

import collections
import glob
import gzip
import json
import re


def trace_events(trace_dir: str) -> list[dict]:
    """The complete ('X') events of the newest trace written under `trace_dir`."""
    path = sorted(glob.glob(f"{trace_dir}/**/*.trace.json.gz", recursive=True))[-1]
    with gzip.open(path) as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def launches(trace_dir: str) -> collections.Counter:
    """Program launches in a profiler trace by program (single-device launches under one name)."""
    found: collections.Counter = collections.Counter()
    for event in trace_events(trace_dir):
        name = event.get("name", "")
        if name.startswith("CommonPjRtLoadedExecutable::Execute ("):
            found[name.split("(", 1)[1].rstrip(")")] += 1
        elif name == "CommonPjRtLoadedExecutable::ExecuteHelperOnSingleDevice":
            found["single-device"] += 1
    return found


def op_seconds(trace_dir: str, top: int = 12) -> dict:
    """Seconds of XLA's own operations (thunks: fusions, dots, scatters) in a profiler trace.

    Summed over the device threads, by thunk name, the `top` largest; loops ('while', 'cond')
    contain other thunks and are left out. Thunk names are those of the optimized HLO (see
    XLA_FLAGS=--xla_dump_to to read what a fusion holds).
    """
    total: collections.Counter = collections.Counter()
    for e in trace_events(trace_dir):
        name = e.get("name", "")
        if re.fullmatch(r"[a-z][\w.-]*", name) and not name.startswith(("while", "cond")):
            total[name] += e["dur"] / 1e6
    return {k: round(v, 3) for k, v in total.most_common(top)}
