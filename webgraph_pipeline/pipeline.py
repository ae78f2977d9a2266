"""The whole WebGraph job: read (WAT or edge lists) -> `BuildWebGraph` -> `WriteTfRecords`.

A published split (`--edge_format given_split`) goes through `BuildGivenSplit` instead of
`BuildWebGraph`. `run_job` runs the job and completes stats.json with the Beam counters (every
drop by reason), which exist only once the job has finished, and with the readers' notes (the
files not read whole, the first lines of each drop reason...), which the job writes into its
output directory (`keep_notes`).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Optional, Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from webgraph_contract import stats_json
from webgraph_pipeline import output_dir
from webgraph_pipeline.counters import collect_counters, take_notes, write_notes
from webgraph_pipeline.edge_formats import MAX_EXAMPLES, EdgeFormat
from webgraph_pipeline.edges_input import EMPTY_FILES, HEADER_HINTS, LINE_EXAMPLES, ReadEdgeList
from webgraph_pipeline.file_accounting import (
    FILE_PROBLEMS,
    PARTLY_READ,
    UNREADABLE,
    file_problems,
)
from webgraph_pipeline.given_split import BuildGivenSplit
from webgraph_pipeline.graph import BuildWebGraph
from webgraph_pipeline.graph_config import GraphConfig
from webgraph_pipeline.local_runner import disable_time_based_flush, runner_for
from webgraph_pipeline.write import WriteTfRecords

INPUT_FORMATS = ("wat", "edges")
PROTOCOLS = ("strong_generalization", "given_split")


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """What one run of the job reads and writes (the graph settings are in `config`)."""

    input_patterns: tuple[str, ...]
    output_dir: str
    config: GraphConfig
    input_format: str = "wat"
    urls_file: Optional[str] = None
    edge_format: EdgeFormat = EdgeFormat()
    test_patterns: tuple[str, ...] = ()
    num_shards: int = 10
    link_types: Optional[tuple[str, ...]] = None
    fail_on_unreadable: bool = False
    wat_reader: str = "warcio"
    input_listing: Optional[str] = None
    listing_prefix: str = ""
    overwrite: bool = False
    allow_empty: bool = False

    def __post_init__(self) -> None:
        if self.input_format not in INPUT_FORMATS:
            raise ValueError(
                f"unknown input format {self.input_format!r}; expected one of {INPUT_FORMATS}"
            )
        if self.num_shards < 1:
            raise ValueError(f"num_shards must be >= 1, got {self.num_shards}")
        if self.input_format == "wat" and (self.urls_file or self.config.bipartite):
            raise ValueError("--urls and --bipartite apply to --input_format edges only")
        if not self.input_patterns and not self.input_listing:
            raise ValueError("give --input GLOB or --input_listing FILE")
        if self.edge_format.bipartite and not self.config.bipartite:
            raise ValueError(
                f"--edge_format {self.edge_format.name} is users x items: the config must be "
                "bipartite"
            )
        if (self.protocol == "given_split") != bool(self.test_patterns):
            raise ValueError(
                "--edge_format given_split needs --test_input, and --test_input needs given_split"
            )
        if self.protocol == "given_split" and (
            self.urls_file or self.config.min_links or self.config.tlds
        ):
            raise ValueError(
                "a given split is used as given: no --urls, --min_links, --tlds or --variant"
            )
        if self.config.validation_fraction and self.protocol != "given_split":
            raise ValueError("--validation_fraction: only with --edge_format given_split so far")

    @property
    def protocol(self) -> str:
        """`given_split` for a published train/test split, else `strong_generalization`."""
        return PROTOCOLS[self.edge_format.name == "given_split"]

    def stats_config(self) -> dict[str, Any]:
        """The settings recorded in stats.json."""
        out = self.config.to_dict()
        out.update(input_format=self.input_format, urls_file=self.urls_file, protocol=self.protocol)
        if self.input_format == "edges":
            out.update(
                edge_format=self.edge_format.name,
                header=self.edge_format.header,
                min_rating=self.edge_format.min_rating,
            )
            if self.edge_format.name == "csv":
                out["delimiter"] = self.edge_format.delimiter
        if self.link_types is not None:
            out["link_types"] = list(self.link_types)
        return out


def match_inputs(patterns: Sequence[str], flag: str = "--input") -> list[str]:
    """Every file the globs match (local, gs://, s3://), sorted; an error naming a glob that matches
    none, and the `flag` that gave it."""
    files: set[str] = set()
    for pattern in patterns:
        try:
            matched = FileSystems.match([pattern])[0].metadata_list
        except Exception as e:  # Beam raises BeamIOError or a filesystem error for bad paths
            raise FileNotFoundError(f"{flag} {pattern!r}: cannot list files ({e})") from None
        if not matched:
            raise FileNotFoundError(f"{flag} {pattern!r}: no file matches")
        files.update(m.path for m in matched)
    return sorted(files)


def input_files_of(spec: JobSpec) -> list[str]:
    """The files of the globs (each must match) plus those of the listing (taken as named: a crawl
    lists tens of thousands, and one that cannot be opened is counted as unreadable by the job)."""
    files = match_inputs(spec.input_patterns) if spec.input_patterns else []
    if spec.input_listing:
        from webgraph_pipeline.extract import expand_listing

        try:
            listed = expand_listing(spec.input_listing, spec.listing_prefix)
        except Exception as e:  # a missing or unreadable listing: one line naming it
            raise FileNotFoundError(
                f"--input_listing {spec.input_listing!r}: cannot read it ({e})"
            ) from None
        if not listed:
            raise FileNotFoundError(f"--input_listing {spec.input_listing!r}: lists no file")
        files += listed
    return files


def read_edges(p: beam.Pipeline, spec: JobSpec, input_files: Sequence[str]):
    """The labelled reading step of either input format -> (edge batches `(sources, targets)`,
    notes)."""
    if spec.input_format == "edges":
        return p | "ReadEdgeList" >> ReadEdgeList(
            input_files,
            spec.edge_format,
            urls_file=spec.urls_file,
            fail_on_unreadable=spec.fail_on_unreadable,
        )
    from webgraph_pipeline.extract import ExtractEdges

    kwargs: dict[str, Any] = {
        "fail_on_unreadable": spec.fail_on_unreadable,
        "wat_reader": spec.wat_reader,
    }
    if spec.link_types is not None:
        kwargs["link_types"] = spec.link_types
    return p | "ExtractEdges" >> ExtractEdges(list(input_files), **kwargs)


def read_given_split(p: beam.Pipeline, spec: JobSpec, input_files: Sequence[str]):
    """The train and test files of a given split -> ({'train', 'test'} edge batches of (user,
    item) names, notes)."""
    parts = {"train": input_files, "test": match_inputs(spec.test_patterns, "--test_input")}
    read = {
        name: p
        | f"ReadEdgeList_{name}"
        >> ReadEdgeList(files, spec.edge_format, fail_on_unreadable=spec.fail_on_unreadable)
        for name, files in parts.items()
    }
    notes = tuple(n for _, n in read.values()) | "SplitNotes" >> beam.Flatten()
    return {name: batches for name, (batches, _) in read.items()}, notes


def keep_notes(notes, directory: str) -> None:
    """Write the readers' notes into `directory` once the job has read every input
    (`counters.take_notes` reads them back)."""
    _ = (
        notes
        | "AllNotes" >> beam.combiners.ToList()
        | "WriteNotes" >> beam.Map(write_notes, directory)
    )


def build_pipeline(p: beam.Pipeline, spec: JobSpec, input_files: Sequence[str]):
    """Add the whole job to `p`: read -> BuildWebGraph (or BuildGivenSplit) -> WriteTfRecords;
    returns the written paths."""
    if spec.protocol == "given_split":
        parts, notes = read_given_split(p, spec, input_files)
        graph = parts | "BuildGivenSplit" >> BuildGivenSplit(
            spec.config.id_buckets,
            seed=spec.config.seed,
            validation_fraction=spec.config.validation_fraction,
        )
    else:
        batches, notes = read_edges(p, spec, input_files)
        graph = batches | "BuildWebGraph" >> BuildWebGraph(spec.config)
    keep_notes(notes, spec.output_dir)
    return graph | "WriteTfRecords" >> WriteTfRecords(
        spec.output_dir,
        spec.stats_config(),
        input_files,
        spec.num_shards,
        plot_title=("users x items" if spec.config.bipartite else f"WebGraph {spec.config.name}")
        + ": degree distribution",
    )


def is_loss(counter: str) -> bool:
    """Whether a counter counts input that did not make it into the graph (vs. what was kept)."""
    kind = counter.split(".", 1)[0]
    return kind.startswith("dropped_") or kind in ("damage", "unreadable_files")


def line_examples(entries: Sequence[str]) -> dict[str, list[str]]:
    """`reason<TAB>path:line` strings -> {reason: the first few `path:line`, in file and line
    order}."""
    out: dict[str, list[tuple[str, int]]] = {}
    for entry in entries:
        reason, where = entry.split("\t", 1)
        path, _, line = where.rpartition(":")
        out.setdefault(reason, []).append((path, int(line)))
    return {r: [f"{p}:{n}" for p, n in sorted(v)[:MAX_EXAMPLES]] for r, v in sorted(out.items())}


def empty_input_error(entries: Sequence[str]) -> EmptyInputError:
    """The error for the files that yielded no edge (`path<TAB>reason<TAB>lines` strings)."""
    path, reason, lines = entries[0].split("\t")
    more = f" (and {len(entries) - 1} more file(s))" if len(entries) > 1 else ""
    hint = "; is the --edge_format right?" if reason != "no line" else ""
    return EmptyInputError(
        f"{path}: no edge read; commonest reason {reason} ({lines} lines){hint}{more}"
    )


def finish_stats(
    output_dir: str,
    counters: dict[str, int],
    file_problems: list[dict[str, str]],
    examples: Sequence[str] = (),
    protocol: str = PROTOCOLS[0],
    hints: Sequence[str] = (),
) -> dict[str, Any]:
    """Add the counters and the input files not read whole to the stats.json the job wrote;
    returns the final stats."""
    stats = stats_json.read_stats(output_dir)
    stats["counters"] = dict(sorted(counters.items()))
    stats["dropped"] = {k: v for k, v in stats["counters"].items() if is_loss(k)}
    stats["unreadable_files"] = [p["file"] for p in file_problems if p["status"] == UNREADABLE]
    stats["partly_read_files"] = [p["file"] for p in file_problems if p["status"] == PARTLY_READ]
    stats["file_problems"] = file_problems
    stats["line_examples"] = line_examples(examples)
    stats["header_hints"] = [
        dict(zip(("where", "line", "why"), h.split("\t", 2))) for h in sorted(hints)
    ]
    stats["protocol"] = protocol
    stats["bipartite"] = bool(stats["config"].get("bipartite"))
    # the files are final: the dataset's identity
    stats.update(stats_json.fingerprint_dataset(output_dir))
    stats_json.write_stats(output_dir, stats)
    return stats


class EmptyDatasetError(RuntimeError):
    """The job ran but its dataset has nothing to train or evaluate on."""


class EmptyInputError(EmptyDatasetError):
    """An input file yielded no edge (the message names it and its commonest drop reason); not
    waived by --allow_empty: a file the format cannot read is a mistake, not a small dataset."""


def nothing_readable(stats: dict[str, Any]) -> Optional[EmptyInputError]:
    """The error for a job none of whose input files could be read (none when one could)."""
    bad = {p["file"]: p["reason"] for p in stats["file_problems"] if p["status"] == UNREADABLE}
    if not bad or not set(stats["input_files"]) <= set(bad):
        return None
    shown = ", ".join(f"{f} ({r})" for f, r in list(bad.items())[:3]) + (
        " ..." if len(bad) > 3 else ""
    )
    return EmptyInputError(f"no input file could be read: {shown}")


def emptiness(stats: dict[str, Any], config: GraphConfig) -> Optional[str]:
    """Why a finished dataset is empty (no nodes, no edges, no training rows, or no test rows
    although some were asked for), by the step that emptied it; None when it is not. Only a dataset
    that has a graph but no test row (a small input) may be wanted as it is: only then is
    --allow_empty the hint."""
    splits = stats.get("splits", {})
    if not stats.get("nodes"):
        what = "no node"
    elif not stats.get("edges"):
        what = "no edge"
    elif not splits.get("train"):
        what = "no training row"
    elif config.test_fraction > 0 and not splits.get("test"):
        return (
            f"the dataset has no test row: none of its {stats['nodes']:,} nodes was drawn for test "
            f"(--test_fraction {config.test_fraction:g}). Pass --allow_empty to keep it as it is"
        )
    else:
        return None
    return f"the dataset has {what}: {empty_because(stats, config)}"


def empty_because(stats: dict[str, Any], config: GraphConfig) -> str:
    """The filter that left no edge, with the counts that show it (and what to change), or the
    commonest drop when no filter did."""
    counters = stats.get("counters", {})
    tld_dropped = counters.get("dropped_edges.tld_filter", 0)
    degree_dropped = counters.get("dropped_edges.degree_filter", 0)
    after_tlds = degree_dropped + stats.get("edges", 0)  # distinct edges the TLD filter kept
    if config.tlds and tld_dropped and not after_tlds:
        tlds = ", ".join("." + t for t in config.tlds)
        return (
            f"no link joins two pages under {tlds}: the TLD filter dropped all {tld_dropped:,} "
            "distinct links "
            "(are the inputs from those TLDs?)"
        )
    if config.min_links and degree_dropped:
        kept = (
            f" among the {after_tlds:,} links the TLD filter kept"
            if config.tlds
            else f" among {after_tlds:,} distinct links"
        )
        return (
            f"no node has >= {config.min_links} in- and out-links{kept}: the degree filter dropped "
            "them all "
            f"(lower --min_links, or give more input)"
        )
    dropped = stats.get("dropped", {})
    reason = max(dropped, key=dropped.get) if dropped else None
    if reason:
        return f"nothing was left after the drops; commonest drop: {reason} ({dropped[reason]:,})"
    return "nothing was read (is the input empty?)"


def run_job(spec: JobSpec, beam_argv: Sequence[str] = ()) -> dict[str, Any]:
    """Run the job to completion with Beam options `beam_argv`; returns the final stats.

    The dataset is written into a staging directory and swapped into `spec.output_dir` only when the
    job succeeded and the dataset is not empty (or `allow_empty`): any failure leaves the previous
    dataset as it was.
    """
    target = output_dir.real_output(spec.output_dir)  # a symbolic link is written through
    output_dir.check_output(target, spec.overwrite)
    input_files = input_files_of(spec)
    output_dir.clean_stale_staging(target)
    staging = output_dir.staging_dir(target)
    disable_time_based_flush()  # Beam's local runner loses data with it (local_runner.py)
    try:
        start = time.time()
        options = PipelineOptions(list(beam_argv))
        p = beam.Pipeline(runner=runner_for(options), options=options)
        build_pipeline(p, dataclasses.replace(spec, output_dir=staging), input_files)
        result = p.run()
        result.wait_until_finish()
        notes = take_notes(staging)
        empty = notes.get(EMPTY_FILES)
        if empty:
            raise empty_input_error(empty)
        stats = finish_stats(
            staging,
            collect_counters(result),
            file_problems(notes.get(FILE_PROBLEMS, [])),
            notes.get(LINE_EXAMPLES, []),
            spec.protocol,
            notes.get(HEADER_HINTS, []),
        )
        # reported, not stored: it would break byte-identity
        stats["wall_seconds"] = round(time.time() - start, 1)
        unreadable = nothing_readable(stats)
        if unreadable:
            raise unreadable
        problem = None if spec.allow_empty else emptiness(stats, spec.config)
        if problem:
            raise EmptyDatasetError(problem)
    except BaseException:
        output_dir.discard(staging)
        raise
    output_dir.swap_in(staging, target)
    return stats
