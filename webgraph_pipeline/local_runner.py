"""A workaround for a data race in Beam's local runner (FnApiRunner) that loses elements.

The FnApiRunner streams each bundle's input to its gRPC SDK workers (`--direct_running_mode
multi_processing` or `multi_threading`) through Beam's `TimeBasedBufferingClosableOutputStream`,
flushed every `DATA_BUFFER_TIME_LIMIT_MS` (1000 ms) by a background thread. Its `flush` sends
`get()` and then `_clear()`s the buffer, while `write` takes no lock: a chunk the runner writes
while a flush is sending (the send blocks when gRPC's send queue is full) is cleared unsent. The
runner writes a stage's input in several chunks when that input is a materialized PCollection, as
the Flatten in front of every multi-input CoGroupByKey is; so large joins lost elements without an
error (half of the edges at 1M pages). `tests/test_local_runner.py` reproduces it in seconds.

With the limit at 0 the streams buffer by size only, flushed by the thread that writes (for a
batch job the time flush buys nothing). Other runners (Dataflow) do not read this setting.
"""

from __future__ import annotations


def disable_time_based_flush() -> None:
    """Make the FnApiRunner started after this call in this process buffer its data plane by size only."""
    from apache_beam.runners.portability.fn_api_runner import worker_handlers

    worker_handlers.DATA_BUFFER_TIME_LIMIT_MS = 0
