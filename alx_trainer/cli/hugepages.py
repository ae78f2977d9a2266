"""Transparent huge pages for the trainer's large buffers (glibc's `malloc.hugetlb` tunable).

Embedding lookups read rows of a table at random. With 4 KiB pages a table of hundreds of MB
spans far more pages than the TLB holds, so nearly every row read also walks the page tables
(measured in docs/benchmarks.md, "Figures behind code choices"). Hosts whose THP mode is
`madvise` only give huge pages to memory that asks
for them: NumPy asks, XLA's allocator does not, but glibc does for every large allocation
when started with `GLIBC_TUNABLES=glibc.malloc.hugetlb=1`. Tunables are read when a process
starts, so the command line restarts itself once with it set.
"""

from __future__ import annotations

import os
import sys

TUNABLE = "glibc.malloc.hugetlb=1"
THP_MODE = "/sys/kernel/mm/transparent_hugepage/enabled"


def wanted() -> bool:
    """Whether a restart would add huge pages: Linux, THP in `madvise` mode, GLIBC_TUNABLES unset.

    Setting GLIBC_TUNABLES (even empty) keeps the process as it is.
    """
    if "GLIBC_TUNABLES" in os.environ or not sys.platform.startswith("linux"):
        return False
    try:
        with open(THP_MODE) as f:
            return "[madvise]" in f.read()
    except OSError:
        return False


def restart_with_hugepages(module: str, argv: list[str]) -> None:
    """Replace this process by `python -m module argv...` with the tunable set, when `wanted()`."""
    if wanted():
        env = dict(os.environ, GLIBC_TUNABLES=TUNABLE)
        os.execve(sys.executable, [sys.executable, "-m", module, *argv], env)
