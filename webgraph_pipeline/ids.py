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


def buckets_of(packed: bytes, num_buckets: int) -> np.ndarray:
    """The id bucket of each name of a `fingerprints.pack_names` buffer: blake2b-8 of its UTF-8
    bytes (stable, unlike Python's salted `hash`), big-endian, modulo `num_buckets`. One hashlib
    call per name (it has no batch call), the rest NumPy."""
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
