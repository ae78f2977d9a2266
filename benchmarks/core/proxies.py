"""Proxies of the trainer's accelerator path that need no GPU (issue 27), forced on CPU devices: the
`proxies` section of `benchmarks.profile`, a child process with its own CPU device count.

Trains a power-law matrix held in memory (`dataset.in_memory`) with `accelerator='on'` and writes,
per epoch after the first: the compiled programs launched per half-epoch (epoch 2, from JAX's
profiler trace: every launch, whatever made it); the host CPU seconds spent outside device work
(later epochs, untraced: the process's CPU time less that of XLA's own threads, which run the
programs on CPU devices; the main thread and every thread Python starts count), over the epoch's
own window (`window_s`: from its row half-epoch's start to its column half-epoch's end, the
epoch's timer less its closing checks; a reading of about half a millisecond inside), with its
resolution (a microsecond where the kernel keeps threads' run times in ns, else a clock tick per
XLA thread) and its share of that window, none where the resolution is over 1% of it; and the bytes
copied host-to-device (every NumPy array handed to `jax.device_put` and `jax.make_array_from_*`,
counted by wrapping those JAX functions; no trainer code is touched). Targets: <= 16 calls per
half-epoch, 0 bytes after epoch 1 when the batches are resident, host CPU <= 5% of the epoch. Then
XLA's bytes accessed and FLOPs per epoch from its cost analysis (`alx_trainer.train.epoch_cost`:
every program of an epoch compiled with its loops unrolled), all devices together, beside the
counted minimum (`benchmarks.core.work`) and their ratio (target: <= 2x at the 25M size).
"""

from __future__ import annotations

import os
import resource
import tempfile
import threading
import time

from benchmarks.core.children import write_line


def proxies_child(spec: dict, out: str) -> None:
    """(A child whose XLA_FLAGS set `spec['devices']` CPU devices) `spec`'s power-law matrix
    trained on the accelerator path: a JSON line per epoch after the first, then XLA's cost
    against the counted minimum, then the run's shape."""
    import jax

    from alx_trainer.callbacks import Callback
    from alx_trainer.config import TrainConfig
    from alx_trainer.data.dataset import in_memory
    from alx_trainer.model import table_dtype
    from alx_trainer.train import epoch_cost, train
    from benchmarks.core.power_law import power_law_csr
    from benchmarks.core.trace import launches
    from benchmarks.core.work import epoch_work

    rows, cols_n, dim, devices = spec["rows"], spec["cols"], spec["dim"], spec["devices"]
    indptr, cols, _ = power_law_csr(0, rows, cols_n, spec["nnz"], on="host", col_exponent=0.5)
    held = in_memory("power-law", indptr, cols, cols_n)
    copied = count_host_to_device(jax)
    trace_dir = tempfile.mkdtemp(prefix="alx_proxies_")

    class Measure(Callback):
        """Epoch 2 under the profiler (program launches), the later epochs without it (CPU,
        copies)."""

        def on_half_epoch_begin(self, run, epoch, side, total_steps) -> None:
            # the epoch's timer starts just before; the reading's own CPU inside both
            if side == "row":
                wall = time.perf_counter()
                self.start = (host_cpu_seconds(), wall)

        def on_half_epoch_end(self, run, epoch, side) -> None:
            # its last device work; then its checks and loss terms
            if side == "col":
                self.end = (time.perf_counter(), host_cpu_seconds())

        def on_epoch_end(self, run, epoch, record) -> None:
            (end, host), ((host0, resolution), start) = self.end, self.start
            line = {"epoch": epoch, "seconds": round(record["seconds"], 4)}
            if epoch == 2:
                jax.profiler.stop_trace()
                calls = launches(trace_dir)
                line.update(calls_per_epoch=sum(calls.values()), calls_by_program=dict(calls))
            elif epoch > 2:
                line.update(host_share(end - start, host[0] - host0, max(host[1], resolution)))
            if epoch > 1:
                line.update(h2d_bytes=copied[0] - self.copied)
                write_line(out, line)
            if epoch == 1:
                options = jax.profiler.ProfileOptions()
                # Python's calls traced would add host time
                options.python_tracer_level = 0
                jax.profiler.start_trace(trace_dir, profiler_options=options)
            self.copied = copied[0]

    config = TrainConfig(
        data="power-law",
        model_dir=tempfile.mkdtemp(prefix="alx_proxies_model_"),
        dim=dim,
        epochs=spec["epochs"],
        eval_every=0,
        checkpoint_every=0,
        progress=False,
        train_loss_every=0,
        accelerator="on",
        resident_batches=spec["resident"],
        cg_form=spec["cg_form"],
    )
    t = time.perf_counter()
    train(config, dataset=held, tables=False, callbacks=[Measure()])
    total_s = time.perf_counter() - t
    t = time.perf_counter()
    # per device
    cost = epoch_cost(config, held)
    table_bytes = jax.numpy.dtype(table_dtype(config)).itemsize
    _, minimum = epoch_work(rows, cols_n, len(cols), dim, config.cg_iters, table_bytes)
    xla_bytes = cost["bytes_per_epoch"] * devices
    cost_line = {
        "xla_bytes_per_epoch": xla_bytes,
        "xla_flops_per_epoch": cost["flops_per_epoch"] * devices,
        "launches_per_epoch": cost["launches_per_epoch"],
        "counted_bytes_per_epoch": minimum,
        "xla_bytes_ratio": round(xla_bytes / minimum, 3),
        "cost_s": round(time.perf_counter() - t, 2),
    }
    shape = {"rows": rows, "cols": cols_n, "nnz": int(len(cols)), "dim": dim, "devices": devices}
    write_line(out, {"result": dict(shape, cost=cost_line, total_s=round(total_s, 2))})


def count_host_to_device(jax) -> list[int]:
    """Wrap JAX's host-to-device entry points; the returned one-item list holds the bytes copied
    so far."""
    total = [0]

    def nbytes(value) -> int:
        return (
            int(value.nbytes)
            if hasattr(value, "nbytes") and not isinstance(value, jax.Array)
            else 0
        )

    def wrap(name: str, arg: int) -> None:
        original = getattr(jax, name)

        def counted(*a, **kw):
            total[0] += nbytes(a[arg]) if len(a) > arg else 0
            return original(*a, **kw)

        setattr(jax, name, counted)

    wrap("device_put", 0)
    wrap("make_array_from_process_local_data", 1)
    original = jax.make_array_from_callback

    def from_callback(shape, sharding, callback, *a, **kw):
        def counted(index):
            value = callback(index)
            total[0] += nbytes(value)
            return value

        return original(shape, sharding, counted, *a, **kw)

    jax.make_array_from_callback = from_callback
    return total


def host_cpu_seconds() -> tuple[float, float]:
    """(CPU seconds of the process so far less those of the live threads Python did not start (XLA's
    own: they run the programs on CPU devices), the resolution of that figure in seconds). Python's
    threads count, ended ones included. The process's time (getrusage) is exact to a microsecond;
    each XLA thread's is its scheduler run time in ns (/proc/.../schedstat) where the kernel keeps
    it, else its utime + stime in clock ticks (10 ms each at 100 Hz: the resolution is a tick per
    thread)."""
    python = {t.native_id for t in threading.enumerate()}
    usage = resource.getrusage(resource.RUSAGE_SELF)
    device, tick, resolution = 0.0, 1 / os.sysconf("SC_CLK_TCK"), 1e-6
    for task in os.listdir("/proc/self/task"):
        if int(task) in python:
            continue
        try:
            with open(f"/proc/self/task/{task}/schedstat") as f:
                device += int(f.read().split()[0]) / 1e9
            continue
        # the thread ended
        except (FileNotFoundError, ProcessLookupError):
            continue
        # no schedstat: clock ticks
        except (OSError, ValueError, IndexError):
            pass
        try:
            with open(f"/proc/self/task/{task}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        # utime, stime
        device += (int(fields[11]) + int(fields[12])) * tick
        resolution += tick
    return usage.ru_utime + usage.ru_stime - device, resolution


# a share is reported where its resolution is at most this
SHARE_STEP = 0.01


def host_share(window_s: float, host_cpu_s: float, resolution_s: float) -> dict:
    """The host CPU figures of one epoch: its seconds over `window_s` (the epoch's own timer, from
    its first half-epoch's start to its end), their resolution, and their share of the window,
    or none where the resolution over so short a window exceeds `SHARE_STEP`."""
    line = {
        "window_s": round(window_s, 4),
        "host_cpu_s": round(host_cpu_s, 4),
        "host_cpu_resolution_s": round(resolution_s, 6),
    }
    if host_cpu_s < 0:
        # getrusage and the threads' schedstat disagree by more than this epoch's host work
        line["host_cpu_share"] = None
        line["host_cpu_share_note"] = f"below the accounting's noise over a {window_s:.3g} s epoch"
    elif resolution_s > SHARE_STEP * window_s:
        line["host_cpu_share"] = None
        line["host_cpu_share_note"] = (
            f"below resolution: {resolution_s:.3g} s of CPU over a {window_s:.3g} s epoch"
        )
    else:
        line["host_cpu_share"] = round(host_cpu_s / window_s, 4)
    return line
