"""The contract's record codec: its `tf.train.Example` rows encoded and decoded without TensorFlow.

Decoding (`decode_rows`) is the mirror of `encode_rows`: a block of serialized Examples (one byte
string, record offsets and lengths) becomes `SplitRows`, the `col_tag` and `gt_tag` ids as two
`RaggedRows` (int64) whose row ids are the `row_tag`s, parsed as `tf.io.parse_example` does with
`feature_spec()`: features in any order, a key given twice keeps its last value, other features are
skipped, an absent `col_tag`/`gt_tag` is empty, `row_tag` must hold exactly one value.

`encode_example` writes any `tf.train.Example` (the trainer's exported embeddings) the same way.

Protobuf is walked one nesting level at a time (Example > Features > map entry > Feature >
Int64List), each level a loop over the fields of every record at once, so the Python work
grows with the number of fields per message (a handful), not with the records or ids. The ids
themselves, packed varints, are decoded from one stream of payload bytes.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from webgraph_contract.ragged import RaggedRows

KEYS = (b"row_tag", b"col_tag", b"gt_tag")
_LEN, _VARINT, _I64, _I32 = 2, 0, 1, 5
_PAD = 16  # zero bytes after the data, so fixed-width gathers never run off its end


class ExampleError(ValueError):
    """A record is not a `tf.train.Example` with the contract's features; `index` is the
    record's."""

    def __init__(self, index: int, message: str):
        super().__init__(message)
        self.index = index


@dataclasses.dataclass
class SplitRows:
    """Decoded records of a split: record k is row `col_tag.row_ids[k]` (its `row_tag`) with the ids
    `col_tag.row(k)` and `gt_tag.row(k)`. Both parts have the same `row_ids` (one array)."""

    col_tag: RaggedRows
    gt_tag: RaggedRows

    @classmethod
    def of(
        cls,
        row_tags: np.ndarray,
        col_ptr: np.ndarray,
        cols: np.ndarray,
        gt_ptr: np.ndarray | None = None,
        gt: np.ndarray | None = None,
    ) -> SplitRows:
        """Records from arrays (no `gt_tag` ids when `gt` is None)."""
        if gt is None:
            gt_ptr, gt = np.zeros(len(row_tags) + 1, np.int64), np.zeros(0, cols.dtype)
        return cls(RaggedRows(row_tags, col_ptr, cols), RaggedRows(row_tags, gt_ptr, gt))

    @property
    def row_tags(self) -> np.ndarray:
        """The records' `row_tag`s (both parts' `row_ids`)."""
        return self.col_tag.row_ids

    def __len__(self) -> int:
        return len(self.col_tag)

    def tuples(self) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """Each record as `(row_tag, col_tag, gt_tag)`, the ids arrays (views)."""
        return zip(self.row_tags.tolist(), self.col_tag.lists(), self.gt_tag.lists())

    def select(self, index: np.ndarray) -> SplitRows:
        """The records at `index` (positions, in that order)."""
        cols, gt = self.col_tag.select(index), self.gt_tag.select(index)
        return SplitRows(cols, RaggedRows(cols.row_ids, gt.indptr, gt.ids))

    @staticmethod
    def concat(parts: Sequence[SplitRows]) -> SplitRows:
        """The records of `parts` one after another."""
        cols = RaggedRows.concat([p.col_tag for p in parts])
        gt = RaggedRows.concat([p.gt_tag for p in parts])
        return SplitRows(cols, RaggedRows(cols.row_ids, gt.indptr, gt.ids))


def _varints(
    buf: np.ndarray, pos: np.ndarray, owner: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The varint at each of `pos` (at most 10 bytes, none past `ends`): values (uint64) and the
    positions after."""
    value = np.zeros(len(pos), np.uint64)
    after = pos.copy()
    live = np.arange(len(pos))
    for k in range(10):
        byte = buf[np.minimum(pos[live] + k, len(buf) - 1)]
        value[live] |= (byte & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        last = byte < 0x80
        after[live[last]] = pos[live[last]] + k + 1
        live = live[~last]
        if not len(live):
            break
    bad = after > ends
    bad[live] = True
    if bad.any():
        raise ExampleError(int(owner[np.argmax(bad)]), "malformed varint")
    return value, after


def _fields(
    buf: np.ndarray, owner: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> dict[str, np.ndarray]:
    """Every field of every message `buf[lo[i]:hi[i]]` (message i of record `owner[i]`), in order.

    Returns arrays over the fields: `msg` (which message), `number`, `wire`, `value` (varints),
    `start`/`end` (the payload of length-delimited ones)."""
    out: dict[str, list[np.ndarray]] = {
        k: [] for k in ("msg", "number", "wire", "value", "start", "end", "step")
    }
    idx = np.arange(len(lo))
    pos = lo.copy()
    step = 0
    while True:
        live = pos < hi
        if not live.any():
            break
        i, p, e = idx[live], pos[live], hi[live]
        tag, p = _varints(buf, p, owner[i], e)
        wire = (tag & np.uint64(7)).astype(np.int64)
        value = np.zeros(len(i), np.uint64)
        start, end = p.copy(), p.copy()
        is_var, is_len = wire == _VARINT, wire == _LEN
        if is_var.any():
            value[is_var], end[is_var] = _varints(buf, p[is_var], owner[i[is_var]], e[is_var])
            start[is_var] = end[is_var]
        if is_len.any():
            n, q = _varints(buf, p[is_len], owner[i[is_len]], e[is_len])
            start[is_len], end[is_len] = q, q + n.astype(np.int64)
        end[wire == _I64] += 8
        end[wire == _I32] += 4
        bad = (
            ~(is_var | is_len | (wire == _I64) | (wire == _I32))
            | (end > e)
            | (tag >> np.uint64(3) == 0)
        )
        if bad.any():
            raise ExampleError(int(owner[i[np.argmax(bad)]]), "not a protobuf message (bad field)")
        for key, arr in (
            ("msg", i),
            ("number", (tag >> np.uint64(3)).astype(np.int64)),
            ("wire", wire),
            ("value", value),
            ("start", start),
            ("end", end),
            ("step", np.full(len(i), step)),
        ):
            out[key].append(arr)
        pos[live] = end
        step += 1
    cat = {k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in out.items()}
    order = np.lexsort((cat.pop("step"), cat["msg"]))
    return {k: v[order] for k, v in cat.items()}


def _sub(
    buf: np.ndarray, owner: np.ndarray, lo: np.ndarray, hi: np.ndarray, number: int
) -> tuple[np.ndarray, ...]:
    """The length-delimited fields `number` of each message: (message index, start, end), in
    order."""
    f = _fields(buf, owner, lo, hi)
    keep = f["number"] == number
    bad = keep & (f["wire"] != _LEN)
    if bad.any():
        raise ExampleError(
            int(owner[f["msg"][np.argmax(bad)]]), f"field {number} is not length-delimited"
        )
    return f["msg"][keep], f["start"][keep], f["end"][keep]


def _key_ids(buf: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Which of `KEYS` each key bytes `buf[start:end]` is (-1: another feature)."""
    width = max(len(k) for k in KEYS)
    head = buf[np.minimum(start[:, None] + np.arange(width), len(buf) - 1)]
    ids = np.full(len(start), -1, np.int64)
    for n, key in enumerate(KEYS):
        want = np.zeros(width, np.uint8)
        want[: len(key)] = np.frombuffer(key, np.uint8)
        mask = np.arange(width) < len(key)
        ids[((end - start) == len(key)) & (head[:, mask] == want[mask]).all(axis=1)] = n
    return ids


def _words(buf: np.ndarray) -> np.ndarray:
    """The little-endian uint32 starting at every byte of `buf` (a strided view; `buf` ends in
    `_PAD` zeros)."""
    return np.ndarray((len(buf) - 3,), "<u4", buf, 0, (1,))


def _packed(
    buf: np.ndarray, start: np.ndarray, end: np.ndarray, owner: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The varints packed in each `buf[start[j]:end[j]]` (disjoint, ascending): their values (int64,
    in order) and count per span."""
    full = end > start
    start, end = start[full], end[full]
    counts = np.zeros(len(full), np.int64)
    if not len(start):
        return np.zeros(0, np.int64), counts
    if (buf[end - 1] >= 0x80).any():
        raise ExampleError(
            int(owner[full][np.argmax(buf[end - 1] >= 0x80)]), "malformed packed int64 list"
        )
    # alternating: bytes outside a span, inside one, ...
    runs = np.empty(2 * len(start) + 1, np.int64)
    runs[0], runs[-1] = start[0], len(buf) - end[-1]
    runs[1:-1:2] = end - start
    runs[2:-1:2] = start[1:] - end[:-1]
    inside = np.repeat(np.arange(len(runs)) % 2 == 1, runs)
    ends_at = np.flatnonzero((buf < 0x80) & inside)
    first = np.searchsorted(ends_at, start)
    counts[full] = np.searchsorted(ends_at, end) - first
    begins = np.empty_like(ends_at)
    begins[0] = 0
    begins[1:] = ends_at[:-1] + 1
    begins[first] = start
    word = _words(buf)[begins]
    # the terminator's high bit is the lowest set bit of each
    stop = ~word & np.uint32(0x80808080)
    if stop.all():
        # every varint within its word (ids below 2^28): its bytes up to the terminator kept
        word &= ((stop & (~stop + np.uint32(1))) << np.uint32(1)) - np.uint32(1)
        value = (
            (word & 0x7F)
            | ((word >> 1) & 0x3F80)
            | ((word >> 2) & 0x1FC000)
            | ((word >> 3) & 0xFE00000)
        )
        return value.astype(np.int64), counts
    width = ends_at - begins + 1
    value = np.zeros(len(begins), np.uint64)
    for k in range(int(width.max())):
        has = width > k
        value[has] |= (buf[begins[has] + k].astype(np.uint64) & np.uint64(0x7F)) << np.uint64(7 * k)
    return value.view(np.int64), counts


def _short_varint(words: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The varint at each of `pos` read from one word: (value, position after, ok: at most 4
    bytes)."""
    w = words[np.minimum(pos, len(words) - 1)]
    n = 1 + ((w >> 7) & 1)
    n += (n == 2) & ((w >> 15) & 1).astype(bool)
    n += (n == 3) & ((w >> 23) & 1).astype(bool)
    ok = (n < 4) | ((w >> 31) == 0)
    value = (w & 0x7F) | ((w >> 1) & 0x3F80) | ((w >> 2) & 0x1FC000) | ((w >> 3) & 0xFE00000)
    value &= np.array([0, 0x7F, 0x3FFF, 0x1FFFFF, 0xFFFFFFF], np.uint32)[n]
    return value.astype(np.int64), pos + n, ok


def _canonical(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> SplitRows | None:
    """The records decoded if every one has exactly the layout `record_codec.encode_rows` (and
    TensorFlow's deterministic serialization) writes, `col_tag`, `gt_tag`, `row_tag`, each packed,
    sizes below 2^28; None otherwise (the general walk then decodes them)."""
    words = _words(buf)

    def at(pos: np.ndarray) -> np.ndarray:
        """The bytes at positions that garbage may have sent past the end."""
        return buf[np.minimum(pos, len(buf) - 1)]

    ok = buf[starts] == 0x0A
    size, pos, good = _short_varint(words, starts + 1)
    ok &= good & (pos + size == starts + lengths)
    spans = []
    for key in KEYS[1:] + KEYS[:1]:
        ok &= at(pos) == 0x0A
        entry, pos, good = _short_varint(words, pos + 1)
        ok &= good
        entry_end = pos + entry
        head = b"\x0a" + bytes([len(key)]) + key + b"\x12"
        for k in range(0, len(head), 4):
            piece = head[k : k + 4]
            if len(piece) == 4:
                ok &= words[np.minimum(pos + k, len(words) - 1)] == int.from_bytes(piece, "little")
            else:
                for j, byte in enumerate(piece):
                    ok &= at(pos + k + j) == byte
        _, pos, good = _short_varint(words, pos + len(head))
        ok &= good & (at(pos) == 0x1A)
        ilist, pos, good = _short_varint(words, pos + 1)
        ok &= good
        has = ilist > 0
        payload, after, good = _short_varint(words, pos + 1)
        ok &= ~has | (good & (at(pos) == 0x0A) & (after + payload == entry_end))
        ok &= has | (pos == entry_end)
        lo = np.where(has, after, entry_end)
        spans.append((lo, entry_end))
        pos = entry_end
    ok &= pos == starts + lengths
    if not ok.all():
        return None
    records = np.arange(len(starts))
    (c_lo, c_hi), (g_lo, g_hi), (r_lo, r_hi) = spans
    cols, c_count = _packed(buf, c_lo, c_hi, records)
    gt, g_count = _packed(buf, g_lo, g_hi, records)
    row, r_end, good = _short_varint(words, r_lo)
    if not (good & (r_end == r_hi)).all():
        return None  # a row id of 2^28 or more, or not one varint: the general walk
    return SplitRows.of(row, _ptr(c_count), cols, _ptr(g_count), gt)


def _ptr(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=out[1:])
    return out


def decode_rows(data: bytes, starts: np.ndarray, lengths: np.ndarray) -> SplitRows:
    """The records `data[starts[k]:starts[k]+lengths[k]]` (disjoint, in ascending order) decoded; an
    `ExampleError` (with the record's index) when one is not a contract Example."""
    n = len(starts)
    buf = np.frombuffer(data + bytes(_PAD), np.uint8)
    starts, lengths = np.asarray(starts, np.int64), np.asarray(lengths, np.int64)
    if n and lengths.min() >= 2:
        fast = _canonical(buf, starts, lengths)
        if fast is not None:
            return fast
    return _walk(buf, starts, lengths)


def _walk(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> SplitRows:
    """Any records, walked level by level as protobuf defines them (see the module's docstring)."""
    n = len(starts)
    records = np.arange(n)
    # Example.features (1) > Features.feature (1, map entries) > entry key (1) and value (2)
    m, lo, hi = _sub(buf, records, starts, starts + lengths, 1)
    owner = records[m]
    m, lo, hi = _sub(buf, owner, lo, hi, 1)
    owner = owner[m]
    entry = _fields(buf, owner, lo, hi)
    e_owner = owner[entry["msg"]]
    key_id = np.full(len(lo), -1, np.int64)
    value_lo, value_hi = np.zeros(len(lo), np.int64), np.zeros(len(lo), np.int64)
    for number, wire in ((1, _LEN), (2, _LEN)):
        sel = entry["number"] == number
        if (sel & (entry["wire"] != wire)).any():
            raise ExampleError(
                int(e_owner[np.argmax(sel & (entry["wire"] != wire))]), "bad feature map entry"
            )
        msg, s, e = entry["msg"][sel], entry["start"][sel], entry["end"][sel]
        if number == 1:  # the last key given wins, as protobuf merges
            key_id[msg] = _key_ids(buf, s, e)
        else:
            value_lo[msg], value_hi[msg] = s, e
    wanted = np.flatnonzero(key_id >= 0)
    # a key twice in one record: the later entry wins (map semantics)
    slot = owner[wanted] * len(KEYS) + key_id[wanted]
    _, last = np.unique(slot[::-1], return_index=True)
    wanted = np.sort(wanted[::-1][last])
    owner, key_id = owner[wanted], key_id[wanted]
    value_lo, value_hi = value_lo[wanted], value_hi[wanted]
    # Feature: int64_list (3); bytes_list (1) or float_list (2) is the wrong type
    feat = _fields(buf, owner, value_lo, value_hi)
    wrong = (feat["number"] == 1) | (feat["number"] == 2)
    if wrong.any():
        j = feat["msg"][np.argmax(wrong)]
        raise ExampleError(
            int(owner[j]), f"feature {KEYS[key_id[j]].decode()} is not an int64 list"
        )
    sel = feat["number"] == 3
    f_msg, lo, hi = feat["msg"][sel], feat["start"][sel], feat["end"][sel]
    # Int64List.value (1): packed (length-delimited) or one varint per field
    vals = _fields(buf, owner[f_msg], lo, hi)
    vals = {k: v[vals["number"] == 1] for k, v in vals.items()}
    v_feat = f_msg[vals["msg"]]  # which wanted feature each value field belongs to
    packed = vals["wire"] == _LEN
    values, counts = _packed(buf, vals["start"][packed], vals["end"][packed], owner[v_feat[packed]])
    per_field = np.ones(len(v_feat), np.int64)
    per_field[packed] = counts
    if (~packed & (vals["wire"] != _VARINT)).any():
        raise ExampleError(
            int(owner[v_feat[np.argmax(~packed & (vals["wire"] != _VARINT))]]), "bad int64 list"
        )
    field_values = np.zeros(int(per_field.sum()), np.int64)
    at = np.repeat(packed, per_field)
    field_values[at] = values
    field_values[~at] = vals["value"][~packed].view(np.int64)
    value_feat = np.repeat(v_feat, per_field)  # fields are in feature order, so values are too
    out = []
    for k in range(len(KEYS)):
        on = key_id[value_feat] == k
        count = np.bincount(owner[value_feat[on]], minlength=n)
        out.append((np.concatenate([[0], np.cumsum(count)]).astype(np.int64), field_values[on]))
    row_ptr, row_values = out[0]
    single = np.diff(row_ptr) == 1
    if not single.all():
        bad = int(np.argmax(~single))
        got = int(row_ptr[bad + 1] - row_ptr[bad])
        raise ExampleError(bad, f"row_tag must hold exactly one id, got {got}")
    return SplitRows.of(row_values, out[1][0], out[1][1], out[2][0], out[2][1])


def _varint(value: int) -> bytes:
    """The protobuf varint of a non-negative int (an int64 below 0: its two's complement, 10
    bytes)."""
    value &= (1 << 64) - 1
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint(number << 3 | _LEN) + _varint(len(payload)) + payload


def encode_example(features: Mapping[str, np.ndarray | Sequence[bytes]]) -> bytes:
    """A `tf.train.Example` of any features, byte for byte as TensorFlow's deterministic
    serialization writes it (keys sorted): an integer array becomes an `int64_list`, a float array a
    `float_list` (float32), a sequence of bytes a `bytes_list`."""
    entries = []
    for key in sorted(features):
        value = features[key]
        if isinstance(value, (list, tuple)):
            feature = _field(1, b"".join(_field(1, bytes(v)) for v in value))
        else:
            value = np.asarray(value).reshape(-1)
            if value.dtype.kind == "f":
                packed = value.astype("<f4").tobytes()
                feature = _field(2, _field(1, packed) if len(packed) else b"")
            elif value.dtype.kind in "iu":
                packed = b"".join(map(_varint, value.tolist()))
                feature = _field(3, _field(1, packed) if len(packed) else b"")
            else:
                raise TypeError(
                    f"feature {key!r}: expected integers, floats or a list of bytes, got "
                    f"{value.dtype}"
                )
        entries.append(_field(1, _field(1, key.encode("utf-8")) + _field(2, feature)))
    return _field(1, b"".join(entries))


def encode_row(row_tag: int, col_tag: Sequence[int], gt_tag: Sequence[int] = ()) -> bytes:
    """One row of a split as a serialized `tf.train.Example` with the web_graph features."""
    col, gt = np.asarray(col_tag, np.int64).reshape(-1), np.asarray(gt_tag, np.int64).reshape(-1)
    ptr = np.array([0, len(col)]), np.array([0, len(gt)])
    return encode_rows(SplitRows.of(np.array([row_tag]), ptr[0], col, ptr[1], gt))[0]


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
        rows = decode_rows(serialized, np.array([0]), np.array([len(serialized)]))
    except ExampleError as e:
        raise ValueError(f"not a web_graph record ({e})") from None
    return int(rows.row_tags[0]), rows.col_tag.ids.tolist(), rows.gt_tag.ids.tolist()


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
    if width <= 4:
        # ids below 2^28: one uint32 word each, continuation bits and byte mask looked up by length
        v = values.astype(np.uint32)
        word = v & np.uint32(0x7F)
        for k in range(1, width):
            word |= (v << np.uint32(k)) & np.uint32(0x7F << (8 * k))
        word |= np.array([0, 0, 0x80, 0x8080, 0x808080], np.uint32)[lengths]
        keep = (
            np.array([0, 0x1, 0x101, 0x10101, 0x1010101], "<u4")[lengths]
            .view(bool)
            .reshape(len(values), 4)
        )
        return word.astype("<u4", copy=False).view(np.uint8).reshape(len(values), 4)[keep]
    word = values & np.uint64(0x7F)
    for k in range(1, min(width, 8)):
        word |= (values << np.uint64(k)) & np.uint64(0x7F << (8 * k))
        word |= (lengths > k).astype(np.uint64) << np.uint64(8 * k - 1)
    table = word.astype("<u8", copy=False).view(np.uint8).reshape(len(values), 8)
    if width > 8:
        # 9-byte varints (2^56 <= value < 2^63, the largest non-negative int64): the last byte apart
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


def _from_zero(rows: RaggedRows) -> tuple[np.ndarray, np.ndarray]:
    """(pointer from 0, the ids it spans), int64: a view's span of a larger `ids` cut out."""
    lo, hi = int(rows.indptr[0]), int(rows.indptr[-1])
    return np.asarray(rows.indptr - lo, np.int64), np.asarray(rows.ids[lo:hi], np.int64)


class _Int64Feature:
    """The serialized sizes of one int64-list feature (`key`) for each row of a ragged array."""

    def __init__(self, key: bytes, ptr: np.ndarray, values: np.ndarray):
        self.key, self.ptr, self.values = key, ptr, values
        self.vlen = _varint_len(values)
        before = np.concatenate(([0], np.cumsum(self.vlen)))
        self.payload = before[ptr[1:]] - before[ptr[:-1]]  # packed varint bytes per row
        # Int64List
        self.ilist = np.where(self.payload > 0, 1 + _varint_len(self.payload) + self.payload, 0)
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
        # byte i of row k goes to pos[k] + (i - the row's first stream byte); work in the payload
        # only.
        lengths = self.payload[has]
        shift = pos[has] - (np.cumsum(lengths) - lengths)
        buf[np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(shift, lengths)] = (
            _varint_stream(self.values, self.vlen)
        )
        return pos + self.payload


def encode_rows(rows: SplitRows) -> list[bytes]:
    """`encode_row(row_tag, col_tag, gt_tag)` of every record of `rows`, vectorized: the mirror of
    `decode_rows`.

    Byte-identical to `encode_row` (checked by tests/test_contract.py): the deterministic
    serialization writes the features sorted by key, `col_tag`, `gt_tag`, `row_tag`, each an
    int64 list packed as varints. Ids must be non-negative.
    """
    row_tags = np.asarray(rows.row_tags, np.int64)
    n = len(row_tags)
    features = [
        _Int64Feature(b"col_tag", *_from_zero(rows.col_tag)),
        _Int64Feature(b"gt_tag", *_from_zero(rows.gt_tag)),
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
