"""A CPU proxy of a GPU run's host memory: a command's resident memory outside its device buffers.

    python -m benchmarks.core.device_host_memory RESULT_JSON MODULE [ARGS...]

runs `python -m MODULE ARGS...` in this process (runpy; `alx_trainer` restarts itself with huge
pages first, as `python -m alx_trainer train` does) with a daemon thread that every `SAMPLE_S`
seconds reads the resident memory (VmRSS) and the bytes of every live JAX array
(`jax.live_arrays()`, each addressable shard's buffer counted once by its device and address, so
an array that aliases a NumPy array, which CPU devices do without a copy, is counted once and a
buffer two arrays share is not counted twice). On CPU devices the "device" buffers are host
memory; on a GPU they are not, so RSS less the live arrays' bytes is what the GPU run's host would
hold ("host peak outside device buffers"), and the live arrays' peak is its device peak. At exit
(an exit handler: `python -m alx_trainer` ends through them) RESULT_JSON gets both peaks in
bytes, the plain RSS peak (VmHWM), the seconds since the start of each host peak and the trainer
phase (`alx_trainer.phase_times`) last advanced before it.

What the proxy cannot tell apart: XLA's temporaries of a running program (device memory on a
GPU, host here, not live arrays) count as host; a NumPy array that the command keeps after a CPU
device aliased it counts as device, where a GPU run would hold it on the host too.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import sys
import threading
import time

# seconds between two readings (a reading costs about a ms per thousand live arrays; the wait is
# stretched to keep the sampler under a tenth of one core)
SAMPLE_S = 0.03
PAGE = os.sysconf("SC_PAGE_SIZE")
# this module's name, also when run as __main__ (its restart runs it again)
MODULE = "benchmarks.core.device_host_memory"


def rss_bytes() -> int:
    """This process's resident memory now (/proc/self/statm)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def hwm_bytes() -> int:
    """This process's peak resident memory since its exec (VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def live_array_bytes() -> int:
    """Bytes of the live JAX arrays' addressable buffers, each (device, address) once; 0 until
    the command has started its JAX backend (a reading neither imports JAX nor starts it: the
    command sets its devices first, and an import from this thread could meet the command's own
    import of JAX half done)."""
    bridge = sys.modules.get("jax._src.xla_bridge")
    # a private JAX name: the one way to ask without starting the backends
    started = getattr(bridge, "backends_are_initialized", None)
    if started is None or not started():
        return 0
    _stop_first()
    seen: dict[tuple[int, int], int] = {}
    for array in sys.modules["jax"].live_arrays():
        try:
            for shard in array.addressable_shards:
                data = shard.data
                seen[(shard.device.id, data.unsafe_buffer_pointer())] = data.nbytes
        # deleted or donated while being read
        except (RuntimeError, ValueError):
            continue
    return sum(seen.values())


# the running sampler's `stop`, registered as an exit handler once JAX's backends are up: after
# JAX's own handlers, so it runs before them (no reading of a backend that is shutting down)
_stops: list = []


def _stop_first() -> None:
    """Register the running sampler's stop (once), see `_stops`."""
    while _stops:
        atexit.register(_stops.pop())


def last_phase(before: dict, now: dict) -> tuple[str, dict]:
    """The trainer phase whose seconds grew between two `phase_times.totals()` (or '' when none
    did), and `now`."""
    grown = [name for name, secs in now.items() if before.get(name) != secs]
    return (grown[-1] if grown else ""), now


class Sampler(threading.Thread):
    """Reads RSS and the live JAX arrays' bytes until `stop()`; keeps the peak of their
    difference (with its time and phase) and of the arrays'."""

    def __init__(self) -> None:
        super().__init__(daemon=True, name="device-host-memory")
        self.start_time = time.monotonic()
        self.stopped = threading.Event()
        self.lock = threading.Lock()
        self.host_peak = self.device_peak = self.rss_peak = 0
        self.host_peak_s, self.host_peak_phase = 0.0, ""
        self.samples = 0
        self._phase, self._totals = "", {}

    def sample(self) -> None:
        """One reading."""
        # RSS read on both sides of the arrays, the lower taken: an array made or freed between
        # the readings would otherwise count as host
        before = rss_bytes()
        device = live_array_bytes()
        after = rss_bytes()
        host = min(before, after) - device
        phases = sys.modules.get("alx_trainer.phase_times")
        if phases is not None:
            grown, self._totals = last_phase(self._totals, phases.totals())
            self._phase = grown or self._phase
        with self.lock:
            self.samples += 1
            self.device_peak = max(self.device_peak, device)
            self.rss_peak = max(self.rss_peak, before, after)
            if host > self.host_peak:
                self.host_peak = host
                self.host_peak_s = time.monotonic() - self.start_time
                self.host_peak_phase = self._phase

    def run(self) -> None:
        wait = SAMPLE_S
        while not self.stopped.wait(wait):
            # this thread's CPU time, not the wall: waiting for the GIL while the command holds it
            # would otherwise stretch the wait past the rest of the run
            t = time.thread_time()
            self.sample()
            wait = max(SAMPLE_S, 10 * (time.thread_time() - t))

    def stop(self) -> None:
        """Stop reading (the last reading taken first, unless JAX has begun to shut down)."""
        if not self.stopped.is_set():
            self.stopped.set()
            self.join(timeout=5)

    def result(self) -> dict:
        with self.lock:
            return {
                "host_outside_device_peak_bytes": self.host_peak,
                "device_peak_bytes": self.device_peak,
                # the kernel's VmHWM can trail a reading of statm by a few pages (its RSS
                # counters are synced lazily): the larger of the two
                "rss_peak_bytes": max(hwm_bytes(), self.rss_peak),
                "host_peak_s": round(self.host_peak_s, 2),
                "host_peak_after_phase": self.host_peak_phase,
                "samples": self.samples,
            }


def restart_with_hugepages(argv: list[str]) -> None:
    """`python -m alx_trainer train` restarts itself with huge pages (`alx_trainer.cli.hugepages`)
    before it reads its flags; the same restart here, of this launcher, so the sampler stays."""
    if argv[:2] == ["alx_trainer", "train"] and not {"-h", "--help"} & set(argv[2:]):
        # the trainer's own rule of when to restart
        from alx_trainer.cli import hugepages

        if hugepages.wanted():
            env = dict(os.environ, GLIBC_TUNABLES=hugepages.TUNABLE)
            os.execve(sys.executable, [sys.executable, "-m", MODULE, *sys.argv[1:]], env)


def main() -> None:
    result_file, argv = sys.argv[1], sys.argv[2:]
    restart_with_hugepages(argv)
    sampler = Sampler()

    def write() -> None:
        sampler.stop()
        with open(result_file, "w") as f:
            json.dump(sampler.result(), f)

    # registered first, so run last (after the command's and JAX's exit handlers)
    atexit.register(write)
    _stops.append(sampler.stop)
    sampler.start()
    sys.argv = [argv[0], *argv[1:]]
    runpy.run_module(argv[0], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
