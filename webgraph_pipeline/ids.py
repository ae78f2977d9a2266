"""The id rule's two pieces: a node's id is its rank in the order (id bucket of its name, name).

Each name falls in a hash bucket (blake2b, stable across processes and machines); the graph stage
(`graph._AssignIds`) counts nodes per bucket, turns the counts into offsets by a prefix sum and
numbers each bucket's names in sorted order from its offset. With one bucket that is sorted order.
"""

from __future__ import annotations

import hashlib
from functools import partial
from typing import Iterable

import numpy as np

_BLAKE2B_8 = partial(hashlib.blake2b, digest_size=8)


def bucket_of(name: str, num_buckets: int) -> int:
    """The hash bucket of a node name (stable: blake2b, not Python's salted `hash`)."""
    digest = hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % num_buckets


def buckets_of(packed: bytes, num_buckets: int) -> np.ndarray:
    """`bucket_of` of each name of a `fingerprints.pack_names` buffer, hashed from its bytes: one
    blake2b call per name (hashlib has no batch call), the rest NumPy."""
    if not packed:
        return np.zeros(0, np.int64)
    digests = b"".join([_BLAKE2B_8(name).digest() for name in packed.split(b"\n")])
    return (np.frombuffer(digests, ">u8") % np.uint64(num_buckets)).astype(np.int64)


def bucket_offsets(counts: Iterable[tuple[int, int]]) -> dict[int, int]:
    """{bucket: number of names in all lower buckets}, from (bucket, count) pairs."""
    offsets, total = {}, 0
    for bucket, count in sorted(counts):
        offsets[bucket] = total
        total += count
    return offsets
