"""Strong-generalization splits of any interaction data, written in the dataset contract.

Readers turn MovieLens-style files or plain `src dst` pairs into (row, column) pairs with original
ids; `build_matrix` gives them dense ids (one shared id space for a graph, separate ranges for
users x items); `split_rows` holds out whole rows (a count or a fraction), keeping a fold-in
fraction of each held-out row's items and the rest as ground truth; `write_dataset` writes the
`train`, `train_t`, `test` TFRecords, a vocabulary and `stats.json` through
`webgraph_pipeline.contract`, so MovieLens is evaluated exactly like WebGraph (`contract.read_split`
reads any split back).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Iterable, Iterator, Mapping, Sequence

import numpy as np

from webgraph_pipeline import contract

FORMATS = ("ml1m", "udata", "pairs", "edges")


@dataclasses.dataclass(frozen=True)
class Pairs:
    """Interaction pairs with their original ids; `shared_ids` when rows and columns are one graph."""

    rows: np.ndarray
    cols: np.ndarray
    shared_ids: bool
    sources: tuple[str, ...] = ()


def _int_fields(line: str, path: str, lineno: int, min_fields: int) -> list[int]:
    fields = line.split()
    if len(fields) < min_fields:
        raise ValueError(f"{path}:{lineno}: expected at least {min_fields} integer fields, got {line.strip()!r}")
    try:
        return [int(f) for f in fields]
    except ValueError:
        raise ValueError(f"{path}:{lineno}: not an integer id in {line.strip()!r}") from None


def _is_header(line: str) -> bool:
    first = line.split()[:1]
    return bool(first) and not first[0].lstrip("-").isdigit()


def _lines(path: str) -> Iterator[tuple[int, str]]:
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if line.strip():
                yield lineno, line


def read_ml1m_implicit(paths: Sequence[str]) -> Pairs:
    """`user item item ...` lines (ml-1m-implicit train.txt/test.txt); several files are merged."""
    rows: list[int] = []
    cols: list[int] = []
    for path in paths:
        for lineno, line in _lines(path):
            ids = _int_fields(line, path, lineno, 1)
            rows.extend([ids[0]] * (len(ids) - 1))
            cols.extend(ids[1:])
    return Pairs(np.array(rows, np.int64), np.array(cols, np.int64), False, tuple(paths))


def read_udata(path: str) -> Pairs:
    """MovieLens `u.data`: `user item rating timestamp`; every rating counts as an interaction."""
    pairs = [_int_fields(line, path, n, 2)[:2] for n, line in _lines(path)]
    arr = np.array(pairs, np.int64).reshape(-1, 2)
    return Pairs(arr[:, 0], arr[:, 1], False, (path,))


def read_pairs(path: str, shared_ids: bool) -> Pairs:
    """Whitespace-separated `row col` pairs (one header line allowed); `shared_ids` for a graph."""
    pairs = []
    for n, line in _lines(path):
        if not pairs and _is_header(line):
            continue
        pairs.append(_int_fields(line, path, n, 2)[:2])
    arr = np.array(pairs, np.int64).reshape(-1, 2)
    return Pairs(arr[:, 0], arr[:, 1], shared_ids, (path,))


def read_interactions(paths: Sequence[str], fmt: str) -> Pairs:
    """Dispatch on `fmt`: `ml1m`, `udata`, `pairs` (users x items) or `edges` (one graph)."""
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        raise FileNotFoundError(f"input file(s) not found: {', '.join(missing)}")
    if fmt == "ml1m":
        return read_ml1m_implicit(paths)
    if fmt in ("udata", "pairs", "edges"):
        if len(paths) != 1:
            raise ValueError(f"format {fmt!r} takes exactly one input file, got {len(paths)}")
        return read_udata(paths[0]) if fmt == "udata" else read_pairs(paths[0], fmt == "edges")
    raise ValueError(f"unknown interaction format {fmt!r}; expected one of {FORMATS}")


def read_names(path: str) -> dict[int, str]:
    """`id name` lines (e.g. hollins urls.txt), header line allowed: original id -> name."""
    names: dict[int, str] = {}
    for n, line in _lines(path):
        if not names and _is_header(line):
            continue
        key, _, name = line.strip().partition(" ")
        if not key.isdigit() or not name.strip():
            raise ValueError(f"{path}:{n}: expected `id name`, got {line.strip()!r}")
        names[int(key)] = name.strip()
    return names


@dataclasses.dataclass(frozen=True)
class Matrix:
    """A sparse 0/1 matrix with dense ids: `items[r]` are the sorted column ids of row r."""

    items: list[np.ndarray]
    num_rows: int
    num_cols: int
    row_ids: np.ndarray  # original id of each dense row id
    col_ids: np.ndarray  # original id of each dense column id (== row_ids for a graph)
    shared_ids: bool
    dropped: dict[str, int]

    @property
    def num_pairs(self) -> int:
        return int(sum(len(i) for i in self.items))


def build_matrix(pairs: Pairs) -> Matrix:
    """Dense ids (sorted original ids), duplicate pairs removed, self-loops dropped for a graph."""
    rows, cols = pairs.rows, pairs.cols
    dropped: dict[str, int] = {}
    if pairs.shared_ids:
        loops = rows == cols
        dropped["self_loop"] = int(loops.sum())
        rows, cols = rows[~loops], cols[~loops]
        row_ids = col_ids = np.unique(np.concatenate([rows, cols]))
    else:
        row_ids, col_ids = np.unique(rows), np.unique(cols)
    r = np.searchsorted(row_ids, rows)
    c = np.searchsorted(col_ids, cols)
    num_cols = len(col_ids)
    keys = np.unique(r * num_cols + c)
    dropped["duplicate"] = int(len(r) - len(keys))
    r, c = keys // num_cols, keys % num_cols
    bounds = np.searchsorted(r, np.arange(len(row_ids) + 1))
    items = [c[bounds[i] : bounds[i + 1]] for i in range(len(row_ids))]
    return Matrix(items, len(row_ids), num_cols, row_ids, col_ids, pairs.shared_ids, dropped)


@dataclasses.dataclass(frozen=True)
class Split:
    """Training rows (all items) and held-out rows (fold-in items, ground-truth items)."""

    train: dict[int, np.ndarray]
    test: dict[int, tuple[np.ndarray, np.ndarray]]


def split_rows(
    matrix: Matrix,
    *,
    test_rows: int | None = None,
    test_fraction: float | None = None,
    fold_in_fraction: float = 0.8,
    seed: int = 0,
) -> Split:
    """Hold out `test_rows` rows (or `test_fraction` of the non-empty rows), chosen by `seed`.

    Only rows with at least 2 items can be held out. Each held-out row keeps
    round(fold_in_fraction * n) of its items (at least 1, at most n - 1) to fold it in; the rest
    is its ground truth. Held-out rows never appear in the training data.
    """
    if (test_rows is None) == (test_fraction is None):
        raise ValueError("give exactly one of test_rows and test_fraction")
    if not 0.0 < fold_in_fraction < 1.0:
        raise ValueError(f"fold_in_fraction must be in (0, 1), got {fold_in_fraction}")
    lengths = np.array([len(i) for i in matrix.items])
    eligible = np.flatnonzero(lengths >= 2)
    if test_rows is None:
        if not 0.0 <= float(test_fraction) < 1.0:
            raise ValueError(f"test_fraction must be in [0, 1), got {test_fraction}")
        test_rows = int(round(float(test_fraction) * int((lengths > 0).sum())))
    if not 0 <= test_rows <= len(eligible):
        raise ValueError(f"cannot hold out {test_rows} rows: only {len(eligible)} rows have >= 2 items")
    rng = np.random.default_rng(seed)
    held = np.sort(rng.permutation(eligible)[:test_rows])
    test: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for r in held:
        items = matrix.items[r]
        keep = int(min(len(items) - 1, max(1, round(fold_in_fraction * len(items)))))
        perm = rng.permutation(len(items))
        test[int(r)] = (np.sort(items[perm[:keep]]), np.sort(items[perm[keep:]]))
    held_set = set(test)
    train = {r: items for r, items in enumerate(matrix.items) if len(items) and r not in held_set}
    return Split(train, test)


def transpose(train: Mapping[int, np.ndarray], num_cols: int) -> dict[int, np.ndarray]:
    """Column -> sorted training rows that contain it (only columns with at least one row)."""
    if not train:
        return {}
    rows = np.concatenate([np.full(len(v), r, np.int64) for r, v in train.items()])
    cols = np.concatenate([np.asarray(v, np.int64) for v in train.values()])
    order = np.lexsort((rows, cols))
    rows, cols = rows[order], cols[order]
    bounds = np.searchsorted(cols, np.arange(num_cols + 1))
    return {c: rows[bounds[c] : bounds[c + 1]] for c in range(num_cols) if bounds[c + 1] > bounds[c]}


def _write_shards(data_dir: str, prefix: str, records: list[bytes], num_shards: int) -> list[str]:
    import tensorflow as tf

    paths = []
    for s in range(num_shards):
        path = os.path.join(data_dir, contract.shard_name(prefix + contract.TFRECORD_SUFFIX, s, num_shards))
        with tf.io.TFRecordWriter(path) as w:
            for rec in records[s * len(records) // num_shards : (s + 1) * len(records) // num_shards]:
                w.write(rec)
        paths.append(path)
    return paths


def write_dataset(
    data_dir: str,
    matrix: Matrix,
    split: Split,
    *,
    num_shards: int = 1,
    names: Mapping[int, str] | None = None,
    config: Mapping[str, object] | None = None,
    inputs: Iterable[str] = (),
) -> dict[str, object]:
    """Write `train`, `train_t`, `test` shards, the vocabulary and `stats.json`; return the stats.

    The vocabulary `vocab.tsv` (`id<TAB>name`, name from `names` or the original id) lists every
    node of a graph (shared ids), as in the WebGraph contract; for users x items it lists the rows
    and `vocab.cols.tsv` the columns. `names` maps original ids to names (e.g. URLs).
    """
    import tensorflow as tf

    from alx_trainer import __version__

    tf.io.gfile.makedirs(data_dir)
    stale = [p for s in contract.SPLIT_PREFIXES for p in tf.io.gfile.glob(contract.split_glob(data_dir, s))]
    stale += tf.io.gfile.glob(contract.vocab_glob(data_dir))
    stale += tf.io.gfile.glob(contract.vocab_glob(data_dir, columns=True))
    for path in stale:
        tf.io.gfile.remove(path)
    train_t = transpose(split.train, matrix.num_cols)
    _write_shards(data_dir, contract.SPLIT_PREFIXES["train"],
                  [contract.encode_row(r, c) for r, c in sorted(split.train.items())], num_shards)
    _write_shards(data_dir, contract.SPLIT_PREFIXES["train_t"],
                  [contract.encode_row(c, r) for c, r in sorted(train_t.items())], num_shards)
    _write_shards(data_dir, contract.SPLIT_PREFIXES["test"],
                  [contract.encode_row(r, k, g) for r, (k, g) in sorted(split.test.items())], num_shards)
    vocabs = [(contract.VOCAB_PREFIX, matrix.row_ids)]
    if not matrix.shared_ids:
        vocabs.append((contract.COL_VOCAB_PREFIX, matrix.col_ids))
    for prefix, original in vocabs:
        with tf.io.gfile.GFile(os.path.join(data_dir, contract.shard_name(prefix, 0, 1)), "w") as f:
            for i, orig in enumerate(original):
                f.write(f"{i}\t{(names or {}).get(int(orig), str(int(orig)))}\n")
    stats: dict[str, object] = {
        "nodes": matrix.num_rows if matrix.shared_ids else matrix.num_rows + matrix.num_cols,
        "num_rows": matrix.num_rows,
        "num_cols": matrix.num_cols,
        "shared_ids": matrix.shared_ids,
        "edges": matrix.num_pairs,
        "splits": {"train": len(split.train), "train_t": len(train_t), "test": len(split.test)},
        "split_edges": {
            "train": int(sum(len(v) for v in split.train.values())),
            "test_fold_in": int(sum(len(k) for k, _ in split.test.values())),
            "test_gt": int(sum(len(g) for _, g in split.test.values())),
        },
        "dropped": dict(matrix.dropped),
        "config": dict(config or {}),
        "inputs": [os.path.abspath(p) for p in inputs],
        "code_version": f"alx_trainer {__version__}",
    }
    contract.write_stats(data_dir, stats)
    return stats
