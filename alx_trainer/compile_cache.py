"""Compile once: JAX's persistent compilation cache for every command, and compile time counted.

`enable(setting)` points JAX at a cache directory before anything compiles: 'auto' is the user's
own `$XDG_CACHE_HOME/alx/jax` (`~/.cache/alx/jax`), 'off' none, anything else that directory.
JAX loads and runs the executables it finds there, so the directory is created 0700 and refused
when another user owns it or could write it (or could rename it: a group- or world-writable
parent without the sticky bit). Every program is cached, however small or quick to compile.

`counts()` reads what JAX has reported since this module was imported: seconds spent tracing,
lowering and compiling (or loading from the cache), and the programs XLA actually compiled
(compile requests less persistent-cache hits); the training loop records their growth per epoch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import stat
import time
from typing import Any, Iterator

import jax

from alx_trainer import phase_times
from alx_trainer.config import ConfigError

AUTO, OFF = "auto", "off"
TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
LOWER_EVENT = "/jax/core/compile/jaxpr_to_mlir_module_duration"
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"  # a compile request, cache hit or not
HIT_EVENT = "/jax/compilation_cache/cache_hits"


def default_dir() -> str:
    """The user's own cache directory for compiled programs."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "alx", "jax")


def _refusal(path: str) -> str | None:
    """Why JAX must not run programs from `path` (an existing directory), or None."""
    st = os.stat(path)
    if st.st_uid != os.getuid():
        return f"owned by uid {st.st_uid}, not this user ({os.getuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"writable by others (mode {stat.S_IMODE(st.st_mode):o})"
    parent = os.path.dirname(path)
    while parent and parent != os.path.dirname(parent):
        pst = os.stat(parent)
        if pst.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not pst.st_mode & stat.S_ISVTX:
            return (
                f"inside {parent}, which others can write (mode {stat.S_IMODE(pst.st_mode):o}, no "
                "sticky bit)"
            )
        parent = os.path.dirname(parent)
    return None


def cache_dir(setting: str) -> str | None:
    """The directory `setting` ('auto', 'off' or a path) names, created 0700 and checked; None for
    'off'.

    Raises `ConfigError` (one line, naming the directory) when it cannot be used safely.
    """
    if setting == OFF:
        return None
    path = os.path.abspath(os.path.expanduser(default_dir() if setting in (AUTO, "") else setting))
    if os.path.exists(path) and not os.path.isdir(path):
        raise ConfigError(
            f"compile_cache: {path} is a file, not a directory; give a directory or 'off'"
        )
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as e:
        raise ConfigError(
            f"compile_cache: cannot create {path} ({e.strerror}); give another directory or 'off'"
        ) from e
    why = _refusal(path)
    if why:
        raise ConfigError(
            f"compile_cache: {path} is {why}; JAX runs the programs it finds there, so give a "
            "directory only you can write (e.g. chmod 700) or 'off'"
        )
    return path


def enable(setting: str) -> str | None:
    """Use the persistent compilation cache `setting` names (before the first compile); its path or
    None."""
    path = cache_dir(setting)
    if path is None:
        jax.config.update("jax_enable_compilation_cache", False)
        return None
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)  # small CPU programs too
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)  # no size floor, no override
    return path


@dataclasses.dataclass(frozen=True)
class CompileCounts:
    """Totals since import: seconds tracing, lowering and compiling or loading; programs
    compiled."""

    seconds: float = 0.0
    requests: int = 0
    hits: int = 0

    @property
    def compiled(self) -> int:
        """Programs XLA compiled (not served by the persistent cache)."""
        return self.requests - self.hits

    def since(self, earlier: "CompileCounts") -> "CompileCounts":
        return CompileCounts(
            self.seconds - earlier.seconds,
            self.requests - earlier.requests,
            self.hits - earlier.hits,
        )


_totals = {"seconds": 0.0, "requests": 0, "hits": 0}


def _on_duration(event: str, duration: float, **_kw: Any) -> None:
    if event in (TRACE_EVENT, LOWER_EVENT, COMPILE_EVENT):
        _totals["seconds"] += duration
    if event == COMPILE_EVENT:
        _totals["requests"] += 1


def _on_event(event: str, **_kw: Any) -> None:
    if event == HIT_EVENT:
        _totals["hits"] += 1


jax.monitoring.register_event_duration_secs_listener(_on_duration)
jax.monitoring.register_event_listener(_on_event)


def counts() -> CompileCounts:
    """What JAX reported since this module was imported."""
    return CompileCounts(_totals["seconds"], _totals["requests"], _totals["hits"])


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Time the block as `phase_times` phase `name`, less the seconds JAX spent tracing, lowering
    and compiling (or loading) in it, which go to phase 'compile' (summed over threads, at most the
    block's wall time)."""
    before, wall, cpu = counts(), time.perf_counter(), phase_times.cpu_seconds()
    yield
    wall = time.perf_counter() - wall
    compiling = min(counts().since(before).seconds, wall)
    phase_times.add("compile", compiling)
    phase_times.add(name, wall - compiling, phase_times.cpu_seconds() - cpu)
