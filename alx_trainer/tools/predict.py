"""Predictions from a trained model (paper Appendix A) and export of its tables for serving.

- `predict_outlinks`: for a name or URL (through the vocabulary `vocab.tsv-*`) or an id, the top-K
  columns it is predicted to link to, with URLs and scores; its known outlinks are excluded. A
  training row uses its row embedding; a held-out row is folded in from its fold-in outlinks
  (Eq. 4).
- `nearest_neighbors`: the K nodes whose embeddings are closest by cosine to a node's embedding.
- `export_tables`: both tables with their ids (and names) as NumPy `.npz`/`.npy` and as TFRecord,
  all or nothing (`output_swap`), with `tables.json` last; `read_tables` reads them back.
Scoring goes through the same exact top K as evaluation (`ranking.Ranker`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
from typing import Any, Mapping, Sequence

import numpy as np

from alx_trainer.evaluation.ranking import Ranker
from alx_trainer.loading import model_tables
from alx_trainer.model import fold_in
from alx_trainer.tools import output_swap
from alx_trainer.tools.new_pages import names_are_numbers, node_token
from webgraph_contract import dataset_reader, fileio, layout, stats_json, urls
from webgraph_contract.record_codec import encode_example


@dataclasses.dataclass(frozen=True)
class Prediction:
    """One predicted column: its id, its name (URL) when a vocabulary is known, and its score."""

    id: int
    name: str
    score: float


@functools.lru_cache(maxsize=8)
def load_vocab(data_dir: str, columns: bool = True) -> tuple[dict[int, str], dict[str, int]]:
    """(id -> name, name -> id) from a dataset directory's vocabulary shards: the column names
    (`columns`, the default) or the row names; the same for a graph, whose ids are shared."""
    names = dataset_reader.read_vocab(data_dir, columns=columns)
    return names, {name: i for i, name in names.items()}


def resolve_node(node: str | int, data_dir: str | None, columns: bool = True) -> int:
    """An id from an int, or from a token (`new_pages.node_token`): a name of the vocabulary (the
    column names, or with `columns=False` the row names), `id:N`, or a number where no name is one.
    A URL not found as given is normalized with the pipeline's own `normalize_url`, as the
    dataset's names were, so `HTTP://Example.com` finds `http://example.com/`."""
    if isinstance(node, (int, np.integer)):
        return int(node)
    if data_dir is None:
        found = node_token(node, {}, numeric_names=False)
        if found is None:
            raise ValueError(
                f"{node!r} is not an id and no dataset directory was given to look it up"
            )
        return found
    ids = vocabulary_ids(data_dir, columns)
    found = node_token(node, ids, numbers_are_names(data_dir, columns))
    if found is not None:
        return found
    name = node
    if "://" in node:
        name, reason = urls.normalize_url(node)
        if name is None:
            raise ValueError(
                f"{node!r} is not a URL the dataset could hold ({reason}); give a node's URL or id"
            )
    if name not in ids:
        shown = repr(node) if name == node else f"{node!r} (normalized: {name!r})"
        raise KeyError(
            f"{shown} is not in the vocabulary of {data_dir}; give a node's name, URL or id (id:N)"
        )
    return ids[name]


def vocabulary_ids(data_dir: str, columns: bool = True) -> dict[str, int]:
    """name -> id of the dataset's column (or row) vocabulary; empty when it has none."""
    try:
        return load_vocab(fileio.absolute(data_dir), columns)[1]
    except FileNotFoundError:
        return {}


@functools.lru_cache(maxsize=8)
def numbers_are_names(data_dir: str, columns: bool = True) -> bool:
    """Whether the dataset's column (or row) vocabulary names some node with a number."""
    return names_are_numbers(vocabulary_ids(data_dir, columns))


@functools.lru_cache(maxsize=4)
def known_rows(data_dir: str) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray]]:
    """(training row -> its columns, held-out row -> its fold-in columns) of a dataset directory."""
    train = {r: c for r, c, _ in dataset_reader.read_split(data_dir, "train")}
    test = {r: c for r, c, _ in dataset_reader.read_split(data_dir, "test")}
    return train, test


def _named(ids: np.ndarray, scores: np.ndarray, names: Mapping[int, str]) -> list[Prediction]:
    return [
        Prediction(int(i), names.get(int(i), str(int(i))), float(s))
        for i, s in zip(ids, scores)
        if i >= 0
    ]


def predict_outlinks(
    model: Any,
    data_dir: str,
    node: str | int,
    k: int = 10,
    *,
    config: Any = None,
    mesh: Any = None,
    ranker: Ranker | None = None,
    shared: bool | None = None,
) -> list[Prediction]:
    """Top-`k` predicted outlinks of a row (URL or id), excluding its known outlinks (and itself on
    a graph). `ranker`: a `Ranker` of the model's column table, built once for many nodes (one of
    one row is built otherwise); `shared`: whether row and column ids are shared (default: from
    the dataset's stats.json)."""
    row_table, col_table, model_config = model_tables(model)
    row = resolve_node(node, data_dir, columns=False)
    if not 0 <= row < len(row_table):
        raise ValueError(f"node {node!r}: id {row} is outside the rows' 0..{len(row_table) - 1}")
    if ranker is None:
        ranker = Ranker(col_table, None, mesh=mesh, rows=1)
    train, test = known_rows(fileio.absolute(data_dir))
    if row in train:
        known = train[row]
        query = np.asarray(row_table[row], np.float32)[None]
    elif row in test:
        known = test[row]
        query = np.asarray(fold_in(ranker.col_table, [known], config or model_config), np.float32)
    else:
        raise ValueError(
            f"node {node!r} (id {row}) has no outlinks in {data_dir}: nothing to predict from"
        )
    names = vocabulary_names(data_dir)
    shared = _shared_ids(data_dir) if shared is None else shared
    exclude = np.concatenate([known, [row]]) if shared else known
    ids, scores = ranker.top_k(query, [exclude], k)
    return _named(ids[0], scores[0], names)


def unit_rows(table: np.ndarray) -> np.ndarray:
    """`table`'s rows scaled to unit length (float32; a zero row stays zero)."""
    emb = np.asarray(table, np.float32)
    return emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)


def neighbor_ranker(model: Any, table: str = "col", *, mesh: Any = None) -> Ranker:
    """A `Ranker` of the `col` (or `row`) table's unit rows, one query row per call: what
    `nearest_neighbors` ranks against, built once for many nodes."""
    row_table, col_table, _ = model_tables(model)
    if table not in ("row", "col"):
        raise ValueError(f"table must be 'row' or 'col', got {table!r}")
    return Ranker(unit_rows(col_table if table == "col" else row_table), None, mesh=mesh, rows=1)


def nearest_neighbors(
    model: Any,
    node: str | int,
    k: int = 10,
    *,
    data_dir: str | None = None,
    table: str = "col",
    mesh: Any = None,
    ranker: Ranker | None = None,
) -> list[Prediction]:
    """The `k` nodes with the highest cosine similarity to `node` in the `col` (or `row`) table.
    `ranker`: `neighbor_ranker(model, table)`, built once for many nodes (built here otherwise)."""
    if table not in ("row", "col"):
        raise ValueError(f"table must be 'row' or 'col', got {table!r}")
    if ranker is None:
        ranker = neighbor_ranker(model, table, mesh=mesh)
    unit = ranker.col_table
    node_id = resolve_node(node, data_dir, columns=table == "col")
    if not 0 <= node_id < len(unit):
        raise ValueError(f"id {node_id} is outside the {table} table's 0..{len(unit) - 1}")
    ids, scores = ranker.top_k(unit[node_id][None], [np.array([node_id])], k)
    return _named(
        ids[0], scores[0], vocabulary_names(data_dir, columns=table == "col") if data_dir else {}
    )


def vocabulary_names(data_dir: str, columns: bool = True) -> dict[int, str]:
    """id -> name of the dataset's column (or row) vocabulary; empty when it has none."""
    try:
        return load_vocab(fileio.absolute(data_dir), columns)[0]
    except FileNotFoundError:
        return {}


def _shared_ids(data_dir: str) -> bool:
    return not stats_json.is_bipartite(stats_json.read_stats(data_dir))


def _example(node_id: int, vector: np.ndarray, name: str | None) -> bytes:
    feature: dict[str, Any] = {
        "id": np.array([node_id], np.int64),
        "embedding": np.asarray(vector, np.float32),
    }
    if name is not None:
        feature["name"] = [name.encode("utf-8")]
    return encode_example(feature)


# what `export_tables` writes last: the files of the export, and the model they come from
TABLES_MANIFEST = "tables.json"
# regex of the names of the files `export_tables` writes
TABLE_FILES = "|".join(
    [r"embeddings\.npz", r"(?:row|col)_table\.npy", re.escape(TABLES_MANIFEST)]
    + [layout.shard_pattern(f"{side}_embeddings.tfr") for side in ("row", "col")]
)


def export_tables(
    model: Any,
    out_dir: str,
    *,
    data_dir: str | None = None,
    num_shards: int = 1,
    model_dir: str = "",
    shared: bool | None = None,
) -> list[str]:
    """Write `embeddings.npz` (row_ids, row_table, col_ids, col_table[, col_names]),
    `row_table.npy`, `col_table.npy`, `{row,col}_embeddings.tfr-*` (Examples with `id`,
    `embedding`, and `name` when a vocabulary exists) and `tables.json` (the files, the model
    directory `model_dir` and epoch), all or nothing (`output_swap`): an earlier export's files in
    `out_dir` (another shard count, temporary files of a killed one) are replaced; the rows are
    named too where row and column ids are `shared` (default: from `data_dir`'s stats.json).
    Returns the written paths."""
    row_table, col_table, config = model_tables(model)
    tables = {"row": np.asarray(row_table, np.float32), "col": np.asarray(col_table, np.float32)}
    names = vocabulary_names(data_dir) if data_dir else {}
    if shared is None:
        shared = bool(data_dir) and _shared_ids(data_dir)
    arrays: dict[str, np.ndarray] = {}
    for side, emb in tables.items():
        arrays[f"{side}_ids"] = np.arange(len(emb), dtype=np.int64)
        arrays[f"{side}_table"] = emb
    if names:
        arrays["col_names"] = np.array([names.get(i, "") for i in range(len(tables["col"]))])
        if shared:
            arrays["row_names"] = np.array([names.get(i, "") for i in range(len(tables["row"]))])
    files = ["embeddings.npz"]
    with output_swap.staged(out_dir, TABLE_FILES, TABLES_MANIFEST) as staging:
        with fileio.replacing(os.path.join(staging, files[0]), "wb") as f:
            np.savez(f, **arrays)
        for side, emb in tables.items():
            files.append(f"{side}_table.npy")
            with fileio.replacing(os.path.join(staging, files[-1]), "wb") as f:
                np.save(f, emb)
            side_names = names if (side == "col" or shared) else {}
            bounds = layout.shard_bounds(len(emb), num_shards)
            for s in range(num_shards):
                files.append(layout.shard_name(f"{side}_embeddings.tfr", s, num_shards))
                rows = range(bounds[s], bounds[s + 1])
                fileio.write_records(
                    os.path.join(staging, files[-1]),
                    [_example(i, emb[i], side_names.get(i) if side_names else None) for i in rows],
                )
        manifest = {
            "files": list(files),
            "model_dir": fileio.absolute(model_dir or getattr(config, "model_dir", "") or ""),
            "epoch": getattr(model, "epoch", None),
            "rows": len(tables["row"]),
            "cols": len(tables["col"]),
            "dim": int(tables["col"].shape[1]),
            "named": bool(names),
        }
        fileio.write_atomic(
            os.path.join(staging, TABLES_MANIFEST),
            json.dumps(manifest, indent=2, sort_keys=True) + "\n",
        )
    return [os.path.join(out_dir, name) for name in files + [TABLES_MANIFEST]]


def read_tables(out_dir: str) -> dict[str, np.ndarray]:
    """The arrays of `embeddings.npz` of a whole `export_tables` in `out_dir`; a one-line error
    when `tables.json` is missing or a file it lists is."""
    path = os.path.join(out_dir, TABLES_MANIFEST)
    if not fileio.exists(path):
        raise FileNotFoundError(
            f"{path}: missing; {out_dir} holds no complete table export (run `export` again)"
        )
    with fileio.open_file(path, "r") as f:
        manifest = json.load(f)
    missing = [n for n in manifest["files"] if not fileio.exists(os.path.join(out_dir, n))]
    if missing:
        raise FileNotFoundError(
            f"{path}: lists {' '.join(missing)}, missing from {out_dir}; run `export` again"
        )
    with fileio.open_file(os.path.join(out_dir, "embeddings.npz"), "rb") as f:
        with np.load(f) as npz:
            return {name: npz[name] for name in npz.files}


def format_predictions(title: str, preds: Sequence[Prediction]) -> str:
    """A numbered list: rank, score, id, name."""
    lines = [title]
    lines += [f"{n:>3}. {p.score:>9.4f}  {p.id:>8}  {p.name}" for n, p in enumerate(preds, 1)]
    return "\n".join(lines)
