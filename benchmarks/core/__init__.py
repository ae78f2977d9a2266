"""The benchmarks' shared parts, one concern a module.

`paths` (the repository's data and configs), `power_law` (the one power-law generator, on the
host or the device, with `webgraph_contract.synthetic_matrix`'s rank law), `datasets` (datasets
made by the pipeline or the generator, read back), `gowalla` (LightGCN's files read as CSR, scored
from trained rows), `implicit_als` (implicit set up at our objective), `children` (child
processes: peak memory, one-line failures, a budgeted runner of JSON-line children), `machine`
(the host's and the device's peaks), `work` (an epoch's FLOPs and bytes), `trace` (JAX profiler
traces), `tables` (printing), `ml1m_accuracy` (MovieLens-1M accuracy, ours against implicit),
`trainer_cli` (ours through `alx_trainer`'s command line), `section_rows` (the GPU comparison's
rows, forms and table), `wat_extraction` (WAT extraction per core).
"""
