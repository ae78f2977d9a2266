"""The useful work of one epoch, counted from the matrix's shape (not measured)."""

from __future__ import annotations


def epoch_work(
    num_rows: int, num_cols: int, nnz: int, dim: int, cg_iters: int, table_bytes: int = 4
) -> tuple[float, float]:
    """(FLOPs, bytes) of one epoch of matrix-free CG, both sides, tables of `table_bytes` per value.

    FLOPs per side b and r0 (3 |S| d), cg_iters matvecs (4 |S| d + 2 R d^2 each), the observed
    loss (2 |S| d), the gramian (2 N d^2). Bytes: each observed pair's fixed-table row gathered once
    (d table_bytes) plus its id (4), every solved row read and written (2 d table_bytes) and the
    fixed table read for the gramian (N d table_bytes).
    """
    flops = byte_count = 0.0
    for solved, other in ((num_rows, num_cols), (num_cols, num_rows)):
        matvecs = cg_iters * (4 * nnz * dim + 2 * solved * dim**2)
        flops += 3 * nnz * dim + matvecs + 2 * nnz * dim + 2 * other * dim**2
        gathered = nnz * (table_bytes * dim + 4)
        byte_count += gathered + solved * 2 * table_bytes * dim + other * table_bytes * dim
    return flops, byte_count
