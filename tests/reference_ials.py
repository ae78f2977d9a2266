"""An independent float64 NumPy iALS (paper Eq. 3/4) with exact solves or iALS++ block sweeps, for
tests.

Plain loops over rows with `numpy.linalg.solve`; no code shared with `alx_trainer`. Rows that do
not occur in a split keep their current embedding (as in the trainer). Tied tables: each half-epoch
reads a snapshot of the one table taken at its start.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np


def solve_rows(
    other: np.ndarray,
    rows: Mapping[int, Sequence[int]],
    target: np.ndarray,
    alpha: float,
    reg: float,
    reg_exponent: float = 0.0,
) -> np.ndarray:
    """A copy of `target` with every row of `rows` replaced by its exact Eq. 4 solution."""
    other = np.asarray(other, np.float64)
    out = np.array(target, np.float64, copy=True)
    gram = other.T @ other
    d = other.shape[1]
    for r, cols in rows.items():
        h = other[np.asarray(cols, dtype=np.int64)].reshape(-1, d)
        lam = reg * (len(cols) + alpha * other.shape[0]) ** reg_exponent
        a = h.T @ h + alpha * gram + lam * np.eye(d)
        out[r] = np.linalg.solve(a, h.sum(axis=0))
    return out


def solve_rows_block(
    other: np.ndarray,
    rows: Mapping[int, Sequence[int]],
    target: np.ndarray,
    alpha: float,
    reg: float,
    block_size: int,
    reg_exponent: float = 0.0,
) -> np.ndarray:
    """iALS++: a copy of `target` where each row of `rows` gets one sweep of exact block
    minimizations.

    For each block of coordinates in order, the row's Eq. 3 objective is minimized over that block
    with the other coordinates at their current values (the errors h_i . x - 1 recomputed from x).
    """
    other = np.asarray(other, np.float64)
    out = np.array(target, np.float64, copy=True)
    gram = other.T @ other
    d = other.shape[1]
    for r, cols in rows.items():
        h = other[np.asarray(cols, dtype=np.int64)].reshape(-1, d)
        lam = reg * (len(cols) + alpha * other.shape[0]) ** reg_exponent
        x = out[r]
        for start in range(0, d, block_size):
            blk = slice(start, min(start + block_size, d))
            hb = h[:, blk]
            err = h @ x - 1.0
            grad = hb.T @ err + alpha * gram[blk] @ x + lam * x[blk]
            hess = hb.T @ hb + alpha * gram[blk, blk] + lam * np.eye(hb.shape[1])
            x[blk] = x[blk] - np.linalg.solve(hess, grad)
        out[r] = x
    return out


def transpose(rows: Mapping[int, Sequence[int]]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for r, cols in rows.items():
        for c in cols:
            out.setdefault(int(c), []).append(int(r))
    return out


def ials(
    rows: Mapping[int, Sequence[int]],
    row_table: np.ndarray,
    col_table: np.ndarray | None,
    epochs: int,
    alpha: float,
    reg: float,
    reg_exponent: float = 0.0,
    block_size: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """`epochs` of iALS from the given tables; `col_table=None` means tied tables.

    With `block_size`, each half-epoch is one iALS++ block sweep (`solve_rows_block`) instead of
    the exact solve.
    """
    cols = transpose(rows)
    w = np.asarray(row_table, np.float64)
    h = w if col_table is None else np.asarray(col_table, np.float64)

    def half(
        other: np.ndarray, side_rows: Mapping[int, Sequence[int]], target: np.ndarray
    ) -> np.ndarray:
        if block_size is None:
            return solve_rows(other, side_rows, target, alpha, reg, reg_exponent)
        return solve_rows_block(other, side_rows, target, alpha, reg, block_size, reg_exponent)

    for _ in range(epochs):
        if col_table is None:
            w = half(w, rows, w)
            w = half(w, cols, w)
            h = w
        else:
            w = half(h, rows, w)
            h = half(w, cols, h)
    return w, h


def loss(
    rows: Mapping[int, Sequence[int]], w: np.ndarray, h: np.ndarray, alpha: float, reg: float
) -> dict[str, float]:
    """Eq. 3 terms: observed squared error, alpha * all-pairs squared score, L2 of solved rows."""
    w, h = np.asarray(w, np.float64), np.asarray(h, np.float64)
    observed = sum(float(np.sum((1 - h[list(c)] @ w[r]) ** 2)) for r, c in rows.items())
    unobserved = alpha * float(np.sum((w.T @ w) * (h.T @ h)))
    return {"observed": observed, "unobserved": unobserved}


def write_dataset(
    data_dir: str,
    rows: Mapping[int, Sequence[int]],
    num_rows: int,
    num_cols: int,
    shards: int = 2,
    test: Mapping[int, tuple[Sequence[int], Sequence[int]]] | None = None,
) -> str:
    """A tiny dataset in the contract (train, train_t, optional test, stats.json) for tests."""
    import os

    import tensorflow as tf

    from webgraph_contract import layout, record_codec, stats_json

    os.makedirs(data_dir, exist_ok=True)

    def write(prefix: str, records: list[bytes]) -> None:
        for s in range(shards):
            path = os.path.join(
                data_dir, layout.shard_name(prefix, s, shards, layout.TFRECORD_SUFFIX)
            )
            with tf.io.TFRecordWriter(path) as f:
                for rec in records[s::shards]:
                    f.write(rec)

    write("train", [record_codec.encode_row(r, c) for r, c in sorted(rows.items())])
    write(
        "train.transpose",
        [record_codec.encode_row(c, r) for c, r in sorted(transpose(rows).items())],
    )
    if test:
        write("test", [record_codec.encode_row(r, k, g) for r, (k, g) in sorted(test.items())])
    edges = sum(len(c) for c in rows.values())
    stats_json.write_stats(
        data_dir,
        {
            "nodes": max(num_rows, num_cols),
            "num_rows": num_rows,
            "num_cols": num_cols,
            "edges": edges,
            "splits": {"train": len(rows)},
            "dropped": {},
        },
    )
    return data_dir


def random_rows(
    seed: int, num_rows: int, num_cols: int, max_len: int, long_rows: Sequence[int] = ()
) -> dict[int, list[int]]:
    """Random distinct column sets per row; rows in `long_rows` get `num_cols` // 2 + 1 columns."""
    rng = np.random.default_rng(seed)
    rows = {}
    for r in range(num_rows):
        n = num_cols // 2 + 1 if r in long_rows else int(rng.integers(1, max_len + 1))
        rows[r] = sorted(rng.choice(num_cols, size=n, replace=False).tolist())
    return rows
