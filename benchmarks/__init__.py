"""The benchmarks: `python -m benchmarks.NAME` from the repository root, four entry points on the
trainer's public functions and command line, their shared parts in `benchmarks.core`.

`speed` (ours against implicit, CPU or GPU, from toy to 149M pairs and the WebGraph de-sparse
size), `quality` (Recall@K against implicit and against published tables: MovieLens-1M, the
hollins.edu crawl, Gowalla), `profile` (where the time goes: the trainer's own phases, device
kernels, the command line's fixed cost, the accelerator path's proxies on CPU devices), `pipeline`
(the pipeline's throughput, and the trainer's reader of its output against tf.data).
"""
