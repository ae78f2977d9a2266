"""The records of `export --topk`: one `tf.train.Example` per row, encoded a chunk at a time.

Features (TensorFlow's parsing spec in `feature_spec`): `row` (int64, the row id), `ids` (int64,
the top-K column ids, best first), `scores` (float, their scores), and when the dataset has a
vocabulary `row_url` (bytes, the row's name) and `urls` (bytes, the columns' names). A row with
fewer than K admissible columns has shorter lists. Written as TensorFlow's deterministic
serialization writes them (keys sorted), vectorized over a chunk of rows: every nested message is
a ragged byte array wrapped in its tag and length. `read_topk` reads them back without TensorFlow.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Iterable, Sequence

import numpy as np

from webgraph_contract import fileio


@dataclasses.dataclass
class Ragged:
    """Byte strings, row k being `flat[starts[k]:starts[k] + lengths[k]]`, stored back to back."""

    flat: np.ndarray  # uint8
    lengths: np.ndarray  # int64

    @property
    def starts(self) -> np.ndarray:
        return np.cumsum(self.lengths) - self.lengths

    @classmethod
    def of(cls, strings: Sequence[bytes]) -> "Ragged":
        flat = np.frombuffer(b"".join(strings), np.uint8)
        return cls(flat, np.fromiter(map(len, strings), np.int64, len(strings)))

    def take(self, index: np.ndarray) -> "Ragged":
        """The strings at `index`, in that order."""
        lengths = self.lengths[index]
        shift = np.repeat(self.starts[index] - (np.cumsum(lengths) - lengths), lengths)
        return Ragged(self.flat[np.arange(int(lengths.sum()), dtype=np.int64) + shift], lengths)

    def group(self, ptr: np.ndarray) -> "Ragged":
        """Strings `ptr[k]:ptr[k+1]` joined into row k (they are already back to back)."""
        ends = np.concatenate([[0], np.cumsum(self.lengths)])
        return Ragged(self.flat, ends[ptr[1:]] - ends[ptr[:-1]])

    def tolist(self) -> list[bytes]:
        data = self.flat.tobytes()
        ends = np.cumsum(self.lengths).tolist()
        return [data[a:b] for a, b in zip([0] + ends[:-1], ends)]


def _varints(values: np.ndarray) -> Ragged:
    """The protobuf varint of each non-negative value."""
    values = np.asarray(values, np.uint64)
    lengths = np.ones(len(values), np.int64)
    for k in range(1, 10):
        lengths += values >= np.uint64(1 << (7 * k))
    groups = (values[:, None] >> (np.arange(10, dtype=np.uint64) * np.uint64(7))) & np.uint64(0x7F)
    keep = np.arange(10) < lengths[:, None]
    more = np.arange(10) < lengths[:, None] - 1
    return Ragged((groups.astype(np.uint8) | (more.astype(np.uint8) << 7))[keep], lengths)


def _join(parts: Sequence[Ragged]) -> Ragged:
    """Row k of the result: row k of every part, in order."""
    lengths = sum(p.lengths for p in parts)
    out = np.empty(int(lengths.sum()), np.uint8)
    offset = np.cumsum(lengths) - lengths
    for part in parts:
        shift = np.repeat(offset - part.starts, part.lengths)
        out[np.arange(len(part.flat), dtype=np.int64) + shift] = part.flat
        offset = offset + part.lengths
    return Ragged(out, lengths)


def _const(data: bytes, n: int) -> Ragged:
    return Ragged(np.tile(np.frombuffer(data, np.uint8), n), np.full(n, len(data), np.int64))


def _wrap(tag: int, payload: Ragged, omit_empty: bool = False) -> Ragged:
    """A length-delimited field `tag` around each row (none where empty, with `omit_empty`)."""
    n = len(payload.lengths)
    out = _join([_const(bytes([tag]), n), _varints(payload.lengths), payload])
    if omit_empty and (payload.lengths == 0).any():
        kept = payload.lengths > 0
        out = Ragged(out.flat[np.repeat(kept, out.lengths)], np.where(kept, out.lengths, 0))
    return out


_BYTES, _FLOAT, _INT64 = 0x0A, 0x12, 0x1A  # Feature's fields: bytes_list, float_list, int64_list


def _packed(values: Ragged) -> Ragged:
    """An Int64List or FloatList of packed values (an empty list: no field)."""
    return _wrap(0x0A, values, omit_empty=True)


def _entry(key: str, kind: int, payload: Ragged) -> Ragged:
    """`Features.feature[key]`: the map entry of one feature, for each row."""
    n = len(payload.lengths)
    feature = _wrap(kind, payload)
    entry = _join([_const(b"\x0a" + bytes([len(key)]) + key.encode(), n), _wrap(0x12, feature)])
    return _wrap(0x0A, entry)


def name_entries(names: Sequence[str]) -> Ragged:
    """The BytesList elements of the names of ids 0..n-1, to be picked by `encode`."""
    return _wrap(0x0A, Ragged.of([name.encode("utf-8") for name in names]))


def encode(
    rows: np.ndarray,
    ids: np.ndarray,
    scores: np.ndarray,
    row_names: Ragged | None = None,
    col_names: Ragged | None = None,
) -> list[bytes]:
    """The serialized Examples of `rows`, each with its `ids` `[n, K]` and `scores` best first
    (slots with id -1 left out); `row_url` and `urls` from the `name_entries` of the vocabulary."""
    rows = np.asarray(rows, np.int64)
    n = len(rows)
    if n == 0:
        return []
    valid = ids >= 0
    ptr = np.concatenate([[0], np.cumsum(valid.sum(axis=1))])
    flat_ids, flat_scores = ids[valid], np.asarray(scores, "<f4")[valid]
    entries = [
        _entry("ids", _INT64, _packed(_varints(flat_ids).group(ptr))),
        _entry("row", _INT64, _packed(_varints(rows))),
    ]
    if row_names is not None:
        entries.append(_entry("row_url", _BYTES, row_names.take(rows)))
    floats = Ragged(flat_scores.view(np.uint8), np.full(len(flat_scores), 4, np.int64))
    entries.append(_entry("scores", _FLOAT, _packed(floats.group(ptr))))
    if col_names is not None:
        entries.append(_entry("urls", _BYTES, col_names.take(flat_ids).group(ptr)))
    return _wrap(0x0A, _join(entries)).tolist()


def feature_spec(named: bool) -> dict:
    """The records' parsing spec for `tf.io.parse_example` (TensorFlow imported here only)."""
    import tensorflow as tf  # only for a TensorFlow user: the trainer does not need it

    spec = {
        "row": tf.io.FixedLenFeature([], tf.int64),
        "ids": tf.io.VarLenFeature(tf.int64),
        "scores": tf.io.VarLenFeature(tf.float32),
    }
    if named:
        spec.update(
            row_url=tf.io.FixedLenFeature([], tf.string), urls=tf.io.VarLenFeature(tf.string)
        )
    return spec


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, pos


def _fields(data: bytes) -> Iterable[tuple[int, int, bytes | int]]:
    """(field number, wire type, value) of a message: bytes when length-delimited, else ints."""
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 2:
            size, pos = _read_varint(data, pos)
            yield number, wire, data[pos : pos + size]
            pos += size
        elif wire == 0:
            value, pos = _read_varint(data, pos)
            yield number, wire, value
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            yield number, wire, int.from_bytes(data[pos : pos + size], "little")
            pos += size
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")


def parse_example(record: bytes) -> dict[str, list]:
    """Every feature of a `tf.train.Example` as a list of ints, floats or bytes."""
    out: dict[str, list] = {}
    for _, _, features in _fields(record):
        for _, _, entry in _fields(features):
            key, feature = "", b""
            for number, _, value in _fields(entry):
                if number == 1:
                    key = value.decode("utf-8")
                elif number == 2:
                    feature = value
            out[key] = _feature_values(feature)
    return out


def _feature_values(feature: bytes) -> list:
    values: list = []
    for kind, _, body in _fields(feature):
        for _, wire, value in _fields(body):
            if kind == 1:
                values.append(value)
            elif kind == 2 and wire == 2:
                values.extend(struct.unpack(f"<{len(value) // 4}f", value))
            elif kind == 2:
                values.append(struct.unpack("<f", value.to_bytes(4, "little"))[0])
            elif wire == 2:
                values.extend(_unpacked(value))
            else:
                values.append(value - (1 << 64) if value >= 1 << 63 else value)
    return values


def _unpacked(data: bytes) -> list[int]:
    values, pos = [], 0
    while pos < len(data):
        value, pos = _read_varint(data, pos)
        values.append(value - (1 << 64) if value >= 1 << 63 else value)
    return values


@dataclasses.dataclass
class TopK:
    """Top-K records read back: row k's columns `ids[k]` (padding -1) with `scores[k]` (padding
    -inf); `row_urls` and `urls` (lists) when the export was named."""

    rows: np.ndarray
    ids: np.ndarray
    scores: np.ndarray
    row_urls: list[str] | None = None
    urls: list[list[str]] | None = None


def read_topk(files: Sequence[str], k: int) -> TopK:
    """The records of `export --topk K` files, in file order, without TensorFlow."""
    parsed = [parse_example(r) for path in files for r in fileio.read_records(path)]
    ids = np.full((len(parsed), k), -1, np.int64)
    scores = np.full((len(parsed), k), -np.inf, np.float32)
    for i, p in enumerate(parsed):
        ids[i, : len(p.get("ids", []))] = p.get("ids", [])
        scores[i, : len(p.get("scores", []))] = p.get("scores", [])
    rows = np.array([p["row"][0] for p in parsed], np.int64)
    named = bool(parsed) and "row_url" in parsed[0]
    if not named:
        return TopK(rows, ids, scores)
    row_urls = [p["row_url"][0].decode("utf-8") for p in parsed]
    urls = [[u.decode("utf-8") for u in p.get("urls", [])] for p in parsed]
    return TopK(rows, ids, scores, row_urls, urls)
