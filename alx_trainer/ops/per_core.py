"""One thread per CPU device, each pinned to its own core.

A CPU host split into one JAX device per core (`jax_num_cpu_devices`) runs its programs on
XLA's runtime threads, which take over kernels and whole loop bodies of any device on any core:
a device's work then moves between cores and away from the blocks it keeps in a core's own L2
cache. `use_cpu_devices` therefore (1) turns off asynchronous dispatch, so a single-device
program starts in the thread that calls it, and `run` gives each device a thread pinned to its
own core; (2) creates the CPU client while the process may use one core only, so that XLA's
threads do not float, and then pins the threads the client made one per core: a thread keeps
the cores it was created with, and XLA runs the thunks of a large program (a scan over many
batches) on its intra-op pool, not in the calling thread. Left on the first core, that pool
runs every device's work on one core (the figures: docs/benchmarks.md, "Figures behind code
choices").
"""

from __future__ import annotations

import functools
import importlib.util
import os
from concurrent.futures import ThreadPoolExecutor, wait
from importlib import metadata
from typing import Callable, Sequence, TypeVar

import jax

T = TypeVar("T")


def use_cpu_devices(count: int) -> bool:
    """Split the CPU into `count` JAX devices; with more than one, set up as described above.

    Call before JAX starts (it starts it); returns False, changing nothing, if it had started.
    """
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:  # the backend exists already: its devices stay as they are
        return False
    if count > 1:
        jax.config.update("jax_cpu_enable_async_dispatch", False)
        _start_on_one_core(count)
    return True


def _start_on_one_core(count: int) -> None:
    """Create JAX's backends while this thread may only run on its first core, then pin the
    threads they started one per core of the `count` devices' cores (those `run` pins device
    threads to), in the order they were made (see above)."""
    allowed = cores()
    if not hasattr(os, "sched_setaffinity") or len(allowed) < 2:
        jax.devices()
        return
    before = threads()
    os.sched_setaffinity(0, allowed[:1])
    try:
        jax.devices()
    finally:
        os.sched_setaffinity(0, allowed)
    used = allowed[:count]
    for k, tid in enumerate(sorted(threads() - before)):
        try:
            os.sched_setaffinity(tid, {used[k % len(used)]})
        except ProcessLookupError:  # a short-lived thread that has ended
            pass


def threads() -> set[int]:
    """This process's thread ids (Linux; empty elsewhere)."""
    try:
        return {int(t) for t in os.listdir("/proc/self/task")}
    except FileNotFoundError:
        return set()


def accelerator_plugins() -> bool:
    """Whether a GPU or TPU backend may be installed (then the CPU is not split)."""
    return (
        bool(metadata.entry_points(group="jax_plugins"))
        or importlib.util.find_spec("libtpu") is not None
    )


def cores() -> list[int]:
    """The CPU cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def applies(devices: Sequence) -> bool:
    """Whether `devices` get a thread each: several CPU devices of this process, at most one per
    core."""
    local = all(d.process_index == jax.process_index() for d in devices)
    return local and all(d.platform == "cpu" for d in devices) and 1 < len(devices) <= len(cores())


@functools.cache
def _worker(j: int, cpu: int | None) -> ThreadPoolExecutor:
    """The long-lived thread of task slot j, pinned to core `cpu` (None: not pinned).

    Kept for the process: a long-row half-epoch runs a `run` per CG pass, each of which used to
    start, pin and join new threads.
    """
    pool = ThreadPoolExecutor(1, thread_name_prefix=f"alx-device{j}")
    if cpu is not None:
        pool.submit(os.sched_setaffinity, 0, {cpu}).result()  # pid 0: that thread only
    return pool


def run(tasks: Sequence[Callable[[], T]]) -> list[T]:
    """Run task j in thread j (pinned to core j when dispatch is synchronous); results in order.

    The first task to raise re-raises here, after every task has finished.
    """
    cpus = cores()
    pin = (
        hasattr(os, "sched_setaffinity")
        and not jax.config.read("jax_cpu_enable_async_dispatch")
        and len(tasks) <= len(cpus)
    )
    futures = [_worker(j, cpus[j] if pin else None).submit(task) for j, task in enumerate(tasks)]
    wait(futures)
    return [f.result() for f in futures]
