"""Command line of the WebGraph job: `python -m webgraph_pipeline --input GLOB --output DIR ...`."""

from __future__ import annotations

import argparse
import logging
import sys
import traceback
from typing import Any, Optional, Sequence

from webgraph_contract.command_line import (
    DEBUG_ENV,
    OneLineParser,
    debugging,
    one_line,
    unknown_flags_message,
)
from webgraph_pipeline.beam_quiet import beam_args
from webgraph_pipeline.edge_formats import BIPARTITE_FORMATS, FORMATS, EdgeFormat
from webgraph_pipeline.file_accounting import PARTLY_READ, UNREADABLE, problem_line
from webgraph_pipeline.graph_config import VARIANTS, GraphConfig, get_variant
from webgraph_pipeline.output_dir import OutputError, check_output
from webgraph_pipeline.pipeline import (
    INPUT_FORMATS,
    EmptyDatasetError,
    JobSpec,
    input_files_of,
    match_inputs,
    run_job,
)
from webgraph_pipeline.tlds import parse_tlds
from webgraph_pipeline.wat import WAT_READERS, check_reader

EPILOG = """\
Any other flag is an Apache Beam pipeline option (e.g. --runner, --direct_num_workers).

Examples:
  # the demo: real Common Crawl WAT, no filter
  python -m webgraph_pipeline --input 'data/commoncrawl/*.wat' --output /tmp/cc --allow_empty
  # a paper variant on WAT files, 2 local worker processes
  python -m webgraph_pipeline --input 'wat/*.warc.wat.gz' --output /tmp/de_dense \\
      --variant de-dense --direct_running_mode multi_processing --direct_num_workers 2
  # the real hollins.edu crawl (edge list of ids + URL list, each with a header line)
  python -m webgraph_pipeline --edge_format pairs --header --input data/hollins/edges.txt \\
      --urls data/hollins/urls.txt --output /tmp/hollins --min_links 2
  # interaction data (MovieLens users x items), ratings >= 4, users and items with >= 5 links
  python -m webgraph_pipeline --edge_format movielens --input data/ml-100k/u.data \\
      --min_rating 4 --min_links 5 --output /tmp/ml100k
  # a published train/test split (LightGCN's Gowalla), used as given
  python -m webgraph_pipeline --edge_format given_split --input gowalla/train.txt \\
      --test_input gowalla/test.txt --output /tmp/gowalla
  # Google Cloud Dataflow (pip install 'webgraph-alx[dataflow]'; run from the repository root)
  python -m webgraph_pipeline --input 'gs://BUCKET/wat/*.warc.wat.gz' \\
      --output gs://BUCKET/webgraph/de-dense --variant de-dense --num_shards 200 \\
      --runner DataflowRunner --project PROJECT --region us-central1 \\
      --temp_location gs://BUCKET/tmp --staging_location gs://BUCKET/staging \\
      --setup_file ./setup.py \\
      --machine_type n2-highmem-4 --max_num_workers 100 --disk_size_gb 100 \\
      --experiments use_runner_v2
Common Crawl's own bucket can be read directly: --input 's3://commoncrawl/crawl-data/CC-MAIN-2021-25/segments/*/wat/*.warc.wat.gz'
(needs apache-beam[aws] and credentials), or copy the WAT files to gs:// first.
"""


PROG = "webgraph_pipeline"  # errors: `webgraph_pipeline: error: ...`


def build_parser() -> OneLineParser:
    p = OneLineParser(
        prog="python -m webgraph_pipeline",
        error_prog=PROG,
        description=(
            "Build a WebGraph link-prediction dataset (TFRecords in the public web_graph layout, "
            "vocabulary shards, stats.json, a degree plot) from Common Crawl WAT files or edge "
            "lists."
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--input",
        action="append",
        default=[],
        help="input file glob (local, gs://, s3://); repeat for several globs",
    )
    p.add_argument(
        "--input_listing",
        default=None,
        help="wat: a listing of input files, one path per line, plain or gzip "
        "(e.g. Common Crawl's wat.paths.gz); with --listing_prefix",
    )
    p.add_argument(
        "--listing_prefix",
        default="",
        help="wat: prefix of the listed paths, e.g. s3://commoncrawl/ or a mirror's gs:// folder",
    )
    p.add_argument(
        "--output",
        required=True,
        help="output directory (local or gs://); the dataset is staged beside it and swapped in "
        "only when the job succeeds, so a failed run leaves the previous dataset intact",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="write into an --output that holds files other than a WebGraph dataset "
        "(they are left in place)",
    )
    p.add_argument(
        "--allow_empty",
        action="store_true",
        help="keep a dataset with no node, no edge or no test row instead of failing",
    )
    p.add_argument(
        "--debug",
        action="store_true",
        help=f"show the full traceback of an error (or set {DEBUG_ENV}=1)",
    )
    p.add_argument(
        "--brief",
        action="store_true",
        help="print the counters in a few lines: dropped_* summed by what was dropped, the rest "
        "inline (stats.json keeps every counter)",
    )
    p.add_argument(
        "--verbose",
        action="store_true",
        help="also show what Beam, TensorFlow and the worker processes log (warnings and info)",
    )
    p.add_argument(
        "--input_format",
        choices=INPUT_FORMATS,
        default=None,
        help="wat: Common Crawl WAT files (default); edges: text edge lists (implied by "
        "--edge_format)",
    )
    p.add_argument(
        "--variant",
        choices=sorted(VARIANTS),
        help="a paper Table 1 variant (sets --tlds and --min_links)",
    )
    p.add_argument(
        "--tlds",
        default=None,
        help="comma-separated TLDs both endpoints must have, e.g. de,in (any case; IDN TLDs such "
        "as рф are IDNA-encoded; each must be a TLD of the Public Suffix List)",
    )
    p.add_argument(
        "--min_links", type=int, default=None, help="K: keep nodes with >= K in- and out-links"
    )
    p.add_argument(
        "--degree_passes", type=int, default=1, help="passes of the degree filter (paper: 1)"
    )
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help=f"seed of the test-row and held-out hashes (default {GraphConfig.seed}); given_split: "
        "of the validation split",
    )
    p.add_argument(
        "--test_fraction",
        type=float,
        default=None,
        help=f"share of source rows in test (default {GraphConfig.test_fraction}; not with "
        "given_split)",
    )
    p.add_argument(
        "--holdout_fraction",
        type=float,
        default=None,
        help="share of each test row's outlinks held out as gt_tag (default "
        f"{GraphConfig.holdout_fraction}; not with given_split)",
    )
    p.add_argument(
        "--validation_fraction",
        type=float,
        default=0.0,
        help="given_split: share of each user's training items held out as a validation split "
        "for tuning (validation.train, validation.train.transpose, validation); 0: none",
    )
    p.add_argument(
        "--num_shards", type=int, default=10, help="shards per split and of the vocabulary"
    )
    p.add_argument(
        "--id_buckets",
        type=int,
        default=GraphConfig.id_buckets,
        help="hash buckets used to number the nodes (part of what decides the ids)",
    )
    p.add_argument(
        "--link_types",
        default=None,
        help="wat: comma-separated link paths to keep (default: A@/href,AREA@/href)",
    )
    p.add_argument(
        "--wat_reader",
        choices=WAT_READERS,
        default="warcio",
        help="wat: WARC record reader; fastwarc (pip install 'webgraph-alx[fast]') is about 2x "
        "faster",
    )
    p.add_argument(
        "--fail_on_unreadable",
        action="store_true",
        help="stop the job at the first input file that cannot be read whole (unreadable: "
        "not found, empty, bad gzip, not WARC, not WAT; or partly read: damaged, truncated) "
        "instead of counting it, naming it in stats.json and going on",
    )
    p.add_argument("--urls", default=None, help="edges: `id url` list naming the integer ids")
    p.add_argument(
        "--edge_format",
        choices=FORMATS,
        default=None,
        help="edges: the line layout (default pairs): pairs `src dst [ignored...]`; adjacency "
        "`src dst1 dst2 ...`; movielens `user item rating time` (u.data, or ratings.dat with ::); "
        "csv `src,dst[,rating...]` (see --delimiter); given_split `user item item ...` "
        "(a published split: --input TRAIN --test_input TEST). Ids: any token without whitespace",
    )
    p.add_argument(
        "--header",
        action="store_true",
        help="edges: the first line of every input file (and of --urls) is a header; skip it",
    )
    p.add_argument(
        "--delimiter",
        default=None,
        help="edges, csv: the one-character field delimiter (default ,)",
    )
    p.add_argument(
        "--min_rating",
        type=float,
        default=None,
        help="edges, movielens or csv: keep lines whose rating (3rd field) is >= this",
    )
    p.add_argument(
        "--test_input",
        action="append",
        default=[],
        help="edges, given_split: the test file glob of the published split",
    )
    p.add_argument(
        "--bipartite",
        action="store_true",
        help="edges: interaction data (users x items): separate row and column ids "
        f"(implied by --edge_format {' and '.join(BIPARTITE_FORMATS)})",
    )
    return p


def unknown_beam_args(beam_argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """The arguments that neither this CLI nor any Beam pipeline option takes (flags or strays,
    such as the extra file names of a glob the shell expanded), and Beam's flags."""
    from apache_beam.options import pipeline_options

    # The parser Beam itself builds in PipelineOptions.get_all_options, from every options class.
    parser = pipeline_options._BeamArgumentParser(allow_abbrev=False)
    classes = {str(c): c for c in pipeline_options.PipelineOptions.__subclasses__()}
    for cls in classes.values():
        cls._add_argparse_args(parser)  # noqa: SLF001
    _, unknown = parser.parse_known_args(list(beam_argv))
    return unknown, [s for action in parser._actions for s in action.option_strings]  # noqa: SLF001


def check_meaningful(args: argparse.Namespace) -> None:
    """Refuse a flag that the other flags make meaningless (it would be ignored): ValueError."""
    name = args.edge_format or "pairs"
    if args.delimiter is not None and name != "csv":
        raise ValueError(f"--delimiter applies to --edge_format csv only, not {name}")
    if name == "given_split":
        unused = [f for f in ("test_fraction", "holdout_fraction") if getattr(args, f) is not None]
        if args.seed is not None and not args.validation_fraction:
            unused.append("seed")
        if unused:
            flags = ", ".join(f"--{f}" for f in unused)
            raise ValueError(
                f"{flags}: a given split is used as given (its test split is the --test_input "
                "file; --seed seeds --validation_fraction only)"
            )


def parse_args(argv: Optional[Sequence[str]] = None) -> tuple[JobSpec, list[str]]:
    """argv -> (the job, Beam's own arguments).

    Raises ValueError (bad flags) or FileNotFoundError (no input) with a one-line message.
    """
    parser = build_parser()
    args, beam_argv = parser.parse_known_args(argv)
    unknown, beam_flags = unknown_beam_args(beam_argv)
    if unknown:  # the nearest of our flags and Beam's
        raise ValueError(unknown_flags_message(unknown, parser.known_flags() + beam_flags))
    if args.variant and (args.tlds is not None or args.min_links is not None):
        raise ValueError(
            "--variant sets --tlds and --min_links; give either --variant or those flags"
        )
    base = (
        get_variant(args.variant)
        if args.variant
        else GraphConfig(tlds=parse_tlds(args.tlds or ""), min_links=args.min_links or 0)
    )
    input_format = args.input_format or ("edges" if args.edge_format else "wat")
    if input_format == "wat" and args.edge_format:
        raise ValueError("--edge_format applies to --input_format edges only")
    check_meaningful(args)
    edge_format = EdgeFormat(
        args.edge_format or "pairs", args.delimiter or ",", args.header, args.min_rating
    )
    # the split flags given; the others keep the base config's values
    given = {
        f: getattr(args, f)
        for f in ("seed", "test_fraction", "holdout_fraction")
        if getattr(args, f) is not None
    }
    config = base.replace(
        **given,
        degree_passes=args.degree_passes,
        validation_fraction=args.validation_fraction,
        bipartite=args.bipartite or edge_format.bipartite,
        id_buckets=args.id_buckets,
    )
    link_types = (
        tuple(t.strip() for t in args.link_types.split(",") if t.strip())
        if args.link_types
        else None
    )
    spec = JobSpec(
        input_patterns=tuple(args.input),
        output_dir=args.output,
        config=config,
        input_format=input_format,
        urls_file=args.urls,
        edge_format=edge_format,
        test_patterns=tuple(args.test_input),
        num_shards=args.num_shards,
        link_types=link_types,
        fail_on_unreadable=args.fail_on_unreadable,
        wat_reader=args.wat_reader,
        input_listing=args.input_listing,
        listing_prefix=args.listing_prefix,
        overwrite=args.overwrite,
        allow_empty=args.allow_empty,
    )
    check_reader(spec.wat_reader)
    check_output(spec.output_dir, spec.overwrite)
    input_files_of(spec)
    if spec.test_patterns:
        match_inputs(spec.test_patterns, "--test_input")
    if spec.urls_file:
        match_inputs([spec.urls_file], "--urls")
    return spec, beam_argv


def counter_lines(counters: dict[str, int], brief: bool = False) -> list[str]:
    """The counters as a table, one a line; `brief`: the `dropped_<what>.<reason>` ones summed by
    what was dropped (with the number of reasons), the others inline, wrapped."""
    if not counters or not brief:
        width = max((len(k) for k in counters), default=0)
        return ["counters (webgraph namespace):"] + (
            [f"  {k:<{width}}  {v:>12,}" for k, v in counters.items()] or ["  (none)"]
        )
    dropped: dict[str, list[int]] = {}
    for name, value in counters.items():
        if name.startswith("dropped_"):
            dropped.setdefault(name.split(".", 1)[0].removeprefix("dropped_"), []).append(value)
    others = [f"{k} {v:,}" for k, v in counters.items() if not k.startswith("dropped_")]
    lines = _wrapped("counters:", others) if others else []
    if dropped:
        lines += _wrapped(
            "dropped (each reason in stats.json):",
            [
                f"{what} {sum(v):,} ({len(v)} reason{'s' if len(v) > 1 else ''})"
                for what, v in sorted(dropped.items())
            ],
        )
    return lines


def _wrapped(head: str, items: list[str], width: int = 100) -> list[str]:
    """`head` and the comma-separated items on lines of at most `width` characters (an item is never
    split)."""
    lines = [head]
    for i, item in enumerate(items):
        piece = item + ("," if i < len(items) - 1 else "")
        if len(lines[-1]) + 1 + len(piece) > width and lines[-1] != head:
            lines.append(" ")
        lines[-1] += " " + piece
    return lines


def format_report(stats: dict[str, Any], brief: bool = False) -> str:
    """The end-of-job summary: counters (by reason, or `brief`ly), then the graph's (or the users x
    items matrix's) figures."""
    lines = counter_lines(stats["counters"], brief)
    splits = stats["splits"]
    rows = (
        f"rows: train {splits['train']:,} train_t {splits['train_t']:,} test {splits['test']:,}  "
        f"test links kept {stats['test_links']['col_tag']:,} held {stats['test_links']['gt_tag']:,}"
    )
    if stats.get("bipartite") and "num_rows" in stats:
        lines.append(
            f"users {stats['num_rows']:,} x items {stats['num_cols']:,}  pairs {stats['edges']:,}  "
            f"{rows}" + f"  ({stats.get('protocol', 'strong_generalization')})"
        )
    else:
        lines.append(f"nodes {stats['nodes']:,}  edges {stats['edges']:,}  {rows}")
    for reason, where in stats["line_examples"].items():
        lines.append(f"first lines of {reason}: {', '.join(where)}")
    for status, title in ((UNREADABLE, "UNREADABLE"), (PARTLY_READ, "PARTLY READ (damaged)")):
        problems = [p for p in stats["file_problems"] if p["status"] == status]
        if problems:
            lines.append(f"{title} input files ({len(problems)}):")
            lines += [f"  {problem_line(p)}" for p in problems]
    counters = stats["counters"]  # every file read, a given split's test files included
    files = counters.get("files.matched") or sum(
        counters.get(f"files.{k}", 0) for k in ("read", "partly_read", "unreadable")
    )
    files = files or len(stats["input_files"])
    lines.append(f"input files {files}  wall time {stats['wall_seconds']} s")
    return "\n".join(lines)


def header_warning(hint: dict[str, str]) -> str:
    """The one-line warning for a first line that looks like a header (stats.json
    `header_hints`)."""
    return (
        f"{PROG}: warning: {hint['where']}: {hint['line']!r} looks like a header ({hint['why']}) "
        "and "
        "was not skipped; --header skips the first line of every input file and of --urls"
    )


def run(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    """Parse a command line like `python -m webgraph_pipeline` takes, and run the job; its stats."""
    spec, beam_argv = parse_args(argv)
    return run_job(spec, beam_argv)


BEAM_STEP_LOGGER = (
    "apache_beam.runners.common"  # logs a failing step's exception, traceback included
)


class _NoTracebacks(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.exc_info is None


def quiet_step_tracebacks() -> None:
    """Drop the record Beam logs, traceback and all, when a step raises: the command line reports
    the error in one line (and --debug shows the traceback)."""
    logger = logging.getLogger(BEAM_STEP_LOGGER)
    if not any(isinstance(f, _NoTracebacks) for f in logger.filters):
        logger.addFilter(_NoTracebacks())


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point; returns the exit status: 2 for bad flags, inputs or output, 1 for a failed or
    empty job."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or debugging()
    try:
        spec, beam_argv = parse_args(argv)
    except (ValueError, FileNotFoundError, ImportError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    if not debug:
        quiet_step_tracebacks()
    try:
        stats = run_job(spec, beam_args(beam_argv, verbose="--verbose" in argv))
    except OutputError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except EmptyDatasetError as e:
        print(f"{PROG}: error: {e}; {spec.output_dir} is unchanged", file=sys.stderr)
        return 1
    except Exception as e:  # any failure of the job itself: one line, the previous dataset kept
        if debug:
            traceback.print_exc()
        hint = "" if debug else f" (--debug or {DEBUG_ENV}=1 shows the traceback)"
        print(
            f"{PROG}: error: the job failed: {one_line(e)}; {spec.output_dir} is unchanged{hint}",
            file=sys.stderr,
        )
        return 1
    for hint in stats.get("header_hints", []):
        print(header_warning(hint), file=sys.stderr)
    print(format_report(stats, brief="--brief" in argv))
    print(f"wrote {spec.output_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
