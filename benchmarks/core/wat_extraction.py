"""WAT extraction per core (`benchmarks.pipeline --wat_records`): ours with each reader
against a plain warcio + json + urljoin loop, the decompress-and-decode floor and warcio reading
alone, in records per CPU second of this process; json against orjson on the same payloads."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import tempfile
import time
from typing import Callable

from benchmarks.core import wat_files


def ours(reader: str) -> Callable[[str], int]:
    """Our extraction (`wat_edges`) with `reader`: a function of a path giving its edge count."""

    def run(path: str) -> int:
        from webgraph_pipeline.counters import LocalCounts
        from webgraph_pipeline.wat import wat_edges

        counts = LocalCounts()
        with open(path, "rb") as f:
            return sum(1 for _ in wat_edges(f, counts.inc, reader=reader))

    return run


def best_cpu_seconds(fn: Callable[[str], int], path: str, repeat: int) -> tuple[float, int]:
    """The least CPU seconds of `repeat` runs of `fn` on `path`, and its result."""
    best, result = float("inf"), 0
    for _ in range(repeat):
        start = time.process_time()
        result = fn(path)
        best = min(best, time.process_time() - start)
    return best, result


def json_rates(path: str, limit: int = 20000) -> tuple[float, float]:
    """Payloads decoded per CPU second by json and by orjson."""
    import orjson

    payloads = [p for _, p in zip(range(limit), wat_files.json_payloads(path))]
    rates = []
    for loads in (json.loads, orjson.loads):
        start = time.process_time()
        for p in payloads:
            loads(p)
        rates.append(len(payloads) / (time.process_time() - start))
    return rates[0], rates[1]


def bench_extraction(records: int, repeat: int, work_dir: str) -> dict:
    """Every method on one replicated file of at least `records` records: a line each, ratios."""
    folder = pathlib.Path(tempfile.mkdtemp(prefix="wat_bench_", dir=work_dir))
    path = folder / f"bench-{records}.wat.gz"
    n = wat_files.replicate_sample(path, records)
    mb = os.path.getsize(path) / 1e6
    print(f"input: {path} ({n:,} WARC records, {mb:.1f} MB per-record gzip)")
    json_rate, orjson_rate = json_rates(str(path))
    print(
        f"JSON decode only: json {json_rate:,.0f}/s, orjson {orjson_rate:,.0f}/s "
        f"({orjson_rate / json_rate:.2f}x)"
    )
    methods = [
        ("(a)  ours, warcio reader", ours("warcio")),
        ("(a') ours, FastWARC reader", ours("fastwarc")),
        ("(b)  warcio + json + urljoin", wat_files.cc_pyspark_loop),
        ("(c)  floor: decompress + orjson", wat_files.decode_floor),
        ("(r)  warcio reading alone", wat_files.warcio_read_only),
    ]
    rates = {}
    for name, fn in methods:
        seconds, out = best_cpu_seconds(fn, str(path), repeat)
        rates[name[:4].strip()] = n / seconds
        print(
            f"{name:34s} {n / seconds:>10,.0f} records/s per core  ({seconds:.2f} s CPU, {out:,})"
        )
    a, a2, b, c = rates["(a)"], rates["(a')"], rates["(b)"], rates["(c)"]
    print(f"ratios: a/b = {a / b:.2f} (target >= 1.5), a/c = {a / c:.2f} (target >= 0.5)")
    print(f"        a'/b = {a2 / b:.2f}, a'/c = {a2 / c:.2f}", flush=True)
    shutil.rmtree(folder)
    return {"records": n, "records_per_cpu_s": rates}
