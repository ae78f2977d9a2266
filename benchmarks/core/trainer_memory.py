"""Where the trainer's host memory goes: resident memory by training phase, beside JAX's buffers.

    python -m benchmarks.trainer_profile memory --data DIR [--dim 128] [--epochs 1]
        [--table_dtype bfloat16] [--limit_gib 21] [-- more alx_trainer train flags]

Runs `alx_trainer.train.train` in this process as `python -m alx_trainer train` would (the same CPU
split), with a sampler thread reading VmRSS from /proc/self/status every 20 ms. tracemalloc cannot
see XLA's buffers, so each phase (table init, planning, gramian, fixed-table replica, the normal
and long-row steps of each half-epoch, the finiteness check, the loss gramians) is wrapped to
record the resident memory on entering and leaving it and the highest sample inside it, and the
bytes of JAX's live arrays (distinct buffers) when it ends. One JSON line per phase, then a summary
with the process's VmHWM. The sampler stops the run (exit 3) when the resident memory passes
`--limit_gib` or the machine's available memory falls under 1 GiB.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import threading
import time

GIB = 2**30


def status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return int(f.read().split(f"{field}:")[1].split()[0])


def available_kib() -> int:
    with open("/proc/meminfo") as f:
        return int(f.read().split("MemAvailable:")[1].split()[0])


class Sampler:
    """RSS samples in a thread; `phase(name)` records the highest sample while it runs."""

    def __init__(self, limit_gib: float, period: float = 0.02):
        self.limit_kib, self.period = limit_gib * 2**20, period
        self.peak = 0  # highest sample since the last `phase` began (KiB)
        self.stack: list[str] = []
        threading.Thread(target=self._loop, daemon=True, name="rss-sampler").start()

    def _loop(self) -> None:
        while True:
            rss = status_kib("VmRSS")
            self.peak = max(self.peak, rss)
            if rss > self.limit_kib or available_kib() < 2**20:
                print(
                    json.dumps(
                        {
                            "stopped": "memory guard",
                            "phase": "/".join(self.stack),
                            "rss_gib": rss / 2**20,
                            "available_gib": available_kib() / 2**20,
                        }
                    ),
                    flush=True,
                )
                os._exit(3)
            time.sleep(self.period)

    @contextlib.contextmanager
    def phase(self, name: str):
        import jax

        self.stack.append(name)
        before = status_kib("VmRSS")
        outer_peak, self.peak = self.peak, before
        t = time.perf_counter()
        try:
            yield
        finally:
            seconds = time.perf_counter() - t
            after = status_kib("VmRSS")
            peak = max(self.peak, after)
            live = {
                a.unsafe_buffer_pointer(): a.nbytes
                for x in jax.live_arrays()
                for a in (s.data for s in x.addressable_shards)
                if not a.is_deleted()
            }  # donated: still listed
            print(
                json.dumps(
                    {
                        "phase": "/".join(self.stack),
                        "s": round(seconds, 2),
                        "rss_in_gib": round(before / 2**20, 2),
                        "peak_gib": round(peak / 2**20, 2),
                        "rss_out_gib": round(after / 2**20, 2),
                        "live_arrays_gib": round(sum(live.values()) / GIB, 2),
                        "live_buffers": len(live),
                    }
                ),
                flush=True,
            )
            self.stack.pop()
            self.peak = max(outer_peak, peak)


def wrap(sampler: Sampler, owner, attr: str, name: str) -> None:
    fn = getattr(owner, attr)

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with sampler.phase(name):
            out = fn(*args, **kwargs)
            import jax

            jax.tree.map(lambda x: x.block_until_ready() if isinstance(x, jax.Array) else x, out)
            return out

    setattr(owner, attr, wrapped)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.trainer_profile memory", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--data", required=True)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--table_dtype", default="bfloat16")
    parser.add_argument("--limit_gib", type=float, default=21.0)
    parser.add_argument("--model_dir", default="/tmp/trainer_memory_model")
    parser.add_argument("flags", nargs="*", help="more `alx_trainer train` flags (after --)")
    args = parser.parse_args(argv)
    sampler = Sampler(args.limit_gib)

    from alx_trainer.cli import train as cli_train
    from alx_trainer.cli.dataclass_flags import parse_dataclass_args
    from alx_trainer.config import TrainConfig

    argv = [
        "--data",
        args.data,
        "--model_dir",
        args.model_dir,
        "--dim",
        str(args.dim),
        "--epochs",
        str(args.epochs),
        "--table_dtype",
        args.table_dtype,
        "--eval_every",
        "0",
        "--checkpoint_every",
        "0",
        "--no-progress",
        *args.flags,
    ]
    config = parse_dataclass_args(TrainConfig, argv, prog="trainer_memory").validate()
    cli_train.split_cpu(config)
    import shutil

    from alx_trainer import model, train
    from alx_trainer.ops import side_runner

    shutil.rmtree(args.model_dir, ignore_errors=True)
    wrap(sampler, train, "init_tables", "init_tables")
    wrap(sampler, side_runner.SideRunner, "__init__", "plan")
    wrap(sampler, side_runner.SideRunner, "gramian", "gramian")
    wrap(sampler, side_runner.SideRunner, "replicated", "replica")
    wrap(sampler, side_runner.SideRunner, "run_normal", "normal_rows")
    wrap(sampler, side_runner.SideRunner, "run_long", "long_rows")
    wrap(sampler, side_runner.SideRunner, "run", "half_epoch")
    wrap(sampler, train, "_check_finite", "check_finite")
    del model
    with sampler.phase("train"):
        train.train(config, tables=False)  # as the command line runs it
    print(
        json.dumps({"vm_hwm_gib": round(status_kib("VmHWM") / 2**20, 2), "config": argv}),
        flush=True,
    )
