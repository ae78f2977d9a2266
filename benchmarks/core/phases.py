"""Where one training run's time and host memory go, from the trainer's own records: `train` on a
dataset directory (the public `alx_trainer.train.train`), the trainer's phases so far
(`alx_trainer.phase_times`: init, read, plan, pack, compile, epochs, checkpoint) and the resident
memory at each mark a callback sees (the tables and plan made, each half-epoch's end, the run's
end), with the highest resident memory a sampler thread saw since the mark before. A child of
`benchmarks.profile` (its own process, so that its peak is its own).
"""

from __future__ import annotations

import shutil
import threading
import time

from benchmarks.core import sections
from benchmarks.core.children import own_peak_gib, write_line
from benchmarks.core.device_host_memory import rss_bytes

GIB = 2**30
# seconds between two readings of the resident memory
SAMPLE_S = 0.02


class Sampler(threading.Thread):
    """Reads the resident memory every `SAMPLE_S` seconds; `take(now)` gives the highest reading
    since the last `take` (`now` included) and starts again from `now`."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak, self.done = rss_bytes(), threading.Event()
        self.lock = threading.Lock()

    def run(self) -> None:
        while not self.done.wait(SAMPLE_S):
            now = rss_bytes()
            with self.lock:
                self.peak = max(self.peak, now)

    def take(self, now: int) -> int:
        with self.lock:
            peak, self.peak = max(self.peak, now), now
        return peak


def phases_child(spec: dict, out: str) -> None:
    """`train` on `spec['data']` at `spec['dim']` and `spec['epochs']` (then `spec['ours']`
    overrides): a JSON line per mark, then the trainer's phases of the whole run."""
    from alx_trainer import phase_times
    from alx_trainer.callbacks import Callback
    from alx_trainer.train import train

    values = {
        "data": spec["data"],
        "model_dir": spec["model_dir"],
        "dim": spec["dim"],
        "epochs": spec["epochs"],
        "eval_every": 0,
        "checkpoint_every": 0,
        "progress": False,
        "log_level": "warning",
    }
    config = sections.typed_config(values, spec["ours"])
    shutil.rmtree(config.model_dir, ignore_errors=True)
    sampler, start = Sampler(), time.perf_counter()

    def mark(name: str) -> None:
        now = rss_bytes()
        write_line(
            out,
            {
                "mark": name,
                "seconds": time.perf_counter() - start,
                "rss_gib": now / GIB,
                "peak_since_gib": sampler.take(now) / GIB,
                "trainer_phases": phase_times.totals(),
            },
        )

    class Marks(Callback):
        def on_train_begin(self, run) -> None:
            mark("tables and plan")

        def on_half_epoch_end(self, run, epoch: int, side: str) -> None:
            mark(f"epoch {epoch} {side}")

        def on_train_end(self, run) -> None:
            mark("end")

    sampler.start()
    model = train(config, callbacks=[Marks()])
    sampler.done.set()
    result = {
        "trainer_phases": phase_times.totals(),
        "epochs_s": [r["seconds"] for r in model.metrics],
        "peak_host_gib": own_peak_gib(),
    }
    write_line(out, {"result": result})
