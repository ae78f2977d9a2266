"""Device work: the mesh, table storage and init, sharded lookups, step kernels, per-row solvers,
the
half-epoch runner (`side_runner`) and its batch sources, and the per-core CPU runner
(`per_core`)."""
