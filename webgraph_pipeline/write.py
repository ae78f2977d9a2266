"""`WriteTfRecords`: the dataset contract's files, byte-identical on every run and runner.

Beam's `WriteToTFRecord` assigns records to shards round-robin from a random start and names
shards by temporary-file order, so its output differs run to run. Here each record goes to a fixed
shard by id (contiguous id ranges, so the shards read in order list ids 0..N-1), each shard's
records are sorted by id, and each shard is written to a temporary name and renamed into place
(a retried worker rewrites the same bytes). Empty shards are written too, so every
`-of-N` set is complete.
"""

from __future__ import annotations

import io
import os
from typing import Any, Iterator, Mapping, Sequence

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from webgraph_contract import __version__, fileio, layout, record_codec, stats_json
from webgraph_pipeline import columnar as col
from webgraph_pipeline.fingerprints import Names, joined_names, names_array, pack_array

# The files of one kind: (split or vocabulary name, file prefix, suffix).
_SPLIT_FILES = tuple(
    (split, prefix, layout.TFRECORD_SUFFIX) for split, prefix in layout.ALL_SPLIT_PREFIXES.items()
)
DEGREE_PLOT = "degree_distribution.png"


def vocab_lines(ids: np.ndarray, names: Names) -> bytes:
    """`id<TAB>name` lines (UTF-8), sorted by id; made by Arrow, without a Python object per
    line."""
    if not len(ids):
        return b""
    order = np.argsort(ids, kind="stable")
    text = pa.large_string()
    lines = pc.binary_join_element_wise(
        pa.array(ids[order]).cast(text), names.take(order), pa.scalar("\t", text)
    )
    return pack_array(lines) + b"\n"


def degree_plot_png(
    out_hist: Sequence[Sequence[int]],
    in_hist: Sequence[Sequence[int]],
    title: str,
    bipartite: bool = False,
) -> bytes:
    """A log-log PNG of the in- and out-degree distributions (number of nodes per degree); for users
    x items data, of the items per user and the users per item."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 4.5), dpi=100)
    ax = fig.subplots()
    labels = (
        ("users: items per user", "items: users per item")
        if bipartite
        else ("out-degree", "in-degree")
    )
    for hist, label, marker in ((out_hist, labels[0], "o"), (in_hist, labels[1], "x")):
        points = [(d, n) for d, n in hist if d > 0 and n > 0]
        if points:
            ax.loglog([d for d, _ in points], [n for _, n in points], marker, ms=3, label=label)
    ax.set_xlabel("links per user or item" if bipartite else "degree")
    ax.set_ylabel("users or items" if bipartite else "nodes")
    ax.set_title(title)
    if ax.has_data():
        ax.legend()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


class _WriteShardFn(beam.DoFn):
    """(shard, {'rows': [pieces], 'shard': [...]}) -> writes one shard file sorted by id, yields its
    path.

    Pieces are `record_codec.SplitRows` (kind `rows`, encoded by `record_codec.encode_rows`) or
    (ids array, packed names) (kind `vocab`).
    """

    def __init__(self, output_dir: str, prefix: str, suffix: str, num_shards: int, kind: str):
        self._output_dir, self._prefix, self._suffix = output_dir, prefix, suffix
        self._num_shards, self._kind = num_shards, kind

    def process(self, kv) -> Iterator[str]:
        shard, grouped = kv
        path = os.path.join(
            self._output_dir, layout.shard_name(self._prefix, shard, self._num_shards, self._suffix)
        )
        pieces = list(grouped["rows"])
        if self._kind == "vocab":
            ids = col.concat(pieces, 1, (np.int64,))[0]
            fileio.write_atomic(path, vocab_lines(ids, joined_names(pieces, 1)))
        else:
            block = record_codec.SplitRows.concat(pieces)
            block = block.select(np.argsort(block.row_tags, kind="stable"))
            fileio.write_records(path, record_codec.encode_rows(block))
        yield path


def shard_pieces(
    piece: record_codec.SplitRows | tuple, num_ids: int, num_shards: int
) -> Iterator[tuple[int, record_codec.SplitRows | tuple]]:
    """(shard, its part of the piece) for the shards that a piece's ids fall in: rows of a split
    or (ids, packed names)."""
    if isinstance(piece, record_codec.SplitRows):
        shards = layout.shard_of(piece.row_tags, num_ids, num_shards)
        for shard, at in col.group_positions(shards, num_shards):
            yield shard, col.narrow_rows(piece.select(at))
        return
    ids, names = piece[0], names_array(piece[1])
    for shard, at in col.group_positions(layout.shard_of(ids, num_ids, num_shards), num_shards):
        yield shard, (ids[at], pack_array(names.take(at)))


def _write_sharded(
    pcoll, size, label: str, output_dir: str, prefix: str, suffix: str, num_shards: int, kind: str
):
    """Write pieces (rows of a split or vocabulary arrays) into `num_shards` files by contiguous id
    range; every shard exists."""
    keyed = pcoll | f"{label}ShardKey" >> beam.FlatMap(
        lambda piece, n, s=num_shards: shard_pieces(piece, n, s), beam.pvalue.AsSingleton(size)
    )
    all_shards = pcoll.pipeline | f"{label}Shards" >> beam.Create(
        [(i, None) for i in range(num_shards)]
    )
    return (
        {"rows": keyed, "shard": all_shards}
        | f"{label}GroupShards" >> beam.CoGroupByKey()
        | f"{label}WriteShard"
        >> beam.ParDo(_WriteShardFn(output_dir, prefix, suffix, num_shards, kind))
    )


class WriteTfRecords(beam.PTransform):
    """Write `BuildWebGraph`'s output: the three splits (and the validation splits when given),
    vocabulary shards, stats.json and a PNG.

    Takes the dict `BuildWebGraph` returns (`SplitRows` and vocabulary arrays); yields the
    PCollection of written paths.
    stats.json is written here without the Beam counters; `pipeline.run_job` adds them at the end.
    """

    def __init__(
        self,
        output_dir: str,
        config: Mapping[str, Any],
        input_files: Sequence[str] = (),
        num_shards: int = 10,
        plot_title: str = "WebGraph degree distribution",
    ):
        super().__init__()
        if num_shards < 1:
            raise ValueError(f"num_shards must be >= 1, got {num_shards}")
        self._output_dir = output_dir
        self._config = dict(config)
        self._input_files = list(input_files)
        self._num_shards = num_shards
        self._plot_title = plot_title

    def expand(self, graph: Mapping[str, Any]):
        summary = graph["summary"]
        bipartite = bool(self._config.get("bipartite"))
        sizes = {
            "rows": summary | "NumRows" >> beam.Map(lambda s: s.get("num_rows", s["nodes"])),
            "cols": summary | "NumCols" >> beam.Map(lambda s: s.get("num_cols", s["nodes"])),
        }
        written = []
        for split, prefix, suffix in _SPLIT_FILES:
            if split not in graph:  # the validation splits are optional
                continue
            size = sizes["cols" if split.endswith("train_t") else "rows"]
            written.append(
                _write_sharded(
                    graph[split],
                    size,
                    split,
                    self._output_dir,
                    prefix,
                    suffix,
                    self._num_shards,
                    "rows",
                )
            )
        written.append(
            _write_sharded(
                graph["vocab"],
                sizes["rows"],
                "vocab",
                self._output_dir,
                layout.VOCAB_PREFIX,
                "",
                self._num_shards,
                "vocab",
            )
        )
        if bipartite:
            written.append(
                _write_sharded(
                    graph["col_vocab"],
                    sizes["cols"],
                    "col_vocab",
                    self._output_dir,
                    layout.COL_VOCAB_PREFIX,
                    "",
                    self._num_shards,
                    "vocab",
                )
            )
        written.append(
            summary
            | "WriteStatsAndPlot"
            >> beam.ParDo(
                _WriteStatsFn(
                    self._output_dir,
                    self._config,
                    self._input_files,
                    self._num_shards,
                    self._plot_title,
                )
            )
        )
        return written | "AllWritten" >> beam.Flatten()


class _WriteStatsFn(beam.DoFn):
    """The summary dict -> stats.json (without counters) and the degree plot; yields their paths."""

    def __init__(
        self, output_dir: str, config: dict, input_files: list, num_shards: int, title: str
    ):
        self._output_dir, self._config, self._input_files = output_dir, config, input_files
        self._num_shards, self._title = num_shards, title

    def process(self, summary: Mapping[str, Any]) -> Iterator[str]:
        stats = stats_json.job_stats(
            summary, self._config, self._input_files, __version__, self._num_shards
        )
        stats_json.write_stats(self._output_dir, stats)
        yield os.path.join(self._output_dir, stats_json.STATS_FILE)
        plot = os.path.join(self._output_dir, DEGREE_PLOT)
        png = degree_plot_png(
            stats["out_degree_histogram"],
            stats["in_degree_histogram"],
            self._title,
            bool(self._config.get("bipartite")),
        )
        fileio.write_atomic(plot, png)
        yield plot
