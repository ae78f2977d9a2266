"""Writes `dummy_data/` for the builder tests by running the pipeline (the only dataset producer).

    python -m tfds_builder.web_graph.make_dummy_data

* `dummy_data/` itself: the `python -m webgraph_pipeline --variant de-dense` output directory for
  `DENSE_GRAPH` on `.de` hosts (one shard per split, `stats.json`, `vocab.tsv`).
* `dummy_data/web_graph_tld_in_min_50/`: the `--variant in-dense` output for the same graph on `.in`
  hosts, two shards per split, cut down to the official gs://gresearch/web_graph/ layout (the
  TFRecord shards only, no stats.json or vocabulary).

The graph is a circulant: node i links to i+1 .. i+50 (mod 56), so every node has exactly 50 in-
and out-links and passes the paper's dense filter (K = 50); which rows are test rows is the
pipeline's seeded hash.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import tempfile
from typing import Mapping, Sequence

DUMMY_DIR = pathlib.Path(__file__).resolve().parent / "dummy_data"
OFFICIAL_SUBDIR = "web_graph_tld_in_min_50"
NUM_NODES = 56


def circulant(n: int, steps: Sequence[int]) -> dict[int, tuple[int, ...]]:
    """Node i links to i+s (mod n) for each step s."""
    return {i: tuple(sorted((i + s) % n for s in steps)) for i in range(n)}


DENSE_GRAPH: Mapping[int, Sequence[int]] = circulant(NUM_NODES, range(1, 51))


def node_url(node: int, tld: str) -> str:
    """The page URL of a node of `DENSE_GRAPH` on top-level domain `tld`."""
    return f"http://node{node:02d}.example.{tld}/"


def run_pipeline(out: pathlib.Path, variant: str, tld: str, num_shards: int) -> None:
    """`python -m webgraph_pipeline --edge_format pairs --variant VARIANT` on the graph's URL edge
    list.

    The job runs in a temporary directory on a relative file name, so stats.json names the input
    the same way on every machine.
    """
    from webgraph_pipeline.cli import main

    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        name = f"dense_graph_{tld}.txt"
        with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
            f.writelines(
                f"{node_url(s, tld)} {node_url(d, tld)}\n"
                for s, ds in DENSE_GRAPH.items()
                for d in ds
            )
        os.chdir(tmp)
        try:
            code = main(
                [
                    "--edge_format",
                    "pairs",
                    "--input",
                    name,
                    "--output",
                    str(out),
                    "--variant",
                    variant,
                    "--num_shards",
                    str(num_shards),
                ]
            )
        finally:
            os.chdir(cwd)
    if code != 0:
        raise RuntimeError(f"webgraph_pipeline exited {code} for {out}")


def write_dummy_data(out: pathlib.Path = DUMMY_DIR) -> None:
    """Write both datasets under `out` (replacing whatever was there)."""
    if out.exists():
        shutil.rmtree(out)
    run_pipeline(out, "de-dense", "de", num_shards=1)
    official = out / OFFICIAL_SUBDIR
    run_pipeline(official, "in-dense", "in", num_shards=2)
    for path in official.iterdir():
        if ".tfr-" not in path.name:  # the official layout holds the record shards only
            path.unlink()


def main() -> None:
    write_dummy_data(DUMMY_DIR)
    print(
        f"wrote {sum(1 for p in DUMMY_DIR.rglob('*') if p.is_file())} files under "
        f"{os.fspath(DUMMY_DIR)}"
    )


if __name__ == "__main__":
    main()
