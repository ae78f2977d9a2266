"""A generated power-law matrix written in the dataset contract, for trainer benchmarks at scale.

    python -m webgraph_contract.synthetic_matrix --out DIR --rows 1000000 --cols 250000 --nnz
    25000000 [--seed 0]

The matrix: row degrees are one multinomial draw of `nnz` over the rows, with Zipf-like rank
probabilities (density ~ rank^-s; a row holds at most half of the columns), and each row's
columns are drawn from a Zipf-like column distribution (the continuous CDF inverted), redrawn
until the row has its degree in distinct columns. Ranks become ids through seeded random
permutations (popular rows and columns are spread over the id range, as over table shards).

How it is written, with memory bounded by a block whatever `nnz` is: rows are generated in
blocks of about 4M edges (each block from its own seed), sorted and encoded into the `train`
records at once (`record_codec.encode_rows`, vectorized and byte-identical to
`record_codec.encode_row`);
each block's pairs are also appended to column buckets on disk (at most 65,536 columns each, so
one radix pass sorts a bucket by column while keeping its rows in order), which then become the
`train.transpose` records. Shards are id ranges. `stats.json` is written last; there is no `test`
split. The output is a function of the arguments only (NumPy's PCG64 by seed).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from typing import Callable, Iterator, Sequence

import numpy as np

from webgraph_contract import fileio, layout, record_codec, stats_json

BLOCK_EDGES = 1 << 22  # edges generated, sorted and encoded at a time
BUCKET_EDGES = 1 << 23  # about this many edges per transpose bucket (memory while one is sorted)
BUCKET_COLS = 1 << 16  # columns per bucket at most: a uint16 offset, one radix pass
# a spilled pair: column offset in its bucket, row id
SPILL = np.dtype([("col", "<u2"), ("row", "<i4")])


def rank_probabilities(n: int, exponent: float) -> np.ndarray:
    """P(rank r) for r < n when the rank density is ~ r^-exponent: differences of the CDF (r / n)^(1
    - s)."""
    if not 0 <= exponent < 1:
        raise ValueError(f"exponent: must be in [0, 1), got {exponent}")
    return np.diff((np.arange(n + 1) / n) ** (1 - exponent))


def rank_quantile(u, n: int, exponent: float):
    """The rank (a float in [0, n]) at CDF value `u` of `rank_probabilities(n, exponent)`: the CDF
    (r / n)^(1 - exponent) inverted, for NumPy or jax.numpy arrays alike."""
    return n * u ** (1 / (1 - exponent))


def power_law_ids(
    rng: np.random.Generator, n: int, size: int, exponent: float, perm: np.ndarray
) -> np.ndarray:
    """`size` ids in [0, n) drawn with `rank_probabilities(n, exponent)`, ranks mapped by `perm`."""
    ranks = rank_quantile(rng.random(size), n, exponent).astype(np.int64)
    return perm[np.minimum(ranks, n - 1)]


def row_degrees(
    rng: np.random.Generator, num_rows: int, num_cols: int, nnz: int, exponent: float
) -> np.ndarray:
    """Edges per row id: a multinomial of `nnz` over the rank probabilities, capped at half the
    columns."""
    cap = max(1, num_cols // 2)
    if nnz > num_rows * cap:
        raise ValueError(
            f"nnz: {nnz} exceeds rows x cols / 2 = {num_rows * cap} (the generator keeps matrices "
            "sparse)"
        )
    p = rank_probabilities(num_rows, exponent)
    counts = rng.multinomial(nnz, p)
    while (over := counts > cap).any():  # hand the excess to the rows below the cap, in proportion
        excess = int((counts[over] - cap).sum())
        counts[over] = cap
        room = np.where(counts < cap, p, 0)
        counts += rng.multinomial(excess, room / room.sum())
    degrees = np.empty(num_rows, np.int64)
    degrees[rng.permutation(num_rows)] = counts
    return degrees


def block_edges(
    rng: np.random.Generator,
    degrees: np.ndarray,
    num_cols: int,
    exponent: float,
    col_perm: np.ndarray,
) -> np.ndarray:
    """Columns of the rows of `degrees`, row by row, each row's sorted and distinct (`degrees[r]` of
    them)."""
    base = np.repeat(np.arange(len(degrees), dtype=np.int64) * num_cols, degrees)
    keys = base + power_law_ids(rng, num_cols, len(base), exponent, col_perm)
    keys.sort()
    while True:
        keys = keys[np.concatenate([[True], keys[1:] != keys[:-1]])] if len(keys) else keys
        missing = degrees - np.bincount(keys // num_cols, minlength=len(degrees))
        if not missing.any():
            return keys - base
        extra = np.repeat(np.arange(len(degrees), dtype=np.int64) * num_cols, missing)
        extra += power_law_ids(rng, num_cols, len(extra), exponent, col_perm)
        extra.sort()
        keys = np.concatenate([keys, extra])
        keys.sort(kind="stable")  # two sorted runs: a merge


def blocks(degrees: np.ndarray, lo: int, hi: int) -> Iterator[tuple[int, int]]:
    """Row ranges cutting [lo, hi) into about `BLOCK_EDGES` edges each."""
    ends = np.cumsum(degrees[lo:hi])
    cuts = np.searchsorted(
        ends, np.arange(BLOCK_EDGES, int(ends[-1]) if len(ends) else 0, BLOCK_EDGES), "right"
    )
    edges = [lo, *(lo + np.unique(cuts[(cuts > 0) & (cuts < hi - lo)])).tolist(), hi]
    return zip(edges[:-1], edges[1:])


def write_records(
    write: Callable[[list[bytes]], None],
    row_tags: np.ndarray,
    lengths: np.ndarray,
    cols: np.ndarray,
) -> int:
    """Write one record per row with a column (CSR by `lengths`); returns the records written."""
    kept = lengths > 0
    indptr = np.concatenate([[0], np.cumsum(lengths[kept])])
    write(record_codec.encode_rows(record_codec.SplitRows.of(row_tags[kept], indptr, cols)))
    return int(kept.sum())


def shard_bounds(n: int, num_shards: int) -> np.ndarray:
    """The first row (bucket) of each shard and the end, floor(k n / num_shards): not
    `layout.shard_bounds` (which rounds up), because the rows' draws are seeded by the first row
    of their block and blocks start at these bounds, so another rule would draw another matrix for
    the same seed (the benchmarks reuse a matrix whose stats.json names its shape and seed)."""
    return np.linspace(0, n, num_shards + 1).astype(np.int64)


def write_matrix(
    out: str,
    num_rows: int,
    num_cols: int,
    nnz: int,
    seed: int = 0,
    num_shards: int = 4,
    row_exponent: float = 0.5,
    col_exponent: float = 0.7,
) -> dict:
    """Generate and write the dataset; returns its stats (also in `out/stats.json`)."""
    rank_probabilities(1, col_exponent)  # checks the exponent before any work
    if max(num_rows, num_cols) >= 2**31:
        raise ValueError(
            f"rows, cols: at most 2^31 - 1 each (the spilled pairs hold int32 ids), got {num_rows} "
            f"x {num_cols}"
        )
    fileio.makedirs(out)
    for split in layout.SPLIT_PREFIXES:
        for path in fileio.glob(layout.split_glob(out, split)):
            fileio.remove(path)
    rng = np.random.default_rng(seed)
    degrees = row_degrees(rng, num_rows, num_cols, nnz, row_exponent)
    col_perm = rng.permutation(num_cols).astype(np.int32 if num_cols < 2**31 else np.int64)
    num_buckets = max(-(-num_cols // BUCKET_COLS), -(-nnz // BUCKET_EDGES), num_shards)
    width = -(-num_cols // num_buckets)
    num_buckets = -(-num_cols // width)
    spill_dir = os.path.join(out, ".transpose-buckets")
    shutil.rmtree(spill_dir, ignore_errors=True)
    os.makedirs(spill_dir)
    try:
        spills = [open(os.path.join(spill_dir, f"{b:06d}"), "wb") for b in range(num_buckets)]
        n_train = 0
        bounds = shard_bounds(num_rows, num_shards)
        for s in range(num_shards):
            path = os.path.join(
                out, layout.shard_name("train", s, num_shards, layout.TFRECORD_SUFFIX)
            )
            with fileio.record_writer(path) as write:
                for lo, hi in blocks(degrees, int(bounds[s]), int(bounds[s + 1])):
                    cols = block_edges(
                        np.random.default_rng([seed, lo]),
                        degrees[lo:hi],
                        num_cols,
                        col_exponent,
                        col_perm,
                    )
                    n_train += write_records(write, np.arange(lo, hi), degrees[lo:hi], cols)
                    spill_block(
                        spills,
                        np.repeat(np.arange(lo, hi, dtype=np.int32), degrees[lo:hi]),
                        cols,
                        width,
                    )
        for f in spills:
            f.close()
        n_train_t = write_transpose(out, spill_dir, num_buckets, width, num_cols, num_shards)
    finally:
        shutil.rmtree(spill_dir, ignore_errors=True)
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
        "config": {
            "seed": seed,
            "row_exponent": row_exponent,
            "col_exponent": col_exponent,
            "num_shards": num_shards,
        },
    }
    stats.update(stats_json.fingerprint_dataset(out))
    stats_json.write_stats(out, stats)
    return stats


def spill_block(spills: list, rows: np.ndarray, cols: np.ndarray, width: int) -> None:
    """Append a block's (row, col) pairs to the buckets of their columns, rows kept in order."""
    bucket = (cols // width).astype(np.uint16 if len(spills) <= 1 << 16 else np.int64)
    order = np.argsort(bucket, kind="stable")  # radix for 16-bit keys
    pairs = np.empty(len(cols), SPILL)
    pairs["col"] = cols[order] - bucket[order].astype(np.int64) * width
    pairs["row"] = rows[order]
    ends = np.cumsum(np.bincount(bucket, minlength=len(spills)))
    for b, (a, e) in enumerate(zip(np.concatenate([[0], ends[:-1]]).tolist(), ends.tolist())):
        if e > a:
            spills[b].write(pairs[a:e].tobytes())


def write_transpose(
    out: str, spill_dir: str, num_buckets: int, width: int, num_cols: int, num_shards: int
) -> int:
    """The `train_t` records from the column buckets (bucket b holds columns [b*width,
    (b+1)*width))."""
    records = 0
    bounds = shard_bounds(num_buckets, num_shards)
    for s in range(num_shards):
        path = os.path.join(
            out, layout.shard_name("train.transpose", s, num_shards, layout.TFRECORD_SUFFIX)
        )
        with fileio.record_writer(path) as write:
            for b in range(int(bounds[s]), int(bounds[s + 1])):
                pairs = np.fromfile(os.path.join(spill_dir, f"{b:06d}"), SPILL)
                # rows stay ascending within a column
                order = np.argsort(pairs["col"], kind="stable")
                lo = b * width
                lengths = np.bincount(pairs["col"], minlength=min(width, num_cols - lo))
                records += write_records(
                    write, np.arange(lo, lo + len(lengths)), lengths, pairs["row"][order]
                )
    return records


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m webgraph_contract.synthetic_matrix", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--out", required=True, help="Output dataset directory (its split shards are replaced)."
    )
    parser.add_argument("--rows", type=int, required=True, help="Rows of the matrix.")
    parser.add_argument(
        "--cols",
        type=int,
        required=True,
        help="Columns of the matrix (equal to --rows: a square graph).",
    )
    parser.add_argument(
        "--nnz", type=int, required=True, help="Distinct nonzero pairs (at most rows x cols / 2)."
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="Random seed; the output depends on the arguments only."
    )
    parser.add_argument("--shards", type=int, default=4, help="TFRecord shards per split.")
    parser.add_argument(
        "--row_exponent", type=float, default=0.5, help="Zipf rank exponent of the rows, in [0, 1)."
    )
    parser.add_argument(
        "--col_exponent",
        type=float,
        default=0.7,
        help="Zipf rank exponent of the columns, in [0, 1).",
    )
    args = parser.parse_args(argv)
    for name in ("rows", "cols", "nnz", "shards"):
        if getattr(args, name) <= 0:
            print(f"error: --{name} must be positive, got {getattr(args, name)}", file=sys.stderr)
            return 2
    start, cpu_start = time.perf_counter(), time.process_time()
    try:
        stats = write_matrix(
            args.out,
            args.rows,
            args.cols,
            args.nnz,
            args.seed,
            args.shards,
            args.row_exponent,
            args.col_exponent,
        )
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    print(
        f"{args.out}: {stats['num_rows']} x {stats['num_cols']}, {stats['edges']} edges in "
        f"{seconds:.1f} s "
        f"({stats['edges'] / seconds / 1e6:.2f} M edges/s; {cpu:.1f} CPU s, "
        f"{stats['edges'] / cpu / 1e6:.2f} M edges "
        f"per CPU second; load {os.getloadavg()[0]:.1f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
