"""Beam's local runner loses elements on gRPC workers; `local_runner.disable_time_based_flush`
avoids it.

The race (see webgraph_pipeline/local_runner.py): the runner streams a stage's input to an SDK
worker through a data-plane stream that a background thread flushes every
`DATA_BUFFER_TIME_LIMIT_MS`; a chunk written while a flush is sending is cleared unsent. These are
the minimal reproducers, independent of the WebGraph job: the stream alone, and a plain
CoGroupByKey on two worker processes with the flush period shrunk from 1000 ms to 1 ms.
"""

from __future__ import annotations

import sys
import time

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import worker_handlers
from apache_beam.runners.worker import data_plane

from webgraph_pipeline.local_runner import disable_time_based_flush

TWO_PROCESSES = ["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"]


def _stream_round_trip(time_limit_ms: int) -> tuple[bytes, bytes]:
    """(bytes written, bytes sent) through a runner-style data-plane stream whose sends are slow."""
    sent: list[bytes] = []

    def slow_send(data: bytes) -> None:
        sent.append(data)
        time.sleep(0.02)  # a send blocked on a full gRPC queue

    stream = data_plane.ClosableOutputStream.create(sent.append, slow_send, time_limit_ms)
    written = []
    for i in range(100):
        chunk = b"%04d;" % i * 200
        written.append(chunk)
        stream.write(chunk)
        time.sleep(0.001)
    stream.close()
    return b"".join(written), b"".join(sent)


def test_beams_time_flushed_stream_drops_chunks_written_during_a_flush():
    written, sent = _stream_round_trip(time_limit_ms=5)
    # Beam's bug: still there (drop the workaround once it is not)
    assert len(sent) < len(written) / 2
    written, sent = _stream_round_trip(time_limit_ms=0)  # what disable_time_based_flush selects
    assert sent == written


def _cogroup_sizes(
    argv: list[str], out_dir, tags: int = 8, keys: int = 2000, payload: int = 1000
) -> dict[int, int]:
    """{key: grouped values} of a CoGroupByKey of `tags` PCollections (a Flatten the runner
    materializes)."""
    out_dir.mkdir()
    with beam.Pipeline(options=PipelineOptions(argv)) as p:
        numbers = p | beam.Create(range(keys)) | beam.Reshuffle()
        tagged = {
            f"t{j}": numbers | f"Tag{j}" >> beam.Map(lambda i: (i % 100, "x" * payload))
            for j in range(tags)
        }
        (
            tagged
            | beam.CoGroupByKey()
            | beam.Map(lambda kv: f"{kv[0]} {sum(len(v) for v in kv[1].values())}")
            | beam.io.WriteToText(str(out_dir / "sizes"))
        )
    sizes = {}
    for path in out_dir.iterdir():
        for line in path.read_text().splitlines():
            key, n = line.split()
            sizes[int(key)] = int(n)
    return sizes


@pytest.fixture
def one_ms_flush(monkeypatch):
    """Beam's runner flush period shrunk from 1000 ms to 1 ms and threads switched every 10 us, so
    the race shows on small inputs."""
    monkeypatch.setattr(worker_handlers, "DATA_BUFFER_TIME_LIMIT_MS", 1)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(interval)


def test_cogroupbykey_on_two_worker_processes_loses_elements_with_beams_time_flush(
    one_ms_flush, tmp_path
):
    # A race: it lost 25-50% in 8 of 9 runs of this size on a quiet 2-core machine, but none in
    # three
    # runs beside a 17 GiB training job (a CI run at load 4); eight tries (about 4.5 s each).
    totals = []
    for attempt in range(8):
        totals.append(sum(_cogroup_sizes(TWO_PROCESSES, tmp_path / f"out{attempt}").values()))
        if totals[-1] < 8 * 2000:
            break
    assert min(totals) < 8 * 2000, totals  # the reproducer: whole chunks of the Flatten are gone


def test_cogroupbykey_on_two_worker_processes_equals_in_memory_with_the_workaround(
    one_ms_flush, tmp_path
):
    disable_time_based_flush()
    expected = dict.fromkeys(range(100), 8 * 20)  # 2000 numbers -> 20 per key, once per tag
    assert _cogroup_sizes(TWO_PROCESSES, tmp_path / "two_processes") == expected
    assert _cogroup_sizes([], tmp_path / "in_memory") == expected
