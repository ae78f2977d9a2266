"""Wall and CPU seconds of a training run's phases: each logged as it ends, all in one line at
the end.

Phases, in order: the command's start-up (`alx_trainer train` reports it; `startup` keeps it for the
run): `start` (from the process's start to the command's code: the interpreter, its first imports, a
restart for huge pages, the flags), `imports` (JAX and the training stack), `backend` (JAX's devices
started); then the run's: `open` (the dataset opened and checked), `init` (the initial tables, and a
resumed checkpoint's), `read` (a side's planning pass over its files), `plan` (its batch shape and
counts), `pack` (its batch source: packing, and for the accelerator path copying to the devices,
with its own pass over the files), `compile` (wall seconds only: `train` takes the epochs'
`compile_seconds` out of `epochs`), `epochs` (the half-epochs' work), `checkpoint` (the saves),
`eval`. The scoring commands (`eval`, `export`) have the same start-up phases, then `open`, `load`
(the model restored), `read` (the rows to rank), `compile`, `rank` (fold-in and top K, less its
compile seconds) and `write` (the output files). Wrap a phase in `timed(name)` (its line logged at
debug level), an iterator's steps in `timed_steps`, or report seconds measured elsewhere with `add`;
`train` starts each run with `begin_run` and logs `summary` at its end (with `other`: the seconds
in no phase), the scoring commands log it at theirs. CPU seconds are the whole process's and its
ended children's (the reader's decoding workers, which end with each read).
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import threading
import time
from typing import Iterable, Iterator, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")

ORDER = (
    "start",
    "imports",
    "backend",
    "open",
    "load",
    "init",
    "read",
    "plan",
    "pack",
    "compile",
    "epochs",
    "rank",
    "checkpoint",
    "eval",
    "write",
)
_lock = threading.Lock()
_totals: dict[str, tuple[float, float | None]] = {}
# the command's start-up phases: `begin_run` keeps them
_startup: dict[str, tuple[float, float | None]] = {}


def process_seconds() -> float | None:
    """Wall seconds since this process started (Linux: /proc, to 1/100 s; None elsewhere). An
    `exec` keeps the process, so a restart counts from the first start."""
    try:
        with open("/proc/self/stat") as f:
            # the fields after the command name, which may hold spaces
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
    except (OSError, IndexError, ValueError):
        return None
    return max(uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"), 0.0)


def command_started() -> None:
    """Record the command's `start` phase: from the process's start to now."""
    age = process_seconds()
    if age is not None:
        startup("start", age, cpu_seconds())


def startup(name: str, wall: float, cpu: float | None = None) -> None:
    """Record the command's start-up phase `name` (kept by `begin_run`, cleared by `reset`)."""
    with _lock:
        _startup[name] = (wall, cpu)


def cpu_seconds() -> float:
    """CPU seconds of this process's threads and of its ended child processes."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


@contextlib.contextmanager
def timed(name: str, what: str = "", is_startup: bool = False) -> Iterator[None]:
    """Time the block as phase `name` (`what` says of what in its log line), or with `is_startup`
    as the command's start-up phase `name` (`startup`: recorded, not logged); a block that raises
    is neither logged nor counted."""
    wall, cpu = time.perf_counter(), cpu_seconds()
    yield
    wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
    if is_startup:
        startup(name, wall, cpu)
        return
    add(name, wall, cpu)
    log.debug("%s%s: %.2f s (%.2f CPU s)", f"{what} " if what else "", name, wall, cpu)


def timed_steps(name: str, items: Iterable[T]) -> Iterator[T]:
    """`items`, the time each takes to come (a reader's) added to phase `name`."""
    it, end = iter(items), object()
    while True:
        wall, cpu = time.perf_counter(), cpu_seconds()
        item = next(it, end)
        add(name, time.perf_counter() - wall, cpu_seconds() - cpu)
        if item is end:
            return
        yield item


def add(name: str, wall: float, cpu: float | None = None) -> None:
    """Add `wall` and `cpu` seconds to phase `name` (`cpu` None: not measured for this phase)."""
    with _lock:
        w, c = _totals.get(name, (0.0, None))
        both_none = cpu is None and c is None
        _totals[name] = (w + wall, None if both_none else (c or 0.0) + (cpu or 0.0))


def begin_run() -> None:
    """Start a run's phases (the command's start-up ones stay)."""
    with _lock:
        _totals.clear()


def reset() -> None:
    """Forget every phase, the start-up ones too."""
    with _lock:
        _totals.clear()
        _startup.clear()


def totals() -> dict[str, tuple[float, float | None]]:
    """Phase -> (wall, CPU) seconds so far, in `ORDER` (then any other names)."""
    with _lock:
        both = {**_startup, **_totals}
        names = [n for n in ORDER if n in both] + sorted(set(both) - set(ORDER))
        return {n: both[n] for n in names}


def summary() -> str:
    """One line: every phase's wall seconds (and CPU seconds) so far; after a command's start-up
    phases, also the seconds of the process in none of them (`other`)."""
    phases = totals()
    parts = [
        f"{n} {w:.2f} s" + ("" if c is None else f" ({c:.2f} CPU s)")
        for n, (w, c) in phases.items()
    ]
    age = process_seconds() if "start" in phases else None
    if age is not None:
        parts.append(f"other {max(age - sum(w for w, _ in phases.values()), 0.0):.2f} s")
    return "phases: " + (", ".join(parts) if parts else "none timed")
