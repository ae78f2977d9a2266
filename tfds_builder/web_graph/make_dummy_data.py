"""Writes `dummy_data/` for the builder tests: two small graphs in the dataset contract layout.

    python -m tfds_builder.web_graph.make_dummy_data

* `dummy_data/` itself: a `python -m webgraph_pipeline` output directory (one shard per split,
  `stats.json`, `vocab.tsv`) holding the hand-made 6-node graph `HAND_GRAPH`, as the `de-dense`
  settings would record it.
* `dummy_data/web_graph_tld_in_min_50/`: the official gs://gresearch/web_graph/ layout (two shards
  per split, no stats.json) holding a 12-node circulant graph, for the `in-dense` config.
"""

from __future__ import annotations

import os
import pathlib
from typing import Iterable, Mapping, Sequence

from webgraph_pipeline import contract
from webgraph_pipeline.variants import VARIANTS

DUMMY_DIR = pathlib.Path(__file__).resolve().parent / "dummy_data"

# Out-links of each node of the hand graph; node 4 is the test row (2 links kept, 1 held out).
HAND_GRAPH: Mapping[int, Sequence[int]] = {0: (1, 2, 3), 1: (0, 2), 2: (0, 3), 3: (0, 1, 4), 4: (0, 3, 5), 5: (0, 4)}
HAND_TEST: Mapping[int, tuple[Sequence[int], Sequence[int]]] = {4: ((0, 3), (5,))}

Row = tuple[int, Sequence[int], Sequence[int]]


def split_rows(
    graph: Mapping[int, Sequence[int]], test: Mapping[int, tuple[Sequence[int], Sequence[int]]]
) -> dict[str, list[Row]]:
    """`train` (non-test rows), `train_t` (their transpose) and `test` rows of a graph."""
    train = [(r, tuple(sorted(cols)), ()) for r, cols in sorted(graph.items()) if r not in test]
    incoming: dict[int, list[int]] = {}
    for r, cols, _ in train:
        for c in cols:
            incoming.setdefault(c, []).append(r)
    train_t = [(c, tuple(sorted(srcs)), ()) for c, srcs in sorted(incoming.items())]
    test_rows = [(r, tuple(kept), tuple(held)) for r, (kept, held) in sorted(test.items())]
    return {"train": train, "train_t": train_t, "test": test_rows}


def write_split(directory: pathlib.Path, split: str, rows: Iterable[Row], num_shards: int) -> None:
    """`rows` into `num_shards` TFRecord shards (row id modulo the shard count)."""
    import tensorflow as tf

    prefix = contract.SPLIT_PREFIXES[split]
    writers = [
        tf.io.TFRecordWriter(str(directory / contract.shard_name(prefix, i, num_shards, contract.TFRECORD_SUFFIX)))
        for i in range(num_shards)
    ]
    for row in rows:
        writers[row[0] % num_shards].write(contract.encode_row(*row))
    for w in writers:
        w.close()


def circulant(n: int, steps: Sequence[int]) -> dict[int, tuple[int, ...]]:
    """Node i links to i+s (mod n) for each step s."""
    return {i: tuple(sorted((i + s) % n for s in steps)) for i in range(n)}


def write_dummy_data(out: pathlib.Path = DUMMY_DIR) -> None:
    """Write both graphs under `out` (replacing earlier files)."""
    out.mkdir(exist_ok=True)
    for old in out.rglob("*"):
        if old.is_file():
            old.unlink()

    splits = split_rows(HAND_GRAPH, HAND_TEST)
    for split, rows in splits.items():
        write_split(out, split, rows, num_shards=1)
    with open(out / contract.shard_name(contract.VOCAB_PREFIX, 0, 1), "w") as f:
        f.writelines(f"{i}\thttp://node{i}.example.de/\n" for i in sorted(HAND_GRAPH))
    contract.write_stats(
        str(out),
        {
            "nodes": len(HAND_GRAPH),
            "edges": sum(len(v) for v in HAND_GRAPH.values()),
            "splits": {split: len(rows) for split, rows in splits.items()},
            "dropped": {},
            "config": VARIANTS["de-dense"].to_dict(),
            "input_files": ["hand-made graph of tfds_builder/web_graph/make_dummy_data.py"],
            "code_version": "dummy",
        },
    )

    official = out / "web_graph_tld_in_min_50"
    official.mkdir(exist_ok=True)
    graph = circulant(12, (1, 2, 5))
    test = {r: (graph[r][:2], graph[r][2:]) for r in (3, 8)}
    for split, rows in split_rows(graph, test).items():
        write_split(official, split, rows, num_shards=2)


def main() -> None:
    write_dummy_data(DUMMY_DIR)
    print(f"wrote {sum(1 for p in DUMMY_DIR.rglob('*') if p.is_file())} files under {os.fspath(DUMMY_DIR)}")


if __name__ == "__main__":
    main()
