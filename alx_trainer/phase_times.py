"""Wall and CPU seconds of a training run's phases: each logged as it ends, all in one line at the
end.

Phases, in order: `init` (the initial tables, and a resumed checkpoint's), `read` (a side's
planning pass over its files), `plan` (its batch shape and counts), `pack` (its batch source:
packing, and for the accelerator path copying to the devices, with its own pass over the files),
`compile` (wall seconds only: `train` takes the epochs' `compile_seconds` out of `epochs`),
`epochs` (the half-epochs' work), `checkpoint` (the saves), `eval`. Wrap a phase in
`timed(name)` (its line logged at debug level), or report seconds measured elsewhere with `add`;
`train` starts each run with `reset` and logs `summary` at its end. CPU seconds are the whole
process's and its ended children's (the reader's decoding workers, which end with each read).
"""

from __future__ import annotations

import contextlib
import logging
import resource
import threading
import time
from typing import Iterator

log = logging.getLogger(__name__)

ORDER = ("init", "read", "plan", "pack", "compile", "epochs", "checkpoint", "eval")
_lock = threading.Lock()
_totals: dict[str, tuple[float, float | None]] = {}


def cpu_seconds() -> float:
    """CPU seconds of this process's threads and of its ended child processes."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


@contextlib.contextmanager
def timed(name: str, what: str = "") -> Iterator[None]:
    """Time the block as phase `name` (`what` says of what in its log line); a block that raises
    is neither logged nor counted."""
    wall, cpu = time.perf_counter(), cpu_seconds()
    yield
    wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
    add(name, wall, cpu)
    log.debug("%s%s: %.2f s (%.2f CPU s)", f"{what} " if what else "", name, wall, cpu)


def add(name: str, wall: float, cpu: float | None = None) -> None:
    """Add `wall` and `cpu` seconds to phase `name` (`cpu` None: not measured for this phase)."""
    with _lock:
        w, c = _totals.get(name, (0.0, None))
        both_none = cpu is None and c is None
        _totals[name] = (w + wall, None if both_none else (c or 0.0) + (cpu or 0.0))


def reset() -> None:
    with _lock:
        _totals.clear()


def totals() -> dict[str, tuple[float, float | None]]:
    """Phase -> (wall, CPU) seconds so far, in `ORDER` (then any other names)."""
    with _lock:
        names = [n for n in ORDER if n in _totals] + sorted(set(_totals) - set(ORDER))
        return {n: _totals[n] for n in names}


def summary() -> str:
    """One line: every phase's wall seconds (and CPU seconds) so far."""
    parts = [
        f"{n} {w:.2f} s" + ("" if c is None else f" ({c:.2f} CPU s)")
        for n, (w, c) in totals().items()
    ]
    return "phases: " + (", ".join(parts) if parts else "none timed")
