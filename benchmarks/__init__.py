"""Ours against a peer on the same data, in one run: `python -m benchmarks.NAME` from the
repository root.

Entry points: `trainer_scale` (trainer speed against implicit on CPU, generated sizes, MovieLens-1M,
Gowalla at high d), `gpu_vs_implicit` (the same on one GPU, with the solve forms),
`recall_vs_implicit` (accuracy: MovieLens-1M, Gowalla against the published table),
`pipeline_scale` (pipeline throughput: WAT extraction, the whole job, the graph stage),
`trainer_memory` and `trainer_profile` (where the trainer's memory and time go),
`reader_speed` (our TFRecord reader against tf.data), `device_proxies` (the accelerator path's
proxies on CPU). Their shared parts are in `benchmarks.core`.
"""
