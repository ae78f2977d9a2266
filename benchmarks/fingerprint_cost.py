"""What the dataset fingerprint costs: hashing a written dataset vs writing it.

    python benchmarks/fingerprint_cost.py [--edges 1000000] [--shards 4] [--threads 4] [--repeats 3]

Writes a generated power-law matrix with `edges` nonzeros (`synthetic_matrix.write_matrix`: the
contract's train and train.transpose shards, the same records the pipeline writes), then times
`contract.fingerprint_dataset` on it (SHA-256 of every data file, in threads) against the write
itself, best of `repeats`, and against `hashlib.sha256` over the same bytes already in memory
(the single-core floor). Prints bytes, seconds, MB/s and the share of the write time.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import pathlib
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from webgraph_pipeline import contract, synthetic_matrix  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--edges", type=int, default=1_000_000)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    nodes = max(1000, int(args.edges ** 0.5 * 20))
    with tempfile.TemporaryDirectory() as out:
        t = time.perf_counter()
        synthetic_matrix.write_matrix(out, nodes, nodes, args.edges, num_shards=args.shards)
        write_s = time.perf_counter() - t  # includes one fingerprint: subtracted below
        names = contract.data_files(out)
        size = sum(os.path.getsize(os.path.join(out, n)) for n in names)
        hashed, floor = [], []
        for _ in range(args.repeats):
            t = time.perf_counter()
            contract.fingerprint_dataset(out, threads=args.threads)
            hashed.append(time.perf_counter() - t)
            blobs = [pathlib.Path(out, n).read_bytes() for n in names]
            t = time.perf_counter()
            for blob in blobs:
                hashlib.sha256(blob).hexdigest()
            floor.append(time.perf_counter() - t)
        best, low = min(hashed), min(floor)
        print(f"dataset: {args.edges:,} edges, {len(names)} files, {size / 1e6:.1f} MB")
        print(f"write (generate + encode + write, without its fingerprint): {write_s - best:.2f} s")
        print(f"fingerprint_dataset ({args.threads} threads, from disk): {best:.3f} s, {size / best / 1e6:.0f} MB/s, "
              f"{100 * best / (write_s - best):.1f}% of the write")
        print(f"sha256 of the same bytes in memory, one core: {low:.3f} s, {size / low / 1e6:.0f} MB/s")


if __name__ == "__main__":
    main()
