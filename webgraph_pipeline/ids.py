"""The id rule: dense, deterministic node ids 0..N-1, assigned without funnelling nodes through one worker.

Each name falls in an id bucket (blake2b, stable across processes and machines). The job counts
names per group of id buckets, turns the (small) list of counts into offsets by a prefix sum, passes
the offsets as a side input, and numbers the names inside each group in (bucket, name) order
(graph.py's `_AssignIds`, columnar.py's `rank_nodes`). So a node's id is its rank in the order
(bucket, name); with one bucket that is plain sorted order.
"""

from __future__ import annotations

import hashlib
from typing import Iterable


def bucket_of(name: str, num_buckets: int) -> int:
    """The hash bucket of a node name (stable: blake2b, not Python's salted `hash`)."""
    digest = hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % num_buckets


def bucket_offsets(counts: Iterable[tuple[int, int]]) -> dict[int, int]:
    """{bucket: number of names in all lower buckets}, from (bucket, count) pairs."""
    offsets, total = {}, 0
    for bucket, count in sorted(counts):
        offsets[bucket] = total
        total += count
    return offsets
