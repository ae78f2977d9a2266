"""64-bit node fingerprints: the graph stage moves these integers, and each name travels once, to
the vocabulary.

The hash is pandas' `hash_array` (SipHash-1-3 with a fixed key, vectorized in C over an object array
of str): stable across processes, machines and runs, about 0.2 us per name, where a Python loop over
`hashlib.blake2b` costs about 1 us (measured by the pipeline benchmark, then
`benchmarks/pipeline_scale.py`, now `python -m benchmarks.pipeline`). pandas is already installed
with Beam and TFDS, so it adds no dependency of its own.

Two distinct names with one fingerprint are never silent: `merge_vocabulary` finds them and the job
stops with `FingerprintCollision`, which names both (with 64 bits the chance is about n^2 / 2^65:
1e-7 for 2M nodes, 0.4% for the paper's 365M). `bits` narrows the width so tests can force one.
"""

from __future__ import annotations

from typing import Iterable, Sequence, Union

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

FINGERPRINT_BITS = 64
_HASH_KEY = (
    "webgraph-fp-0001"  # 16 bytes: SipHash's key; changing it renumbers nothing (ids use names)
)


class FingerprintCollision(ValueError):
    """Two distinct node names share one fingerprint."""


def fingerprint(names: Sequence[str], bits: int = FINGERPRINT_BITS) -> np.ndarray:
    """The uint64 fingerprints of `names` (the low `bits` bits of SipHash-1-3 of the UTF-8
    bytes)."""
    from pandas.util import hash_array

    if not 1 <= bits <= 64:
        raise ValueError(f"fingerprint bits must be in [1, 64], got {bits}")
    arr = names if isinstance(names, np.ndarray) else np.array(names, dtype=object)
    if not len(arr):
        return np.zeros(0, dtype=np.uint64)
    fps = hash_array(arr, encoding="utf8", hash_key=_HASH_KEY, categorize=False)
    return fps if bits == 64 else fps & np.uint64((1 << bits) - 1)


def pack_names(names: Sequence[str]) -> bytes:
    """Names as one newline-separated UTF-8 buffer: the form in which names cross Beam's shuffles.

    Beam copies a bytes element whole, where an object array is pickled name by name (about 3 us
    per name, the largest per-node cost of the job). Node names never hold a newline (edge-list
    tokens are split on whitespace, URLs with whitespace are dropped); one that does is an error.
    """
    text = "\n".join(names)
    if text.count("\n") != max(len(names) - 1, 0):
        bad = next(n for n in names if "\n" in n)
        raise ValueError(f"a node name holds a newline: {bad!r}")
    if len(names) == 1 and not names[0]:
        raise ValueError("an empty node name")
    return text.encode("utf-8")


def unpack_names(packed: bytes) -> np.ndarray:
    """The object array of names of a `pack_names` buffer (names are never empty, so b"" is
    none)."""
    return np.array(packed.decode("utf-8").split("\n") if packed else [], dtype=object)


def unpacked(pieces: Iterable[tuple], at: int) -> list[tuple]:
    """The pieces with their packed names (element `at`) unpacked, ready for `columnar.concat`."""
    return [(*p[:at], unpack_names(p[at]), *p[at + 1 :]) for p in pieces]


Names = pa.LargeStringArray


def names_array(packed: bytes) -> Names:
    """The names of a `pack_names` buffer as an Arrow string array, made by NumPy on the buffer's
    bytes (its newlines removed, their positions become the offsets): no Python object per name."""
    buf = np.frombuffer(packed, np.uint8)
    if not len(buf):
        return pa.array([], pa.large_string())
    newlines = np.flatnonzero(buf == 10)
    offsets = np.empty(len(newlines) + 2, np.int64)
    offsets[0], offsets[-1] = 0, len(buf) - len(newlines)
    offsets[1:-1] = newlines - np.arange(len(newlines))
    data = np.delete(buf, newlines)
    return pa.Array.from_buffers(
        pa.large_string(), len(offsets) - 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


def joined_names(pieces: Iterable[tuple], at: int) -> Names:
    """The packed names (element `at`) of several pieces as one Arrow array, in piece order."""
    return names_array(b"\n".join([p[at] for p in pieces if p[at]]))


def pack_array(names: Names) -> bytes:
    """An Arrow string array as a `pack_names` buffer (NumPy on its offsets and bytes)."""
    if not len(names):
        return b""
    _, offsets_buf, data_buf = names.buffers()
    offsets = np.frombuffer(offsets_buf, np.int64)[names.offset : names.offset + len(names) + 1]
    data = np.frombuffer(data_buf, np.uint8)[offsets[0] : offsets[-1]]
    packed = np.insert(data, offsets[1:-1] - offsets[0], 10).tobytes()
    if packed.count(b"\n") != len(names) - 1:
        raise ValueError(
            "a node name holds a newline: " + next(repr(n) for n in names.to_pylist() if "\n" in n)
        )
    if (np.diff(offsets) == 0).any():
        raise ValueError("an empty node name")
    return packed


def bucket_of(fps: np.ndarray, num_buckets: int) -> np.ndarray:
    """The hash bucket of each fingerprint (mixed first, so narrowed fingerprints still spread)."""
    mixed = (fps * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(32)
    return (mixed % np.uint64(num_buckets)).astype(np.int64)


def _repeats(fps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(distinct fingerprints in the order they first occur, the position of each one's first entry,
    the entries that repeat an earlier fingerprint, that fingerprint's first entry): pandas' hash
    table, no sort. Both collision checks below compare names at these pairs only."""
    codes, uniques = pd.factorize(fps)
    first = np.empty(len(uniques), np.int64)
    # the last write of each code wins: its first entry
    first[codes[::-1]] = np.arange(len(codes) - 1, -1, -1)
    repeats = np.flatnonzero(first[codes] != np.arange(len(codes)))
    return np.asarray(uniques, fps.dtype), first, repeats, first[codes[repeats]]


def distinct_entries(fps: np.ndarray, names: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct fingerprints, the position of one entry of each) of parallel arrays of
    fingerprints and names (objects); `FingerprintCollision` when two distinct names share one."""
    uniq, first, repeats, earlier = _repeats(fps)
    clash = np.flatnonzero(names[repeats] != names[earlier])
    if len(clash):
        _raise_collision(names[earlier[clash[0]]], names[repeats[clash[0]]], fps[repeats[clash]])
    order = np.argsort(uniq)
    return uniq[order], first[order]


def _raise_collision(a: str, b: str, shared_fps: np.ndarray) -> None:
    raise FingerprintCollision(
        f"fingerprint collision: {str(a)!r} and {str(b)!r} share fingerprint "
        f"{int(shared_fps[0]):#x} "
        f"({len(np.unique(shared_fps))} shared fingerprint(s) in this bucket); the graph stage "
        "cannot tell "
        "these nodes apart"
    )


def merge_vocabulary(
    fps: np.ndarray, names: Union[Sequence[str], Names]
) -> tuple[np.ndarray, Names]:
    """(distinct fingerprints in the order they first occur, their names as an Arrow array) of
    (fingerprint, name) pairs with repeats.

    Raises `FingerprintCollision` naming two distinct names with one fingerprint, and how many
    fingerprints are shared. Only entries that repeat a fingerprint have their names compared, each
    with the first entry of its fingerprint. Repeats are found in pandas' hash table (no sort).
    """
    names = names if isinstance(names, pa.Array) else pa.array(list(names), pa.large_string())
    uniq, first, repeats, earlier = _repeats(fps)
    if len(repeats):
        differ = pc.not_equal(names.take(repeats), names.take(earlier)).to_numpy(
            zero_copy_only=False
        )
        if differ.any():
            i = int(np.flatnonzero(differ)[0])
            _raise_collision(
                names[int(earlier[i])].as_py(), names[int(repeats[i])].as_py(), fps[repeats[differ]]
            )
    return uniq, names.take(first)
