"""`stats.json`: reading it, the one writer, the matrix shape it gives, the dataset's identity."""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
from typing import Any, Mapping, Optional, Sequence

from webgraph_contract import fileio
from webgraph_contract.layout import data_files

STATS_FILE = "stats.json"

# stats.json keys of the dataset's identity (see `fingerprint_dataset`).
FINGERPRINT_KEY = "dataset_fingerprint"

FILE_DIGESTS_KEY = "file_sha256"

_HASH_BLOCK = 1 << 22


def read_stats(data_dir: str) -> dict[str, Any]:
    """`stats.json` of a dataset directory, with a clear error when it is missing or corrupt."""
    path = os.path.join(data_dir, STATS_FILE)
    if not fileio.exists(path):
        raise FileNotFoundError(
            f"{path}: no {STATS_FILE}; is {data_dir} a WebGraph dataset directory?"
        )
    with fileio.open_file(path, "r") as f:
        text = f.read()
    try:
        stats = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(stats, dict) or "nodes" not in stats:
        raise ValueError(f"{path}: lacks the required key 'nodes'")
    return stats


def job_stats(
    summary: Mapping[str, Any],
    config: Mapping[str, Any],
    input_files: Sequence[str],
    code_version: str,
    num_shards: Optional[int] = None,
) -> dict[str, Any]:
    """The stats.json of a built graph before the job's counters are known: the graph's summary
    (nodes, edges, splits...), the job's config and input files, the code version, and the shard
    count where the job chose it (a TFDS build shards its files itself: None)."""
    stats = dict(summary)
    stats.update(config=dict(config), input_files=list(input_files), code_version=code_version)
    if num_shards is not None:
        stats["num_shards"] = num_shards
    if config.get("bipartite") and "num_rows" in stats:  # users x items: `nodes` is their sum
        stats.update(users=stats["num_rows"], items=stats["num_cols"])
    return stats


def matrix_shape(stats: Mapping[str, Any]) -> tuple[int, int]:
    """(rows, columns) of the matrix a dataset describes.

    A web graph is square (`nodes` x `nodes`); interaction data (users x items) may give
    `num_rows` and `num_cols` explicitly, with row and column ids in separate ranges.
    """
    nodes = int(stats["nodes"])
    return int(stats.get("num_rows", nodes)), int(stats.get("num_cols", nodes))


def is_bipartite(stats: Mapping[str, Any]) -> bool:
    """Whether a dataset is users x items (separate row and column ids), as its stats.json says
    (`bipartite`, or the job's `config`); never guessed from the shape."""
    if "bipartite" in stats:
        return bool(stats["bipartite"])
    return bool(stats.get("config", {}).get("bipartite", False))


def write_stats(data_dir: str, stats: Mapping[str, Any]) -> None:
    """Write `stats.json` (sorted keys, so identical inputs give identical bytes)."""
    with fileio.open_file(os.path.join(data_dir, STATS_FILE), "w") as f:
        f.write(json.dumps(stats, indent=2, sort_keys=True) + "\n")


def file_sha256(path: str) -> str:
    """The SHA-256 of one file (local or remote), read in 4 MiB blocks."""
    digest = hashlib.sha256()
    with fileio.open_file(path, "rb") as f:
        for block in iter(lambda: f.read(_HASH_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def combine_digests(digests: Mapping[str, str]) -> str:
    """The dataset fingerprint: SHA-256 of the sorted `name<TAB>sha256` lines of its data files."""
    lines = "".join(f"{name}\t{digests[name]}\n" for name in sorted(digests))
    return hashlib.sha256(lines.encode("utf-8")).hexdigest()


def fingerprint_dataset(data_dir: str, threads: int = 4) -> dict[str, Any]:
    """Hash every data file of a written dataset; returns the stats.json entries of its identity:
    `file_sha256` (name -> SHA-256) and `dataset_fingerprint` (`combine_digests` of them).

    Two datasets share a fingerprint exactly when their split and vocabulary files are
    byte-identical, so the same job on the same input gives the same fingerprint; {} when the
    directory holds no file named by the contract. SHA-256 because
    it is the fastest of hashlib's digests on CPUs with SHA instructions; files hash in threads
    (hashlib releases the GIL).
    """
    names = data_files(data_dir)
    if not names:  # files named otherwise (a TFDS build): no identity to give
        return {}
    with concurrent.futures.ThreadPoolExecutor(max(1, threads)) as pool:
        digests = dict(
            zip(names, pool.map(file_sha256, [os.path.join(data_dir, n) for n in names]))
        )
    return {FILE_DIGESTS_KEY: digests, FINGERPRINT_KEY: combine_digests(digests)}


def dataset_fingerprint(stats: Mapping[str, Any]) -> Optional[str]:
    """The `dataset_fingerprint` stats.json records (None for datasets written before it
    existed)."""
    value = stats.get(FINGERPRINT_KEY)
    return str(value) if value else None
