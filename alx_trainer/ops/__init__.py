"""Device work: table storage, sharded lookups, step kernels, per-row solvers, rows longer than a
batch, the half-epoch runner (`side_runner`) and its batch sources, and XLA's cost figures.
"""
