"""The host cores a process may use, and work spread over them in threads (NumPy's sorts,
gathers, decoding and casts release the GIL for most of their work)."""

from __future__ import annotations

import concurrent.futures
import os
from typing import Callable, Iterable, Iterator, TypeVar

import numpy as np

T = TypeVar("T")
R = TypeVar("R")


def host_threads() -> int:
    """The cores this process may run on (threads for host-side work)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def thread_map(fn: Callable[[T], R], items: Iterable[T], threads: int | None = None) -> list[R]:
    """`[fn(x) for x in items]` in `threads` threads (None: `host_threads()`), in order."""
    items = list(items)
    workers = max(1, min(threads or host_threads(), len(items)))
    if workers == 1:
        return [fn(x) for x in items]
    with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="alx-host") as pool:
        return list(pool.map(fn, items))


def ordered(fn: Callable[[T], R], items: Iterable[T], ahead: int) -> Iterator[R]:
    """`fn(x)` for each of `items`, in order, computed in `ahead` threads at most `ahead` + 1 items
    ahead of the consumer (so many results in memory at a time)."""
    if ahead <= 1:
        yield from map(fn, items)
        return
    with concurrent.futures.ThreadPoolExecutor(ahead, thread_name_prefix="alx-host") as pool:
        pending: list[concurrent.futures.Future] = []
        try:
            for x in items:
                pending.append(pool.submit(fn, x))
                if len(pending) > ahead:
                    yield pending.pop(0).result()
            while pending:
                yield pending.pop(0).result()
        finally:
            for f in pending:
                f.cancel()


def widened(host: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Table rows `host` as float32, copied into `out` when given (else float32 rows are returned
    as they are), in a thread per core (a bfloat16 table widens without a single-thread pass)."""
    if out is None:
        if host.dtype == np.float32:
            return host
        out = np.empty(host.shape, np.float32)
    step = max(1, -(-len(host) // host_threads()))

    def widen(lo: int) -> None:
        out[lo : lo + step] = host[lo : lo + step]

    thread_map(widen, range(0, len(host), step))
    return out
