"""JAX profiler traces read back: program launches, and device time by kernel."""

from __future__ import annotations

import collections
import glob
import gzip
import json
import re

# XLA:CPU's thunk names (fusions, dots, scatters)
THUNK = re.compile(r"[a-z][\w.-]*")


def _newest(trace_dir: str) -> list[dict]:
    path = sorted(glob.glob(f"{trace_dir}/**/*.trace.json.gz", recursive=True))[-1]
    with gzip.open(path) as f:
        return json.load(f)["traceEvents"]


def trace_events(trace_dir: str) -> list[dict]:
    """The complete ('X') events of the newest trace written under `trace_dir`."""
    return [e for e in _newest(trace_dir) if e.get("ph") == "X"]


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


def device_kernels(trace_dir: str, top: int = 15) -> dict:
    """The device's work in a profiler trace: `busy_s` (summed durations), `kernels` (their
    count) and `top`, the `top` names by seconds (`name`, `count`, `seconds`).

    On an accelerator, the events of the trace's '/device:...' processes on their stream threads
    (kernels and copies as they ran; the other device threads repeat them per XLA op and module);
    on CPU, which has no device process, XLA's thunks on the host threads (fusions, dots,
    scatters; loops, 'while' and 'cond', contain other thunks and are left out).
    """
    events = _newest(trace_dir)
    meta = [e for e in events if e.get("ph") == "M"]
    procs = {e["pid"]: e["args"]["name"] for e in meta if e.get("name") == "process_name"}
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in meta if e.get("name") == "thread_name"
    }
    done = [e for e in events if e.get("ph") == "X"]
    devices = {pid for pid, name in procs.items() if name.startswith("/device:")}
    on_device = [e for e in done if e["pid"] in devices]
    streams = [e for e in on_device if threads.get((e["pid"], e["tid"]), "").startswith("Stream")]
    picked = streams or on_device
    if not devices:
        names = (e.get("name", "") for e in done)
        picked = [
            e
            for e, name in zip(done, names)
            if THUNK.fullmatch(name) and not name.startswith(("while", "cond"))
        ]
    seconds: collections.Counter = collections.Counter()
    counts: collections.Counter = collections.Counter()
    for e in picked:
        name = e.get("name", "")[:120]
        seconds[name] += e.get("dur", 0) / 1e6
        counts[name] += 1
    return {
        "busy_s": sum(seconds.values()),
        "kernels": sum(counts.values()),
        "top": [
            {"name": name, "count": counts[name], "seconds": s}
            for name, s in seconds.most_common(top)
        ],
    }
