"""The benchmarks' shared parts, one concern a module.

`paths` (the repository's data and configs), `power_law` (the one power-law generator, on the
host or the device, with `webgraph_contract.synthetic_matrix`'s rank law), `datasets` (datasets
made by the pipeline or the generator, read back), `gowalla` (LightGCN's files read as CSR, scored
from trained rows), `implicit_als` (implicit set up at our objective), `children` (child
processes: peak memory, one-line failures, a budgeted runner of JSON-line children), `machine`
(the host's and the device's peaks), `work` (an epoch's FLOPs and bytes), `trace` (JAX profiler
traces), `tables` (printing). For `speed`: `speed_sizes`, `sections`, `section_rows`,
`solve_forms`, `de_sparse`, `de_sparse_children`, `strong_split`. For `quality`:
`strong_accuracy`, `trainer_cli`, `planted_quality`, `device_host_memory` (a command's host memory
outside device buffers, the CPU proxy of a GPU run's host peak). For `profile`: `profile_sections`,
`phases`, `proxies`. For `pipeline`: `wat_files`, `wat_extraction`, `reader`.
"""
