"""The dataset contract shared by the pipeline, the TFDS builder and the trainer (see DESIGN.md).

File names, the `tf.train.Example` feature layout, reading splits and vocabularies back, and
`stats.json` access live here and nowhere else. Records are written (`encode_rows`,
`fileio.write_records`) and read (`iter_file_rows`, `read_records`) without TensorFlow; only
`feature_spec`, TensorFlow's parsing spec of the same layout, imports it. Never Apache Beam, so
the trainer can use this module.
"""

from __future__ import annotations

import collections
import concurrent.futures
import hashlib
import json
import os
import re
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np

from webgraph_pipeline import example_rows, fileio, tfrecord

# TFDS split name -> file prefix of its TFRecord shards: the splits every dataset has (`test` may be empty).
SPLIT_PREFIXES: Mapping[str, str] = {
    "train": "train",
    "train_t": "train.transpose",
    "test": "test",
}
# Optional, for tuning (`--validation_fraction`): the training data re-split the way `test` splits it.
# `validation_train` (+ transpose) is what to train on, `validation` the rows to evaluate (`col_tag`
# = the row's validation_train items, `gt_tag` = its held-out training items).
VALIDATION_PREFIXES: Mapping[str, str] = {
    "validation_train": "validation.train",
    "validation_train_t": "validation.train.transpose",
    "validation": "validation",
}
ALL_SPLIT_PREFIXES: Mapping[str, str] = {**SPLIT_PREFIXES, **VALIDATION_PREFIXES}
TFRECORD_SUFFIX = ".tfr"
VOCAB_PREFIX = "vocab.tsv"
# Interaction data (users x items) only: the column (item) names; `vocab.tsv` then holds the rows.
COL_VOCAB_PREFIX = "vocab.cols.tsv"
STATS_FILE = "stats.json"
# stats.json keys of the dataset's identity (see `fingerprint_dataset`).
FINGERPRINT_KEY = "dataset_fingerprint"
FILE_DIGESTS_KEY = "file_sha256"
_HASH_BLOCK = 1 << 22
DECODE_THREADS = 2  # threads that check and decode a file's blocks (`iter_file_rows`)
_SHARD_RE = re.compile(r"^(?P<prefix>.+)-(?P<index>\d{5})-of-(?P<total>\d{5})$")


def shard_name(prefix: str, index: int, num_shards: int, suffix: str = "") -> str:
    """`train.tfr-00003-of-00010`: the name of one shard, in the public web_graph layout."""
    return f"{prefix}{suffix}-{index:05d}-of-{num_shards:05d}"


def split_glob(data_dir: str, split: str) -> str:
    """The glob that matches every TFRecord shard of `split` under `data_dir`."""
    if split not in ALL_SPLIT_PREFIXES:
        raise ValueError(f"unknown split {split!r}; expected one of {sorted(ALL_SPLIT_PREFIXES)}")
    return os.path.join(data_dir, f"{ALL_SPLIT_PREFIXES[split]}{TFRECORD_SUFFIX}-*-of-*")


def vocab_glob(data_dir: str, columns: bool = False) -> str:
    """The glob that matches every vocabulary shard (with `columns`: column-name shard) under `data_dir`."""
    return os.path.join(data_dir, f"{COL_VOCAB_PREFIX if columns else VOCAB_PREFIX}-*-of-*")


def encode_row(row_tag: int, col_tag: Sequence[int], gt_tag: Sequence[int] = ()) -> bytes:
    """One row of a split as a serialized `tf.train.Example` with the web_graph features."""
    col, gt = np.asarray(col_tag, np.int64).reshape(-1), np.asarray(gt_tag, np.int64).reshape(-1)
    return encode_rows(np.array([row_tag], np.int64), np.array([0, len(col)]), col, np.array([0, len(gt)]), gt)[0]


def feature_spec() -> dict[str, Any]:
    """The parsing spec of the records, as `tf.io.parse_example` takes it."""
    import tensorflow as tf

    return {
        "row_tag": tf.io.FixedLenFeature([], tf.int64),
        "col_tag": tf.io.VarLenFeature(tf.int64),
        "gt_tag": tf.io.VarLenFeature(tf.int64),
    }


def decode_row(serialized: bytes) -> tuple[int, list[int], list[int]]:
    """The inverse of `encode_row`, in plain Python (for tests and small tools)."""
    try:
        rows = example_rows.decode_rows(serialized, np.array([0]), np.array([len(serialized)]))
    except example_rows.ExampleError as e:
        raise ValueError(f"not a web_graph record ({e})") from None
    return int(rows.row_tags[0]), rows.cols.tolist(), rows.gt.tolist()


def read_stats(data_dir: str) -> dict[str, Any]:
    """`stats.json` of a dataset directory, with a clear error when it is missing or corrupt."""
    path = os.path.join(data_dir, STATS_FILE)
    if not fileio.exists(path):
        raise FileNotFoundError(f"{path}: no {STATS_FILE}; is {data_dir} a WebGraph dataset directory?")
    with fileio.open_file(path, "r") as f:
        text = f.read()
    try:
        stats = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(stats, dict) or "nodes" not in stats:
        raise ValueError(f"{path}: lacks the required key 'nodes'")
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


def data_files(data_dir: str) -> list[str]:
    """Names of the files that hold a dataset's content: every split shard and vocabulary shard (sorted)."""
    patterns = [split_glob(data_dir, split) for split in ALL_SPLIT_PREFIXES]
    patterns += [vocab_glob(data_dir), vocab_glob(data_dir, columns=True)]
    return sorted({os.path.basename(p) for pattern in patterns for p in fileio.glob(pattern)})


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
        digests = dict(zip(names, pool.map(file_sha256, [os.path.join(data_dir, n) for n in names])))
    return {FILE_DIGESTS_KEY: digests, FINGERPRINT_KEY: combine_digests(digests)}


def dataset_fingerprint(stats: Mapping[str, Any]) -> Optional[str]:
    """The `dataset_fingerprint` stats.json records (None for datasets written before it existed)."""
    value = stats.get(FINGERPRINT_KEY)
    return str(value) if value else None


def missing_shards(files: Sequence[str]) -> tuple[list[str], Optional[str]]:
    """Which shards of `-of-N` are absent from `files` (paths of one split), and a reason when the
    names disagree on N; ([], None) when the split is complete."""
    parsed = [_SHARD_RE.match(os.path.basename(f)) for f in files]
    if not files or not all(parsed):
        return [], None
    totals = sorted({int(m["total"]) for m in parsed})
    if len(totals) > 1:
        return [], f"shard names disagree on the shard count ({', '.join(map(str, totals))})"
    present = {int(m["index"]) for m in parsed}
    prefix = parsed[0]["prefix"]
    return [f"{prefix}-{i:05d}-of-{totals[0]:05d}" for i in range(totals[0]) if i not in present], None


def iter_split_files(data_dir: str, split: str) -> Iterable[str]:
    """The sorted shard paths of one split; an error naming the glob if there are none."""
    files = sorted(fileio.glob(split_glob(data_dir, split)))
    if not files:
        raise FileNotFoundError(f"no {split!r} shards match {split_glob(data_dir, split)}")
    return files


def read_split(data_dir: str, split: str) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Every record of one split as `(row_tag, col_tag, gt_tag)` with int64 NumPy arrays."""
    return read_records(list(iter_split_files(data_dir, split)))


def iter_file_rows(path: str, threads: int = DECODE_THREADS) -> Iterable[example_rows.Rows]:
    """The records of one TFRecord file in the contract's layout, a block at a time, in order; a
    one-line ValueError naming the file and the byte offset of a corrupt or non-contract record.

    This thread reads the blocks; `threads` more check and decode them (NumPy and the CRCs release
    the GIL for most of that work), at most `threads` + 1 blocks in memory at a time."""
    with fileio.open_file(path, "rb") as f, concurrent.futures.ThreadPoolExecutor(max(1, threads)) as pool:
        pending: collections.deque = collections.deque()
        for block in tfrecord.read_blocks(f, path, checked=False):
            pending.append(pool.submit(_decode_block, path, block))
            if len(pending) > threads:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _decode_block(path: str, block: tfrecord.Block) -> example_rows.Rows:
    """One block's records, checksums checked, decoded."""
    tfrecord.check(path, block)
    try:
        return example_rows.decode_rows(block.data, block.starts, block.lengths)
    except example_rows.ExampleError as e:
        at = block.offset + int(block.starts[e.index]) - tfrecord.HEADER_BYTES
        raise ValueError(f"{path}: the record at byte {at} is not a web_graph tf.train.Example ({e})") from None


def read_records(files: Sequence[str]) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Every record of some TFRecord files in the contract's feature layout, in file order."""
    out: list[tuple[int, np.ndarray, np.ndarray]] = []
    for path in files:
        for rows in iter_file_rows(path):
            out.extend(rows.tuples())
    return out


def read_vocab(data_dir: str, columns: bool = False) -> dict[int, str]:
    """Vocabulary shards of a dataset directory, id -> name (URL): `vocab.tsv-*`, or with
    `columns` the column names of interaction data (`vocab.cols.tsv-*`, else `vocab.tsv-*`)."""
    pattern = vocab_glob(data_dir)
    files = sorted(fileio.glob(vocab_glob(data_dir, columns=True))) if columns else []
    files = files or sorted(fileio.glob(pattern))
    if not files:
        raise FileNotFoundError(f"no vocabulary shards match {pattern}")
    vocab: dict[int, str] = {}
    for path in files:
        with fileio.open_file(path, "r") as f:
            for n, line in enumerate(f, 1):
                key, sep, name = line.rstrip("\n").partition("\t")
                if not sep or not key.isdigit():
                    raise ValueError(f"{path}:{n}: expected `id<TAB>name`, got {line.strip()!r}")
                if int(key) in vocab:
                    raise ValueError(f"{path}:{n}: id {key} is named twice")
                vocab[int(key)] = name
    return vocab


def _varint_len(values: np.ndarray) -> np.ndarray:
    """Bytes of the protobuf varint of each non-negative value."""
    values = np.asarray(values, np.uint64)
    n = np.ones(values.shape, np.int64)
    top = int(values.max()) if values.size else 0
    for k in range(1, 10):
        if top < 1 << (7 * k):  # no value needs more bytes
            break
        n += values >= np.uint64(1 << (7 * k))
    return n


def _varint_stream(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The varints of `values` (of byte lengths `lengths`) concatenated, vectorized.

    Each value's varint is built in one little-endian word, 7 bits per byte with the continuation
    bit set on all bytes but its last; the words' leading bytes are then picked by a mask.
    """
    values = np.asarray(values, np.uint64)
    width = int(lengths.max()) if len(lengths) else 1
    if width <= 4:  # ids below 2^28: one uint32 word each, continuation bits and byte mask looked up by length
        v = values.astype(np.uint32)
        word = v & np.uint32(0x7F)
        for k in range(1, width):
            word |= (v << np.uint32(k)) & np.uint32(0x7F << (8 * k))
        word |= np.array([0, 0, 0x80, 0x8080, 0x808080], np.uint32)[lengths]
        keep = np.array([0, 0x1, 0x101, 0x10101, 0x1010101], "<u4")[lengths].view(bool).reshape(len(values), 4)
        return word.astype("<u4", copy=False).view(np.uint8).reshape(len(values), 4)[keep]
    word = values & np.uint64(0x7F)
    for k in range(1, min(width, 8)):
        word |= (values << np.uint64(k)) & np.uint64(0x7F << (8 * k))
        word |= (lengths > k).astype(np.uint64) << np.uint64(8 * k - 1)
    table = word.astype("<u8", copy=False).view(np.uint8).reshape(len(values), 8)
    if width > 8:  # 9-byte varints (2^56 <= value < 2^63, the largest non-negative int64): the last byte apart
        table = np.concatenate([table, (values >> np.uint64(56)).astype(np.uint8)[:, None]], axis=1)
        table[:, 7] |= ((lengths > 8) << 7).astype(np.uint8)
    return table[np.arange(table.shape[1]) < lengths[:, None]]


def _put_varints(buf: np.ndarray, pos: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Write the varint of each value at `pos` in `buf`; returns the positions just after."""
    values = np.asarray(values, np.uint64).copy()
    pos = np.asarray(pos, np.int64).copy()
    active = np.ones(values.shape, bool)
    while active.any():
        v, p = values[active], pos[active]
        more = v >= np.uint64(0x80)
        buf[p] = (v & np.uint64(0x7F)).astype(np.uint8) | (more.astype(np.uint8) << 7)
        values[active] = v >> np.uint64(7)
        pos[active] = p + 1
        active[active] = more
    return pos


def _put_bytes(buf: np.ndarray, pos: np.ndarray, data: bytes) -> np.ndarray:
    """Write `data` at each of `pos` in `buf`, a byte at a time (no rows x bytes index array: 3x
    faster); returns the positions just after."""
    for i, byte in enumerate(data):
        buf[pos + i] = byte
    return pos + len(data)


class _Int64Feature:
    """The serialized sizes of one int64-list feature (`key`) for each row of a ragged array."""

    def __init__(self, key: bytes, ptr: np.ndarray, values: np.ndarray):
        self.key, self.ptr, self.values = key, ptr, values
        self.vlen = _varint_len(values)
        before = np.concatenate(([0], np.cumsum(self.vlen)))
        self.payload = before[ptr[1:]] - before[ptr[:-1]]  # packed varint bytes per row
        self.ilist = np.where(self.payload > 0, 1 + _varint_len(self.payload) + self.payload, 0)  # Int64List
        self.feat = 1 + _varint_len(self.ilist) + self.ilist  # Feature {int64_list}
        self.entry = 2 + len(key) + 1 + _varint_len(self.feat) + self.feat  # map entry {key, value}
        self.item = 1 + _varint_len(self.entry) + self.entry  # Features.feature[key]

    def put(self, buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """Write each row's map entry at `pos`; returns the positions just after."""
        pos = _put_bytes(buf, pos, b"\x0a")
        pos = _put_varints(buf, pos, self.entry)
        pos = _put_bytes(buf, pos, b"\x0a" + bytes([len(self.key)]) + self.key + b"\x12")
        pos = _put_varints(buf, pos, self.feat)
        pos = _put_bytes(buf, pos, b"\x1a")
        pos = _put_varints(buf, pos, self.ilist)
        has = self.payload > 0
        pos[has] = _put_bytes(buf, pos[has], b"\x0a")
        pos[has] = _put_varints(buf, pos[has], self.payload[has])
        # The values' varints, one stream, fill the bytes from pos[k] to pos[k] + payload[k]: stream
        # byte i of row k goes to pos[k] + (i - the row's first stream byte); work in the payload only.
        lengths = self.payload[has]
        shift = pos[has] - (np.cumsum(lengths) - lengths)
        buf[np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(shift, lengths)] = _varint_stream(
            self.values, self.vlen)
        return pos + self.payload


def encode_rows(row_tags: np.ndarray, indptr: np.ndarray, cols: np.ndarray,
                gt_ptr: np.ndarray | None = None, gt: np.ndarray | None = None) -> list[bytes]:
    """`encode_row(row_tags[k], cols[indptr[k]:indptr[k+1]], gt[gt_ptr[k]:gt_ptr[k+1]])` for every
    k (gt_tag empty when `gt` is None), vectorized.

    Byte-identical to `encode_row` (checked by tests/test_contract.py): the deterministic
    serialization writes the features sorted by key, `col_tag`, `gt_tag`, `row_tag`, each an
    int64 list packed as varints. Ids must be non-negative.
    """
    row_tags = np.asarray(row_tags, np.int64)
    n = len(row_tags)
    if gt is None:
        gt_ptr, gt = np.zeros(n + 1, np.int64), np.zeros(0, np.int64)
    features = [
        _Int64Feature(b"col_tag", np.asarray(indptr, np.int64), np.asarray(cols, np.int64)),
        _Int64Feature(b"gt_tag", np.asarray(gt_ptr, np.int64), np.asarray(gt, np.int64)),
        _Int64Feature(b"row_tag", np.arange(n + 1, dtype=np.int64), row_tags),
    ]
    if any(len(f.values) and f.values.min() < 0 for f in features):
        raise ValueError("encode_rows: ids must be non-negative")
    if n == 0:
        return []
    size = sum(f.item for f in features)
    total = 1 + _varint_len(size) + size
    ends = np.cumsum(total)
    starts = ends - total
    buf = np.zeros(int(ends[-1]), np.uint8)
    pos = _put_bytes(buf, starts, b"\x0a")
    pos = _put_varints(buf, pos, size)
    for feature in features:
        pos = feature.put(buf, pos)
    if not np.array_equal(pos, ends):
        raise AssertionError("encode_rows: computed lengths and written bytes disagree")
    data = buf.tobytes()
    return [data[a:b] for a, b in zip(starts.tolist(), ends.tolist())]
