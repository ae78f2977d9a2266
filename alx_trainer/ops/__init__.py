"""Device work: shard_map step kernels and tables (`sharding`), per-row solvers (`solvers`), the per-core runner (`per_core`)."""
