"""ALX: sharded implicit alternating least squares in JAX.

`config` (TrainConfig) -> `data/` (records, TFDS, dense batches) -> `ops/` (step kernels, solvers,
half-epoch runner) -> `model` (tables, fold-in, load) -> `train` (epoch loop) with `callbacks`
(evaluation, metrics, checkpoints, progress); `evaluation/`, `tools/` (sweep, predict, export),
`cli/` (`python -m alx_trainer`).
"""

__version__ = "0.1.0"
