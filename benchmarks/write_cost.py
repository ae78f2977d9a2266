"""Where the writing of a TFRecord shard goes, per edge written: proto serialization
(`contract.encode_rows`), CRC-32C of the records, TFRecord framing (headers, masked CRCs) and the
file write. The shards are uncompressed: there is no gzip step to time.

A shard of R rows with power-law lengths (Pareto, mean about 6 columns) and column ids below 2^21,
the shape of a train shard of the 10M-edge benchmark graph; CPU seconds, best of `--repeats`.

  python benchmarks/write_cost.py --rows 125000
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from webgraph_pipeline import contract, fileio  # noqa: E402


def best_cpu(f, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        f()
        best = min(best, time.process_time() - start)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=125_000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    from google_crc32c import value as crc32c

    rng = np.random.default_rng(0)
    lengths = np.minimum(np.maximum(1, (rng.pareto(1.5, args.rows) * 3).astype(np.int64)), 5000)
    ptr = np.concatenate([[0], np.cumsum(lengths)])
    cols = rng.integers(0, 1_250_000, int(ptr[-1]))
    rows = np.arange(args.rows, dtype=np.int64) * 8
    edges = int(ptr[-1])
    records = contract.encode_rows(rows, ptr, cols)
    pieces = fileio.tfrecord_frames(records)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "shard.tfr")

        def write_file():
            with open(path, "wb") as f:
                f.write(b"".join(pieces))

        parts = {
            "proto (encode_rows)": lambda: contract.encode_rows(rows, ptr, cols),
            "CRC-32C of the records": lambda: list(map(crc32c, records)),
            "framing (tfrecord_frames, CRCs included)": lambda: fileio.tfrecord_frames(records),
            "file write (join + write)": write_file,
            "all (encode_rows + write_records)": lambda: fileio.write_records(path, contract.encode_rows(rows, ptr, cols)),
        }
        print(f"{args.rows:,} rows, {edges:,} edges, {sum(map(len, records)) / edges:.1f} record bytes per edge; "
              f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        for name, f in parts.items():
            print(f"  {name:42s} {best_cpu(f, args.repeats) / edges * 1e9:7.1f} CPU ns/edge")
    return 0


if __name__ == "__main__":
    sys.exit(main())
