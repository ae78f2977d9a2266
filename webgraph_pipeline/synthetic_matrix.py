"""A generated power-law matrix written in the dataset contract, for trainer benchmarks at scale.

    python -m webgraph_pipeline.synthetic_matrix --out DIR --rows 1000000 --cols 250000 --nnz 25000000 [--seed 0]

Every edge draws its row and its column independently from Zipf-like rank distributions
(density ~ rank^-s, sampled by inverting the continuous CDF), ranks are mapped to ids through a
seeded random permutation (popular rows are spread over the id range, as they are over table
shards), duplicate pairs are dropped and more are drawn until exactly `nnz` distinct pairs exist.
The `train` and `train.transpose` splits are written as sorted CSR rows through
`contract.encode_rows` (vectorized, byte-identical to `contract.encode_row`) with `stats.json`;
there is no `test` split. The output is a function of the arguments only (NumPy's PCG64 by seed).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Sequence

import numpy as np

from webgraph_pipeline import contract


def power_law_ids(rng: np.random.Generator, n: int, size: int, exponent: float, perm: np.ndarray) -> np.ndarray:
    """`size` ids in [0, n) with density ~ rank^-exponent (0 <= exponent < 1), ranks mapped by `perm`."""
    if not 0 <= exponent < 1:
        raise ValueError(f"exponent: must be in [0, 1), got {exponent}")
    u = rng.random(size)
    ranks = (n * u ** (1 / (1 - exponent))).astype(np.int64)  # CDF (r / n)^(1 - s), inverted
    return perm[np.minimum(ranks, n - 1)]


def generate_pairs(num_rows: int, num_cols: int, nnz: int, seed: int = 0, row_exponent: float = 0.5,
                   col_exponent: float = 0.7) -> np.ndarray:
    """`nnz` distinct (row, col) pairs as sorted int64 keys `row * num_cols + col`."""
    if nnz > num_rows * num_cols:
        raise ValueError(f"nnz: {nnz} exceeds rows x cols = {num_rows * num_cols}")
    rng = np.random.default_rng(seed)
    row_perm, col_perm = rng.permutation(num_rows), rng.permutation(num_cols)
    keys = np.zeros(0, np.int64)
    while len(keys) < nnz:
        draw = int((nnz - len(keys)) * 1.1) + 16
        new = power_law_ids(rng, num_rows, draw, row_exponent, row_perm) * num_cols
        new += power_law_ids(rng, num_cols, draw, col_exponent, col_perm)
        keys = _sorted_unique(np.concatenate([keys, new]))
    if len(keys) > nnz:  # keep a seeded random subset of exactly nnz pairs
        keys = np.sort(keys[rng.choice(len(keys), nnz, replace=False)])
    return keys


def _sorted_unique(keys: np.ndarray) -> np.ndarray:
    """The distinct values, sorted (sort + neighbour compare: faster here than NumPy's hashing `unique`)."""
    keys.sort()
    return keys[np.concatenate([[True], keys[1:] != keys[:-1]])] if len(keys) else keys


def write_split(out: str, split: str, rows: np.ndarray, cols: np.ndarray, num_shards: int,
                rows_per_block: int = 200_000) -> int:
    """Write pairs sorted by row as the CSR records of `split` (one record per row with a column); returns records."""
    import tensorflow as tf

    starts = np.flatnonzero(np.concatenate([[True], rows[1:] != rows[:-1]])) if len(rows) else np.zeros(0, np.int64)
    row_ids = rows[starts]
    indptr = np.concatenate([starts, [len(rows)]])
    bounds = np.linspace(0, len(row_ids), num_shards + 1).astype(np.int64)
    prefix = contract.SPLIT_PREFIXES[split]
    for s in range(num_shards):
        path = os.path.join(out, contract.shard_name(prefix, s, num_shards, contract.TFRECORD_SUFFIX))
        with tf.io.TFRecordWriter(path) as writer:
            for lo in range(int(bounds[s]), int(bounds[s + 1]), rows_per_block):
                hi = min(lo + rows_per_block, int(bounds[s + 1]))
                a, b = indptr[lo], indptr[hi]
                for record in contract.encode_rows(row_ids[lo:hi], indptr[lo : hi + 1] - a, cols[a:b]):
                    writer.write(record)
    return len(row_ids)


def write_matrix(out: str, num_rows: int, num_cols: int, nnz: int, seed: int = 0, num_shards: int = 4,
                 row_exponent: float = 0.5, col_exponent: float = 0.7) -> dict:
    """Generate and write the dataset; returns its stats (also in `out/stats.json`)."""
    import tensorflow as tf

    tf.io.gfile.makedirs(out)
    for split in contract.SPLIT_PREFIXES:
        for path in tf.io.gfile.glob(contract.split_glob(out, split)):
            tf.io.gfile.remove(path)
    keys = generate_pairs(num_rows, num_cols, nnz, seed, row_exponent, col_exponent)
    rows, cols = np.divmod(keys, num_cols)
    del keys
    n_train = write_split(out, "train", rows, cols, num_shards)
    order = np.lexsort((rows, cols))
    rows, cols = rows[order], cols[order]
    del order
    n_train_t = write_split(out, "train_t", cols, rows, num_shards)
    square = num_rows == num_cols
    stats = {
        "nodes": num_rows if square else num_rows + num_cols,
        "num_rows": num_rows,
        "num_cols": num_cols,
        "shared_ids": square,
        "edges": int(nnz),
        "splits": {"train": n_train, "train_t": n_train_t},
        "split_edges": {"train": int(nnz)},
        "protocol": "synthetic_power_law",
        "config": {"seed": seed, "row_exponent": row_exponent, "col_exponent": col_exponent, "num_shards": num_shards},
    }
    stats.update(contract.fingerprint_dataset(out))
    contract.write_stats(out, stats)
    return stats


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m webgraph_pipeline.synthetic_matrix", description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="Output dataset directory (its split shards are replaced).")
    parser.add_argument("--rows", type=int, required=True, help="Rows of the matrix.")
    parser.add_argument("--cols", type=int, required=True, help="Columns of the matrix (equal to --rows: a square graph).")
    parser.add_argument("--nnz", type=int, required=True, help="Distinct nonzero pairs.")
    parser.add_argument("--seed", type=int, default=0, help="Random seed; the output depends on the arguments only.")
    parser.add_argument("--shards", type=int, default=4, help="TFRecord shards per split.")
    parser.add_argument("--row_exponent", type=float, default=0.5, help="Zipf rank exponent of the rows, in [0, 1).")
    parser.add_argument("--col_exponent", type=float, default=0.7, help="Zipf rank exponent of the columns, in [0, 1).")
    args = parser.parse_args(argv)
    for name in ("rows", "cols", "nnz", "shards"):
        if getattr(args, name) <= 0:
            print(f"error: --{name} must be positive, got {getattr(args, name)}", file=sys.stderr)
            return 2
    import tensorflow  # noqa: F401 - imported before the clock starts: the rate is the generator's

    start = time.perf_counter()
    try:
        stats = write_matrix(args.out, args.rows, args.cols, args.nnz, args.seed, args.shards,
                             args.row_exponent, args.col_exponent)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    seconds = time.perf_counter() - start
    print(f"{args.out}: {stats['num_rows']} x {stats['num_cols']}, {stats['edges']} edges in {seconds:.1f} s "
          f"({stats['edges'] / seconds / 1e6:.2f} M edges/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
