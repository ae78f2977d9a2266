"""The benchmarks' datasets: made by the pipeline or the generator (cached), read back as CSR."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from typing import Any

import numpy as np

from benchmarks.core import paths
from benchmarks.core.children import run_child

# name -> (rows, cols, nnz) of the generated power-law matrices (webgraph_contract.synthetic_matrix)
SIZES = {
    "ml1m": (6_040, 3_706, 1_000_000),
    "25m": (1_000_000, 250_000, 25_000_000),
    "60m": (2_500_000, 600_000, 60_000_000),
    "in-sparse": (1_500_000, 1_500_000, 149_000_000),
    "de-sparse": (19_700_000, 19_700_000, 1_190_000_000),
}


@dataclasses.dataclass(frozen=True)
class Split:
    """A dataset's shape, training rows (row -> columns) and test rows (row -> (fold-in, ground
    truth))."""

    num_rows: int
    num_cols: int
    train: dict[int, np.ndarray]
    test: dict[int, tuple[np.ndarray, np.ndarray]]

    @property
    def nnz(self) -> int:
        return int(sum(len(v) for v in self.train.values()))

    def train_csr(self) -> tuple[np.ndarray, np.ndarray]:
        """The training rows as CSR over all `num_rows` rows: (indptr int64, cols int64)."""
        lengths = np.zeros(self.num_rows, np.int64)
        for r, c in self.train.items():
            lengths[r] = len(c)
        cols = [self.train[r] for r in sorted(self.train)] or [np.zeros(0, np.int64)]
        return np.concatenate([[0], np.cumsum(lengths)]), np.concatenate(cols).astype(np.int64)


def make_split(data_dir: str, *flags: Any) -> Split:
    """Run the pipeline's command line with `flags` writing `data_dir`; the dataset read back.
    Quiet as `python -m webgraph_pipeline` is: the libraries' logs set, Beam's import-time BigQuery
    warning held back, before the pipeline imports them."""
    from webgraph_contract import dataset_reader, stats_json
    from webgraph_contract.quiet_logs import quiet
    from webgraph_pipeline.beam_quiet import import_beam_quietly

    quiet()
    import_beam_quietly()
    from webgraph_pipeline.cli import main

    if main([str(f) for f in flags] + ["--output", data_dir]) != 0:
        raise SystemExit(f"webgraph_pipeline {' '.join(map(str, flags))} failed")
    num_rows, num_cols = stats_json.matrix_shape(stats_json.read_stats(data_dir))
    train = {r: c for r, c, _ in dataset_reader.read_split(data_dir, "train")}
    test = {r: (c, g) for r, c, g in dataset_reader.read_split(data_dir, "test")}
    return Split(num_rows, num_cols, train, test)


def strong_split(
    data_dir: str, flags: list[Any], seed: int, test_fraction: float, shards: int
) -> Split:
    """A strong-generalization split of the input `flags` made by the pipeline: `test_fraction` of
    the rows held out by a seeded hash, 80% of each held-out row's ids fold it in, 20% are the
    ground truth."""
    return make_split(
        data_dir,
        *flags,
        "--test_fraction",
        test_fraction,
        "--holdout_fraction",
        "0.2",
        "--seed",
        seed,
        "--num_shards",
        shards,
    )


def ml1m_split(data_dir: str, seed: int = 0, test_fraction: float = 0.1, shards: int = 4) -> Split:
    """MovieLens-1M's strong-generalization split made by the pipeline (`strong_split`: of the
    users, their items)."""
    ml1m = paths.ML1M_DIR
    inputs = ["--input", ml1m / "train.txt", "--input", ml1m / "test.txt"]
    flags = ["--edge_format", "adjacency", "--bipartite", *inputs]
    return strong_split(data_dir, flags, seed, test_fraction, shards)


def hollins_split(
    data_dir: str, seed: int = 0, test_fraction: float = 0.1, shards: int = 4
) -> Split:
    """The hollins.edu crawl's strong-generalization split made by the pipeline (`strong_split`: of
    the pages with at least 2 links, as the README's hollins example, their links)."""
    hollins = paths.DATA / "hollins"
    flags = ["--edge_format", "pairs", "--header", "--input", hollins / "edges.txt"]
    flags += ["--urls", hollins / "urls.txt", "--min_links", "2"]
    return strong_split(data_dir, flags, seed, test_fraction, shards)


def gowalla_split(
    data_dir: str, source: str | os.PathLike = paths.GOWALLA_DIR, validation_fraction: float = 0.0
) -> Split:
    """LightGCN's Gowalla split (`train.txt`, `test.txt` in `source`) made by the pipeline as a
    given split, with validation splits carved from train when `validation_fraction` > 0."""
    flags = ["--validation_fraction", validation_fraction] if validation_fraction else []
    return make_split(
        data_dir,
        "--edge_format",
        "given_split",
        "--input",
        os.path.join(source, "train.txt"),
        "--test_input",
        os.path.join(source, "test.txt"),
        *flags,
        "--num_shards",
        "4",
    )


def has_matrix(out: str | os.PathLike, rows: int, cols: int, nnz: int, seed: int = 0) -> bool:
    """Whether `out` holds a matrix of `webgraph_contract.synthetic_matrix` of this shape and seed
    (its stats.json says so)."""
    stats_path = os.path.join(out, "stats.json")
    if not os.path.exists(stats_path):
        return False
    with open(stats_path) as f:
        stats = json.load(f)
    got = (
        stats.get("num_rows"),
        stats.get("num_cols"),
        stats.get("edges"),
        stats.get("config", {}).get("seed"),
    )
    return got == (rows, cols, nnz, seed)


def ensure_matrix(work: str, name: str, seed: int = 0) -> str:
    """The generated matrix `name` of `SIZES` in WORK/matrix-NAME, written by
    `python -m webgraph_contract.synthetic_matrix` unless its stats.json already matches."""
    out = os.path.join(work, f"matrix-{name}")
    rows, cols, nnz = SIZES[name]
    if has_matrix(out, rows, cols, nnz, seed):
        return out
    child = run_child(
        [
            sys.executable,
            "-m",
            "webgraph_contract.synthetic_matrix",
            "--out",
            out,
            "--rows",
            rows,
            "--cols",
            cols,
            "--nnz",
            nnz,
            "--seed",
            seed,
        ]
    )
    print(child.stdout.strip(), flush=True)
    return out


def read_csr(data_dir: str, split: str = "train") -> tuple[int, int, np.ndarray, np.ndarray]:
    """A dataset's split as (num_rows, num_cols, indptr, cols) through the contract's reader (for
    `train_t`, the shape is the transpose's)."""
    from webgraph_contract import dataset_reader, stats_json
    from webgraph_contract.layout import iter_split_files

    num_rows, num_cols = stats_json.matrix_shape(stats_json.read_stats(data_dir))
    if split == "train_t":
        num_rows, num_cols = num_cols, num_rows
    records = dataset_reader.read_rows(list(iter_split_files(data_dir, split))).col_tag
    # shards need not hold ascending rows: the records in row order, a row's in file order
    in_rows = records.select(np.argsort(records.row_ids, kind="stable"))
    lengths = np.bincount(in_rows.row_ids, weights=in_rows.lengths, minlength=num_rows)
    indptr = np.concatenate([[0], np.cumsum(lengths.astype(np.int64))])
    return num_rows, num_cols, indptr, in_rows.ids.astype(np.int64)
