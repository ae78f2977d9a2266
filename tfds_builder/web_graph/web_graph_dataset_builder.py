"""The `web_graph` TFDS dataset: Common Crawl link graphs for link prediction (ALX paper, section
5).

The public surface is that of TFDS's own `web_graph` 1.0.0: configs `sparse` (default), `dense`,
`de-sparse`, `de-dense`, `in-sparse`, `in-dense`; features `row_tag` (int64), `col_tag` and
`gt_tag` (int64 sequences); splits `train`, `train_t`, `test`. Custom configs
(`WebGraphConfig(name=..., tlds=..., min_links=..., seed=..., test_fraction=...,
holdout_fraction=...)`) build other graphs from raw WAT input.

The source directory comes from `--manual_dir` (or the builder argument `source_dir`); what it
holds decides how the dataset is built (see `sources.py`): a `python -m webgraph_pipeline` output
directory, files in the official gs://gresearch/web_graph/ layout, or WAT files, from which the
builder runs the WebGraph Beam pipeline itself. Every source is read with Apache Beam, so
`--beam_pipeline_options` picks the runner (DirectRunner here, Dataflow at scale).

The class is not put in TFDS's name registry, where TFDS's own `web_graph` lives: `tfds build
tfds_builder/web_graph` loads it from its folder, Python code uses `WebGraph(...)` directly, and a
built dataset loads with `tfds.load('web_graph/<config>:1.0.0', data_dir=...)` (see README.md).

Errors: a build's user errors (a bad config, a missing or unusable `--manual_dir`, an empty
result) are `sources.BuildError`s with a one-line message. TFDS gives a builder no say in how
`tfds build` reports an exception (absl prints the traceback), so when this module is loaded by the
`tfds` command line it installs a `sys.excepthook` that prints such an error as that one line
(`one_line_errors`; exit status 2 for a bad config, 1 otherwise) and leaves every other exception
to the usual traceback; `WEBGRAPH_DEBUG=1` shows the traceback of all (with the same exit status).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import textwrap
from typing import Any, Optional, Sequence

import numpy as np
import tensorflow_datasets as tfds

# Absolute, not relative: Beam pickles the step functions by module name, and Dataflow workers
# import `tfds_builder` (installed with setup.py), whatever name `tfds build` loaded this file
# under.
from tfds_builder.web_graph import sources
from webgraph_contract import layout, stats_json
from webgraph_contract.command_line import DEBUG_ENV, debugging
from webgraph_pipeline.graph_config import VARIANTS, GraphConfig
from webgraph_pipeline.local_runner import disable_time_based_flush
from webgraph_pipeline.tlds import parse_tlds

HOMEPAGE = "https://arxiv.org/abs/2112.02194"
OFFICIAL_ROOT = "gs://gresearch/web_graph/"

# Paper Table 1: official folder under gs://gresearch/web_graph/ and published size.
_NAMED = {
    "sparse": ("web_graph_min_10", "around 30B edges and 365.4M nodes"),
    "dense": ("web_graph_min_50", "around 22B edges and 136.5M nodes"),
    "de-sparse": ("web_graph_tld_de_min_10", "around 1.19B edges and 19.7M nodes"),
    "de-dense": ("web_graph_tld_de_min_50", "around 0.82B edges and 5.7M nodes"),
    "in-sparse": ("web_graph_tld_in_min_10", "around 0.15B edges and 1.5M nodes"),
    "in-dense": ("web_graph_tld_in_min_50", "around 0.12B edges and 0.5M nodes"),
}


_BASE_FIELDS = {f.name for f in dataclasses.fields(tfds.core.BuilderConfig)}
_INTEGER_FIELDS = ("min_links", "degree_passes", "seed")
_FRACTION_FIELDS = ("test_fraction", "holdout_fraction")


@dataclasses.dataclass(eq=False)
class WebGraphConfig(tfds.core.BuilderConfig):
    """A WebGraph variant: the graph settings of `webgraph_pipeline.graph_config.GraphConfig`.

    tlds: keep edges whose both ends are in one of these top-level domains (empty: all).
    min_links: K of the degree filter (at least K in-links and K out-links; 0 disables it).
    degree_passes: how often the degree filter runs (the paper: once).
    seed: seed of the hashes that choose test rows and held-out links.
    test_fraction: share of source rows in `test`.
    holdout_fraction: share of each test row's outlinks held out in `gt_tag`.
    subfolder: the variant's folder in the official layout (named configs only).
    """

    tlds: Sequence[str] = ()
    min_links: int = 0
    degree_passes: int = 1
    seed: int = 0
    test_fraction: float = 0.1
    holdout_fraction: float = 0.25
    subfolder: str = ""

    def __post_init__(self) -> None:
        """Type-check the values (a JSON `--config` gives any JSON type), normalize the TLDs (a
        comma string or a list) and validate every setting with the pipeline's own checks."""
        where = f"web_graph config {self.name!r}"
        for name in _INTEGER_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise sources.ConfigError(f"{where}: {name} must be an integer, got {value!r}")
        for name in _FRACTION_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(
                value, (int, float, np.integer, np.floating)
            ):
                raise sources.ConfigError(f"{where}: {name} must be a number, got {value!r}")
        try:
            self.tlds = parse_tlds(self.tlds, where="tlds")
            self.graph_config()
        except ValueError as e:
            raise sources.ConfigError(f"{where}: {e}") from None

    def graph_config(self) -> GraphConfig:
        """The pipeline's config for this variant."""
        return GraphConfig(
            name=self.name,
            tlds=tuple(self.tlds),
            min_links=int(self.min_links),
            degree_passes=int(self.degree_passes),
            seed=int(self.seed),
            test_fraction=float(self.test_fraction),
            holdout_fraction=float(self.holdout_fraction),
        )

    def graph_settings(self) -> dict[str, Any]:
        """The settings that decide the graph, as stats.json records them under `config`."""
        return {
            "tlds": list(self.tlds),
            "min_links": int(self.min_links),
            "degree_passes": int(self.degree_passes),
            "seed": int(self.seed),
            "test_fraction": float(self.test_fraction),
            "holdout_fraction": float(self.holdout_fraction),
        }


def _named_config(name: str) -> WebGraphConfig:
    variant = VARIANTS[name]
    subfolder, size = _NAMED[name]
    tld_text = f" restricted to .{variant.tlds[0]} pages," if variant.tlds else ""
    return WebGraphConfig(
        name=name,
        description=(
            f"WebGraph-{name}:{tld_text} nodes with at least {variant.min_links} in- and out-links "
            f"(published version: {size})."
        ),
        tlds=variant.tlds,
        min_links=variant.min_links,
        degree_passes=variant.degree_passes,
        seed=variant.seed,
        test_fraction=variant.test_fraction,
        holdout_fraction=variant.holdout_fraction,
        subfolder=subfolder,
    )


class Builder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """DatasetBuilder for `web_graph`, from pipeline output, official files or raw WAT files."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {
        "1.0.0": (
            "Same configs, features and splits as TFDS's web_graph 1.0.0; built from our pipeline."
        ),
    }
    BUILDER_CONFIGS = [_named_config(name) for name in _NAMED]
    DEFAULT_CONFIG_NAME = "sparse"
    MANUAL_DOWNLOAD_INSTRUCTIONS = textwrap.dedent(
        f"""\
        Pass one directory as --manual_dir (or source_dir=... in Python). It may hold:
          * the output of `python -m webgraph_pipeline --input GLOB --output DIR` (stats.json and
            train.tfr-*, train.transpose.tfr-*, test.tfr-* shards);
          * the official files, as published under {OFFICIAL_ROOT} (a variant's folder such as
            web_graph_tld_de_min_50/, or the root holding those folders);
          * Common Crawl WAT files (*.wat, *.wat.gz): the WebGraph Beam pipeline then runs inside
            the build.
        """
    )

    def __init__(self, *, source_dir: str | os.PathLike | None = None, **kwargs: Any):
        """source_dir: the source directory; overrides `--manual_dir` when given."""
        self._source_dir = os.fspath(source_dir) if source_dir is not None else None
        self._source: sources.Source | None = None
        self._stats: dict[str, Any] | None = None
        super().__init__(**kwargs)

    def _info(self) -> tfds.core.DatasetInfo:
        """The dataset's info; its description is README.md's first paragraph (`tfds build` prints
        the info when done, and the rest of README.md documents the builder, not the data)."""
        metadata = self.get_metadata()
        return tfds.core.DatasetInfo(
            builder=self,
            description=metadata.description.strip().split("\n\n")[0]
            + "\n(More: tfds_builder/web_graph/README.md.)",
            citation=metadata.citation,
            features=tfds.features.FeaturesDict(
                {
                    "row_tag": np.int64,
                    "col_tag": tfds.features.Sequence(np.int64),
                    "gt_tag": tfds.features.Sequence(np.int64),
                }
            ),
            supervised_keys=None,
            homepage=HOMEPAGE,
            metadata=tfds.core.MetadataDict(),
        )

    def _split_generators(self, dl_manager: tfds.download.DownloadManager, pipeline):
        # before `tfds build` runs the pipeline: see webgraph_pipeline/local_runner.py
        disable_time_based_flush()
        root = self._source_dir or self._manual_dir(dl_manager)
        config: WebGraphConfig = self.builder_config
        source = sources.resolve(root, config.subfolder)
        self._source, self._stats = source, None
        if source.kind == sources.WAT:
            return self._graph_from_wat(pipeline, source.wat_files)
        if source.kind == sources.PIPELINE:
            self._stats = stats_json.read_stats(source.path)
            if "splits" in self._stats:
                sources.check_splits_not_empty(
                    self._stats["splits"],
                    os.path.join(source.path, stats_json.STATS_FILE),
                    sources.stats_advice(self._stats),
                )
            mismatches = sources.config_mismatches(self._stats, config.graph_settings())
            if mismatches:
                raise sources.BadSourceError(
                    f"{os.path.join(source.path, stats_json.STATS_FILE)}: built with other "
                    "settings "
                    f"than config {config.name!r}: {'; '.join(mismatches)}"
                )
        return {
            split: self._generate_examples(pipeline, split, files)
            for split, files in source.split_files.items()
        }

    @staticmethod
    def _manual_dir(dl_manager: tfds.download.DownloadManager) -> str:
        """`--manual_dir`; a SourceNotFoundError when it is missing or empty (TFDS's own error is an
        AssertionError with the instructions appended)."""
        try:
            return os.fspath(dl_manager.manual_dir)
        except AssertionError as e:
            what = str(e).splitlines()[0].split(" Create it")[0].rstrip(".")
            raise sources.SourceNotFoundError(
                f"{what}: give --manual_dir=DIR holding a webgraph_pipeline output, official "
                "shards or WAT files"
            ) from None

    def _generate_examples(self, pipeline, split: str, files: Sequence[str]):
        """The examples of one split, read from its TFRecord shards (pipeline or official
        source)."""
        beam = tfds.core.lazy_imports.apache_beam
        return (
            pipeline
            | f"ListShards[{split}]" >> beam.Create(list(files))
            | f"SpreadShards[{split}]" >> beam.Reshuffle()
            | f"ReadShards[{split}]" >> beam.FlatMap(sources.read_shard)
        )

    def _graph_from_wat(self, pipeline, wat_files: Sequence[str]):
        """The WebGraph job's reading and graph steps on the WAT files; its splits become the
        examples.

        The steps and the stats are those of `python -m webgraph_pipeline`
        (`webgraph_pipeline.pipeline`):
        the job's summary becomes stats.json in the dataset directory, and
        `_process_pipeline_result` adds the Beam counters once the job has run.
        """
        beam = tfds.core.lazy_imports.apache_beam
        from webgraph_pipeline.columnar import block_rows
        from webgraph_pipeline.graph import BuildWebGraph
        from webgraph_pipeline.pipeline import JobSpec, keep_notes, read_edges

        data_dir = os.fspath(self.data_dir)
        spec = JobSpec(
            input_patterns=tuple(wat_files),
            output_dir=data_dir,
            config=self.builder_config.graph_config(),
        )
        batches, notes = read_edges(pipeline, spec, wat_files)
        keep_notes(notes, data_dir)
        graph = batches | "BuildWebGraph" >> BuildWebGraph(spec.config)
        links_read = (
            batches
            | "CountLinks" >> beam.Map(lambda batch: len(batch[0]))
            | "SumLinks" >> beam.CombineGlobally(sum)
        )
        # The examples wait for stats.json, whose writing checks that no split is empty: so an
        # empty split fails with that reason, before TFDS's writer can fail on it.
        stats_written = graph["summary"] | "WriteStats" >> beam.Map(
            sources.write_job_stats,
            data_dir,
            spec.stats_config(),
            list(wat_files),
            links_read=beam.pvalue.AsSingleton(links_read),
        )
        after_stats = beam.pvalue.AsSingleton(stats_written)
        return {
            split: graph[split]
            | f"Rows[{split}]" >> beam.FlatMap(block_rows)  # BuildWebGraph emits rows in blocks
            | f"ToExamples[{split}]" >> beam.Map(sources.example_after, after_stats)
            for split in layout.SPLIT_PREFIXES
        }

    def _process_pipeline_result(self, pipeline_result) -> None:
        """After the Beam job: keep the source and the pipeline's stats with the dataset."""
        source = self._source
        if source.kind == sources.WAT:
            from webgraph_pipeline.counters import collect_counters, take_notes
            from webgraph_pipeline.file_accounting import FILE_PROBLEMS, file_problems
            from webgraph_pipeline.pipeline import finish_stats

            data_dir = os.fspath(self.data_dir)
            notes = take_notes(data_dir)
            self._stats = finish_stats(
                data_dir,
                collect_counters(pipeline_result),
                file_problems(notes.get(FILE_PROBLEMS, [])),
            )
        self.info.metadata["source"] = {"kind": source.kind, "path": source.path}
        if self._stats is not None:
            self.info.metadata["stats"] = self._stats
            if source.kind != sources.WAT:  # finish_stats has written it already
                stats_json.write_stats(os.fspath(self.data_dir), self._stats)


WebGraph = Builder

_TFDS_CLI = "tensorflow_datasets.scripts.cli.main"


def build_error(error: BaseException) -> Optional[tuple[str, int]]:
    """(the line to print, exit status) for a known user error of a build, found in the exception or
    its causes; None for any other exception. Beam re-raises a step's error with the step's name
    appended (`... [while running 'WriteStats']`), which the line leaves out."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, sources.BuildError):
            line = str(error).strip().splitlines()[0].split(" [while running ")[0]
            return line, 2 if isinstance(error, sources.ConfigError) else 1
        if isinstance(error, TypeError) and "WebGraphConfig.__init__()" in str(error):
            # An unknown key in a JSON --config: TFDS passes the keys to the dataclass as they are.
            ours = [
                f.name for f in dataclasses.fields(WebGraphConfig) if f.name not in _BASE_FIELDS
            ]
            known = ", ".join(["name", "description"] + [n for n in ours if n != "subfolder"])
            wrong = str(error).split("__init__() ", 1)[1]
            return f"web_graph config: {wrong}; the keys are {known}", 2
        error = error.__cause__ or error.__context__
    return None


def one_line_errors() -> None:
    """Under the `tfds` command line, print a build's user errors as one line (see the module
    doc)."""
    if not _under_tfds_cli() or getattr(sys.excepthook, "web_graph", False):
        return
    previous, debug = sys.excepthook, debugging()
    if not debug:  # Beam logs a failing step's exception, traceback and all, before re-raising it
        logging.getLogger("apache_beam.runners.common").addFilter(
            lambda record: not (record.exc_info and build_error(record.exc_info[1]))
        )

    def hook(kind, error, tb):
        found = build_error(error)
        if found is None or debug:  # the traceback (the exit status still says which error)
            previous(kind, error, tb)
        if found is None:
            return
        line, status = found
        if not debug:
            print(
                f"tfds build web_graph: error: {line} ({DEBUG_ENV}=1 shows the traceback)",
                file=sys.stderr,
            )
        if status != 1:  # an excepthook cannot choose the status: the interpreter exits 1 after it
            sys.stderr.flush()
            sys.stdout.flush()
            os._exit(status)

    hook.web_graph = True
    sys.excepthook = hook


def quiet_cli() -> None:
    """Under the `tfds` command line, what TFDS, absl and Beam log at INFO and WARNING (Beam's
    type-hint notices, TFDS's custom-config and missing-dataset_info notices) is held back, and the
    progress bar shows only on a terminal; `WEBGRAPH_DEBUG=1` keeps them all. (The `tfds` command
    sets its own logging up before it loads this module, so this is the first point the builder can
    act.)"""
    if not _under_tfds_cli() or debugging():
        return
    from absl import logging as absl_logging

    from webgraph_contract.quiet_logs import LIBRARY_LOGGERS

    # the job's own warnings (an unreadable input file) stay
    absl_logging.set_verbosity(absl_logging.WARNING)
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    if not sys.stderr.isatty():
        tfds.disable_progress_bar()


def _under_tfds_cli() -> bool:
    main = sys.modules.get("__main__")
    return (
        _TFDS_CLI in sys.modules
        or getattr(getattr(main, "__spec__", None), "name", "") == _TFDS_CLI
    )


one_line_errors()
quiet_cli()
