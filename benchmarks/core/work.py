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


def block_flops(nnz: int, num_rows: int, num_cols: int, dim: int, block: int) -> float:
    """FLOPs of one epoch of the iALS++ block solver with blocks of `block`: per side the initial
    errors (2|S|d); per block the b x b statistics (2|S|b^2), the error-weighted sum and the error
    update (2|S|b each); per row and block the gramian term (2 d b), the Cholesky factor (b^3/3)
    and two triangular solves (2 b^2); and the gramian (2 N d^2)."""
    b = min(block, dim)
    blocks = -(-dim // b)
    total = 0.0
    for solved, fixed in ((num_rows, num_cols), (num_cols, num_rows)):
        per_block = 2 * nnz * b * b + 4 * nnz * b + solved * (2 * dim * b + b**3 / 3 + 2 * b * b)
        total += 2 * nnz * dim + blocks * per_block + 2 * fixed * dim**2
    return total
