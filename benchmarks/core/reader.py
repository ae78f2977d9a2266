"""The trainer's TFRecord reader against tf.data on the same files: rows/s, side by side in one run
(the `--reader` part of `benchmarks.pipeline`).

Each size is a generated power-law matrix of `benchmarks.core.datasets.SIZES` (made once by
`webgraph_contract.synthetic_matrix`, reused). Per size and split (`train`, `train_t`), the
two readers alternate `repeats` times over the split's shard files, each making the CSR chunks
the trainer consumes: ours, `alx_trainer.data.dataset.read_chunks` (blocks of whole records,
CRC-32C checked, decoded in NumPy), and tf.data as the trainer read them before (a
`TFRecordDataset` per file, batched by `chunk_rows`, `tf.io.parse_example` in a `tf.function`,
the ragged columns' values and row splits as int64 NumPy). The best wall time of each is reported,
with rows per CPU second of that pass (tf.data parses in several threads, ours in one), and both
must give the same rows and columns (checked by sums and a checksum of the ids). Needs the `[tfds]`
extra (TensorFlow).
"""

from __future__ import annotations

import os
import time
from typing import Callable, Iterator, Sequence

import numpy as np

from benchmarks.core.datasets import ensure_matrix
from webgraph_contract.quiet_logs import quiet

# TensorFlow's start-up lines held back before it is imported
quiet()


def tf_data_chunks(
    files: Sequence[str], chunk_rows: int
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(row ids, indptr, cols) per batch, as the trainer's tf.data reader made them."""
    import tensorflow as tf

    from webgraph_contract import record_codec

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def parse(serialized):
        parsed = tf.io.parse_example(serialized, record_codec.feature_spec())
        cols = tf.RaggedTensor.from_sparse(parsed["col_tag"])
        return parsed["row_tag"], cols.values, cols.row_splits

    for path in files:
        for serialized in tf.data.TFRecordDataset([path]).batch(chunk_rows).prefetch(2):
            rows, values, splits = (t.numpy() for t in parse(serialized))
            yield rows.astype(np.int64), splits.astype(np.int64), values.astype(np.int64)


def ours_chunks(files: Sequence[str], chunk_rows: int, shape: tuple[int, int]):
    from alx_trainer.data.dataset import read_chunks

    for chunk in read_chunks(files, chunk_rows, *shape):
        yield chunk.row_ids, chunk.indptr, chunk.cols


def consume(
    chunks: Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]],
) -> tuple[float, float, tuple[int, int, int]]:
    """Wall and CPU seconds (all threads, and the reader's worker processes) to drain `chunks`, and
    (rows, nnz, a checksum of the ids and lengths)."""
    from alx_trainer.phase_times import cpu_seconds

    start, cpu = time.perf_counter(), cpu_seconds()
    rows = nnz = check = 0
    for row_ids, indptr, cols in chunks:
        rows += len(row_ids)
        nnz += len(cols)
        squares = int((np.diff(indptr) ** 2).sum())
        check = (check + int(row_ids.sum()) * 3 + int(cols.sum()) * 7 + squares) % (1 << 61)
    return time.perf_counter() - start, cpu_seconds() - cpu, (rows, nnz, check)


def compare(
    files: Sequence[str], chunk_rows: int, shape: tuple[int, int], repeats: int
) -> dict[str, float]:
    """Best wall seconds of each reader over `files` and the CPU seconds of that pass; raises if
    their content differs."""
    readers: dict[str, Callable[[], Iterator]] = {
        "ours": lambda: ours_chunks(files, chunk_rows, shape),
        "tf.data": lambda: tf_data_chunks(files, chunk_rows),
    }
    best: dict[str, float] = {}
    seen: dict[str, tuple[int, int, int]] = {}
    for _ in range(repeats):
        for name, make in readers.items():
            seconds, cpu, content = consume(make())
            if seconds < best.get(name, float("inf")):
                best[name], best[f"{name} cpu"] = seconds, cpu
            seen[name] = content
    if seen["ours"] != seen["tf.data"]:
        raise AssertionError(
            f"the readers disagree: ours {seen['ours']}, tf.data {seen['tf.data']}"
        )
    return {**best, "rows": seen["ours"][0], "nnz": seen["ours"][1]}


def reader_section(sizes: Sequence[str], work: str, repeats: int, chunk_rows: int) -> list[dict]:
    """Both readers on every size's two sides, a line each as it comes; the figures."""
    # imported before any clock starts
    import tensorflow  # noqa: F401

    from webgraph_contract import layout, stats_json

    print(
        f"{'size':<10} {'split':<8} {'rows':>10} {'nnz':>12} {'ours rows/s':>12} "
        f"{'tf.data rows/s':>15} {'ratio':>6}  {'rows per CPU s, ours / tf.data':>31}"
    )
    out = []
    for size in sizes:
        data = ensure_matrix(work, size)
        shape = stats_json.matrix_shape(stats_json.read_stats(data))
        for split, flip in (("train", False), ("train_t", True)):
            files = list(layout.iter_split_files(data, split))
            r = compare(files, chunk_rows, shape[::-1] if flip else shape, repeats)
            ours, theirs = r["rows"] / r["ours"], r["rows"] / r["tf.data"]
            per_cpu = f"{r['rows'] / r['ours cpu']:,.0f} / {r['rows'] / r['tf.data cpu']:,.0f}"
            print(
                f"{size:<10} {split:<8} {r['rows']:>10,} {r['nnz']:>12,} {ours:>12,.0f} "
                f"{theirs:>15,.0f} {ours / theirs:>5.2f}x  {per_cpu:>31}",
                flush=True,
            )
            out.append(dict(r, size=size, split=split))
    print(f"(load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; best of {repeats})")
    return out
