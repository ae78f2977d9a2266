"""Dense, deterministic node ids 0..N-1, assigned without funnelling the nodes through one worker.

Each name falls in a hash bucket (blake2b, stable across processes and machines). The job counts
names per bucket, turns the (small) list of bucket counts into offsets by a prefix sum, passes the
offsets as a side input, and numbers the names inside each bucket in sorted order. So a node's id
is its rank in the order (bucket, name); with one bucket that is plain sorted order.
"""

from __future__ import annotations

import hashlib
from typing import Iterable, Iterator, Mapping

import apache_beam as beam


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


def number_bucket(bucket: int, names: Iterable[str], offsets: Mapping[int, int]) -> Iterator[tuple[str, int]]:
    """(name, id) for the names of one bucket, numbered in sorted order from the bucket's offset."""
    ordered = sorted(names)
    for i in range(1, len(ordered)):
        if ordered[i] == ordered[i - 1]:
            raise ValueError(f"AssignIds got the node {ordered[i]!r} twice; its input must be distinct")
    start = offsets[bucket]
    for i, name in enumerate(ordered):
        yield name, start + i


class AssignIds(beam.PTransform):
    """PCollection of distinct node names -> PCollection of (name, id), ids dense in 0..N-1."""

    def __init__(self, num_buckets: int = 1024):
        super().__init__()
        if num_buckets < 1:
            raise ValueError(f"num_buckets must be >= 1, got {num_buckets}")
        self._num_buckets = num_buckets

    def expand(self, names):
        keyed = names | "Bucket" >> beam.Map(lambda n, b=self._num_buckets: (bucket_of(n, b), n))
        offsets = (
            keyed
            | "One" >> beam.Map(lambda kv: (kv[0], 1))
            | "CountPerBucket" >> beam.CombinePerKey(sum)
            | "CollectCounts" >> beam.combiners.ToList()
            | "PrefixSum" >> beam.Map(bucket_offsets)
        )
        return (
            keyed
            | "GroupBuckets" >> beam.GroupByKey()
            | "NumberInBucket"
            >> beam.FlatMap(lambda kv, offs: number_bucket(kv[0], kv[1], offs), beam.pvalue.AsSingleton(offsets))
        )
