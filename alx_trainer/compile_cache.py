"""Compile once: JAX's persistent compilation cache for every command, and compile time counted.

`enable(setting)` points JAX at a cache directory before anything compiles: 'auto' is the user's
own `$XDG_CACHE_HOME/alx/jax` (`~/.cache/alx/jax`), 'off' none, anything else that directory.
JAX loads and runs the executables it finds there, so the directory is created 0700 and refused
when another user owns it or could write it (or could rename it: a group- or world-writable
parent without the sticky bit). Every program is cached, however small or quick to compile.

JAX's cache is keyed by the lowered program, so a warm run still traces and lowers every program
before it finds it there. The trainer's kernels skip that (`kept_program`): each factory's compiled
executables are kept whole in the cache directory's `programs/` (`jax.experimental.
serialize_executable`), keyed by everything the program is made from: the factory, its parameters
(the same key as its in-process `lru_cache`), the arguments' shapes, dtypes and shardings, the
devices, JAX and backend versions, XLA's flags, and a hash of the trainer's source. A warm run
loads them (`KeptProgram`) without tracing or lowering.

`counts()` reads what JAX has reported since this module was imported: seconds spent tracing,
lowering and compiling (or loading from the cache), and the programs XLA actually compiled
(compile requests less persistent-cache hits); the training loop records their growth per epoch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import logging
import os
import pickle
import secrets
import stat
import threading
import time
from typing import Any, Callable, Iterator

import jax
import numpy as np
from jax.experimental import serialize_executable
from jax.sharding import Mesh

from alx_trainer import phase_times
from alx_trainer.config import ConfigError
from webgraph_contract import fileio

AUTO, OFF = "auto", "off"
TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
LOWER_EVENT = "/jax/core/compile/jaxpr_to_mlir_module_duration"
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"  # a compile request, cache hit or not
HIT_EVENT = "/jax/compilation_cache/cache_hits"
# kept executables (`kept_program`), in the cache directory
KEPT_SUBDIR = "programs"
# the most kept executables; the least recently used beyond are removed
KEPT_MAX_FILES = 256
_kept_dir: str | None = None

log = logging.getLogger(__name__)


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
    global _kept_dir
    path = cache_dir(setting)
    _kept_dir = None if path is None else os.path.join(path, KEPT_SUBDIR)
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


class _ThreadHits(threading.local):
    """Persistent-cache hits of this thread's compiles (per-core devices compile in threads)."""

    count = 0


_thread_hits = _ThreadHits()


def _on_duration(event: str, duration: float, **_kw: Any) -> None:
    if event in (TRACE_EVENT, LOWER_EVENT, COMPILE_EVENT):
        _totals["seconds"] += duration
    if event == COMPILE_EVENT:
        _totals["requests"] += 1


def _on_event(event: str, **_kw: Any) -> None:
    if event == HIT_EVENT:
        _totals["hits"] += 1
        _thread_hits.count += 1


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


def kept_program(factory: Callable[..., Callable]) -> Callable[..., KeptProgram]:
    """Decorate a factory of a `jax.jit` program: made once per parameters (an `lru_cache`), its
    executables kept whole across runs (`KeptProgram`). The factory's program must depend only on
    its parameters and the trainer's code: those, not the function's closure, are the key."""
    name = f"{factory.__module__}.{factory.__qualname__}"

    @functools.lru_cache(maxsize=None)
    @functools.wraps(factory)
    def make(*args: Any, **kwargs: Any) -> KeptProgram:
        return KeptProgram(factory(*args, **kwargs), name, _params_key(args, kwargs))

    return make


def _params_key(args: tuple, kwargs: dict) -> str | None:
    """The factory's parameters as text, or None when one has no faithful text (an object's
    default repr): its programs are then not kept."""
    parts = []
    for value in (*args, *sorted(kwargs.items())):
        if isinstance(value, Mesh):
            # a mesh's repr names no devices
            value = ("Mesh", value.axis_names, tuple(d.id for d in value.devices.flat))
        text = repr(value)
        if " at 0x" in text:
            return None
        parts.append(text)
    return "\n".join(parts)


@functools.lru_cache(maxsize=1)
def _source_hash() -> str:
    """A hash of the trainer's and the contract's code: what a kept executable was made by."""
    digest = hashlib.sha256()
    here = os.path.dirname(os.path.abspath(__file__))
    for root in (here, os.path.join(os.path.dirname(here), "webgraph_contract")):
        for folder, dirs, files in os.walk(root):
            dirs.sort()
            for name in sorted(f for f in files if f.endswith(".py")):
                path = os.path.join(folder, name)
                with open(path, "rb") as f:
                    digest.update(os.path.relpath(path, root).encode() + b"\0" + f.read())
    return digest.hexdigest()


def _environment() -> tuple:
    """What else an executable depends on: JAX and NumPy, the backend and its devices, XLA's and
    libtpu's flags, JAX's settings (every one: a setting changed makes new executables) and the
    code."""
    devices = jax.devices()
    client = devices[0].client
    settings = sorted((k, repr(v)) for k, v in getattr(jax.config, "values", {}).items())
    return (
        jax.__version__,
        np.__version__,
        client.platform,
        client.platform_version,
        tuple((d.id, d.device_kind, d.process_index) for d in devices),
        os.environ.get("XLA_FLAGS", ""),
        os.environ.get("LIBTPU_INIT_ARGS", ""),
        [(k, v) for k, v in settings if " at 0x" not in v],
        _source_hash(),
    )


def _devices(sharding: jax.sharding.Sharding) -> tuple:
    """A sharding's devices, in the order its program numbers them."""
    mesh = getattr(sharding, "mesh", None)
    if isinstance(mesh, Mesh):
        return tuple(mesh.devices.flat)
    return tuple(sorted(sharding.device_set, key=lambda d: d.id))


def _signature(x: jax.Array | np.ndarray | np.generic) -> tuple:
    """(shape, dtype, weak type, sharding) of an argument; a host array's sharding is None (the
    program places it as it was compiled to)."""
    if isinstance(x, jax.Array):
        return x.shape, x.dtype, x.weak_type, x.sharding
    return np.shape(x), np.asarray(x).dtype, False, None


def salted_options(key: str) -> dict[str, int]:
    """Compile options that change nothing XLA builds but give the compile its own key in JAX's
    persistent cache, one per `key` (hex): how many buffers a debug print of XLA's buffer assignment
    lists (read only by that print; JAX's key leaves out the dump options, so not those)."""
    return {"xla_debug_buffer_assignment_show_max": (1 << 30) + int(key[:7], 16)}


class KeptProgram:
    """A jitted program whose executables are kept whole in the cache directory, one per argument
    signature, and loaded from there by later runs (`kept_program`). Without a cache directory, in
    a multi-process run, for parameters without a faithful key, or for arguments other than arrays
    (at least one a `jax.Array`, the others NumPy), it is the jitted program."""

    def __init__(self, jitted: Callable, name: str, params: str | None):
        self.jitted, self.name, self.params = jitted, name, params
        self.executables: dict = {}
        # one lock per signature: per-core devices' programs load or compile at once
        self.locks: dict = {}
        self.lock = threading.Lock()

    def __getattr__(self, attr: str) -> Any:
        # `lower`, `trace`, ...: the jitted program's
        return getattr(self.jitted, attr)

    def __call__(self, *args: Any) -> Any:
        folder = _kept_dir
        if folder is None or self.params is None or jax.process_count() > 1:
            return self.jitted(*args)
        leaves, tree = jax.tree_util.tree_flatten(args)
        if not any(isinstance(x, jax.Array) for x in leaves) or not all(
            isinstance(x, (jax.Array, np.ndarray, np.generic)) for x in leaves
        ):
            return self.jitted(*args)
        signature = (tree, tuple(map(_signature, leaves)))
        executable = self.executables.get(signature)
        if executable is None:
            with self.lock:
                lock = self.locks.setdefault(signature, threading.Lock())
            with lock:
                executable = self.executables.get(signature)
                if executable is None:
                    executable = self._load_or_compile(folder, signature, leaves, args)
                    self.executables[signature] = executable
        return executable(*args)

    def _key(self, signature: tuple) -> str:
        tree, arrays = signature
        arrays = tuple(
            (shape, str(dtype), weak, repr(where), where and [d.id for d in _devices(where)])
            for shape, dtype, weak, where in arrays
        )
        parts = (self.name, self.params, str(tree), arrays, _environment())
        return hashlib.sha256(repr(parts).encode()).hexdigest()

    def _load_or_compile(
        self, folder: str, signature: tuple, leaves: list, args: tuple
    ) -> Callable:
        """The executable for `args`: loaded from `folder`, else compiled and kept there; the
        jitted program where no key can be made (another JAX's settings or shardings)."""
        try:
            key = self._key(signature)
        except Exception as e:
            log.debug("no key for %s (%s): not kept", self.name, e)
            return self.jitted
        path = os.path.join(folder, f"{self.name}-{key}")
        start = time.perf_counter()
        # the program's devices: those of the argument spanning the most (the mesh's)
        devices = max((_devices(x.sharding) for x in leaves if isinstance(x, jax.Array)), key=len)
        try:
            with open(path, "rb") as f:
                blob, in_tree, out_tree = pickle.load(f)
            executable = serialize_executable.deserialize_and_load(
                blob, in_tree, out_tree, execution_devices=list(devices)
            )
            os.utime(path)
            _totals["seconds"] += time.perf_counter() - start
            return executable
        except FileNotFoundError:
            pass
        # one that no longer loads (a torn or foreign file): compiled again and replaced
        except Exception as e:
            log.debug("kept program %s does not load (%s): compiled again", path, e)
        lowered = self.jitted.lower(*args)
        compiled, fresh = _compile_fresh(lowered, key)
        if fresh:
            _keep(folder, path, compiled)
        return compiled


def _compile_fresh(lowered: jax.stages.Lowered, key: str) -> tuple[jax.stages.Compiled, bool]:
    """`lowered` compiled, and whether XLA compiled it (not JAX's persistent cache): on CPU an
    executable loaded from that cache serializes without its code (it would fail when run), so it
    is compiled once more with options salted by the kept `key` (`salted_options`: its own key in
    JAX's cache, whatever programs of the same text other code kept), and when that is cached too
    (this kept file was removed since) with a random salt, so that the program is kept again."""
    hits = _thread_hits.count
    compiled = lowered.compile()
    if _thread_hits.count == hits:
        return compiled, True
    for salt in (key, secrets.token_hex(4)):
        hits = _thread_hits.count
        try:
            again = lowered.compile(compiler_options=salted_options(salt))
        # a backend that refuses the option: the program is just not kept
        except Exception as e:
            log.debug("compiling afresh failed (%s): the program is not kept", e)
            return compiled, False
        if _thread_hits.count == hits:
            return again, True
    return compiled, False


def _keep(folder: str, path: str, compiled: jax.stages.Compiled) -> None:
    """Write `compiled` to `path` whole (atomically), and remove the least recently used kept
    executables beyond `KEPT_MAX_FILES`; a program that cannot be serialized is not kept."""
    try:
        data = pickle.dumps(serialize_executable.serialize(compiled))
    except (ValueError, NotImplementedError, TypeError, pickle.PicklingError):
        return
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        fileio.write_atomic(path, data)
    except OSError:
        return
    kept = [e for e in os.scandir(folder) if not e.name.startswith(".")]
    if len(kept) > KEPT_MAX_FILES:
        # another thread or process may remove a file between the listing and its stat
        kept.sort(key=_mtime)
        for entry in kept[: len(kept) - KEPT_MAX_FILES]:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)


def _mtime(entry: os.DirEntry) -> float:
    """A kept file's modification time; 0 (first to go) for one already removed."""
    try:
        return entry.stat().st_mtime
    except OSError:
        return 0.0
