"""Edge-list block parsing: ours (`edge_formats.parse_block`) vs pandas and pyarrow CSV readers.

    python benchmarks/edge_parse.py [--edges 2000000] [--repeats 3]

Every parser turns the same text into the graph stage's input, two Python lists of str (one edge
batch per 1 MiB block, as `ReadEdgeList` reads files), on two real-shaped inputs: integer ids
(`123 456`) and URL ids (`http://a123.de/x http://b456.de/`). The peers: pandas `read_csv` (C engine,
whitespace separator, string columns, then `tolist()`), and pyarrow `csv.read_csv` (space delimiter,
string columns, then `to_pylist()`); neither counts comment or malformed lines by line number, so
ours does more work. Runs are interleaved, best of `repeats`, on one core; prints edges/s and the
ratio ours/peer.
"""

from __future__ import annotations

import argparse
import io
import os
import pathlib
import sys
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

BLOCK = 1 << 20


def blocks(data: bytes) -> list[bytes]:
    out, start = [], 0
    while start < len(data):
        end = data.rfind(b"\n", start, start + BLOCK) + 1 or len(data)
        out.append(data[start:end])
        start = end
    return out


def ours(parts: list[bytes]) -> int:
    from webgraph_pipeline.edge_formats import EdgeFormat, parse_block

    fmt, n = EdgeFormat("pairs"), 0
    for part in parts:
        b = parse_block(part, 2, fmt)
        n += len(b.src)
    return n


def pandas_csv(parts: list[bytes]) -> int:
    import pandas as pd

    n = 0
    for part in parts:
        df = pd.read_csv(io.BytesIO(part), sep=r"\s+", header=None, usecols=[0, 1], dtype=str, engine="c")
        src, dst = df[0].tolist(), df[1].tolist()
        n += len(src) if len(src) == len(dst) else -1
    return n


def pyarrow_csv(parts: list[bytes]) -> int:
    import pyarrow as pa
    from pyarrow import csv

    n = 0
    for part in parts:
        table = csv.read_csv(
            io.BytesIO(part),
            read_options=csv.ReadOptions(column_names=["src", "dst"], use_threads=False),
            parse_options=csv.ParseOptions(delimiter=" "),
            convert_options=csv.ConvertOptions(column_types={"src": pa.string(), "dst": pa.string()}),
        )
        src, dst = table.column("src").to_pylist(), table.column("dst").to_pylist()
        n += len(src) if len(src) == len(dst) else -1
    return n


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--edges", type=int, default=2_000_000)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 10**7, (args.edges, 2))
    inputs = {
        "integer ids": "".join(f"{a} {b}\n" for a, b in ids).encode(),
        "URL ids": "".join(f"http://a{a}.de/x http://b{b}.de/\n" for a, b in ids // 10).encode(),
    }
    peers = {"ours": ours, "pandas": pandas_csv, "pyarrow": pyarrow_csv}
    print(f"load average {os.getloadavg()[0]:.2f}; one core; {args.edges:,} edges per input, 1 MiB blocks")
    for name, data in inputs.items():
        parts = blocks(data)
        best = {k: float("inf") for k in peers}
        for _ in range(args.repeats):
            for k, fn in peers.items():  # interleaved
                t = time.perf_counter()
                assert fn(parts) == args.edges, k
                best[k] = min(best[k], time.perf_counter() - t)
        line = ", ".join(f"{k} {args.edges / s / 1e6:.2f} M edges/s" for k, s in best.items())
        ratios = ", ".join(f"ours/{k} {best[k] / best['ours']:.2f}x" for k in peers if k != "ours")
        print(f"{name} ({len(data) / 2**20:.0f} MiB): {line}; {ratios}")


if __name__ == "__main__":
    main()
