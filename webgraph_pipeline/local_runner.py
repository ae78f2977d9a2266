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

`runner_for` gives `--direct_running_mode multi_processing` the runner the DirectRunner picks for a
batch job (FnApiRunner), with its worker processes started quietly
(`webgraph_pipeline.beam_worker`).
"""

from __future__ import annotations

import sys
from typing import Any, Optional

WORKER_MAIN = "apache_beam.runners.worker.sdk_worker_main"
QUIET_WORKER_MAIN = "webgraph_pipeline.beam_worker"
DIRECT_RUNNERS = ("direct", "directrunner", "switchingdirectrunner")


def disable_time_based_flush() -> None:
    """Make the FnApiRunner started after this call in this process buffer its data plane by size
    only."""
    from apache_beam.runners.portability.fn_api_runner import worker_handlers

    worker_handlers.DATA_BUFFER_TIME_LIMIT_MS = 0


def runner_for(options: Any) -> Optional[Any]:
    """The runner for Beam `options` (PipelineOptions) that ask the DirectRunner for worker
    processes (`--direct_running_mode multi_processing`): Beam's FnApiRunner, as the DirectRunner
    would pick for a batch job, but starting each worker through `webgraph_pipeline.beam_worker`
    (quiet at import, see there). None for any other runner or mode: Beam picks as usual."""
    from apache_beam.options.pipeline_options import DirectOptions, StandardOptions

    runner = options.view_as(StandardOptions).runner
    if options.view_as(DirectOptions).direct_running_mode != "multi_processing" or not (
        runner is None or (isinstance(runner, str) and runner.lower() in DIRECT_RUNNERS)
    ):
        return None
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner.fn_runner import ExtendedProvisionInfo
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    # the workers read their options (their log level among them) from the provision info, as under
    # the DirectRunner
    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    info = ExtendedProvisionInfo(beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded))
    return _quiet_worker_runner_class()(provision_info=info)


def _quiet_worker_runner_class() -> type:
    """FnApiRunner whose subprocess workers run `python -m webgraph_pipeline.beam_worker` instead of
    Beam's `sdk_worker_main` (the same main, Beam imported quietly first)."""
    from apache_beam.portability import python_urns
    from apache_beam.runners.portability.fn_api_runner.fn_runner import FnApiRunner

    stock = f"{sys.executable} -m {WORKER_MAIN}".encode()
    quiet = f"{sys.executable} -m {QUIET_WORKER_MAIN}".encode()

    class QuietWorkerFnApiRunner(FnApiRunner):
        def run_via_runner_api(self, pipeline_proto, options):
            for environment in pipeline_proto.components.environments.values():
                if environment.urn == python_urns.SUBPROCESS_SDK and environment.payload == stock:
                    environment.payload = quiet
            return super().run_via_runner_api(pipeline_proto, options)

    return QuietWorkerFnApiRunner
