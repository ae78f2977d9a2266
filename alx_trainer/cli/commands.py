"""Command lines `python -m alx_trainer train|eval|sweep|predict|export`; each returns an exit code.

`train --data DIR_OR_TFDS_NAME --model_dir DIR [options]` (`main_train`): every `TrainConfig`
field is a flag (see `--help`); `--config FILE` (JSON/YAML) sets them too, flags winning.
Multi-host (a TPU VM slice; every worker runs the same command, reads its own share of the shard
files, and `jax.distributed.initialize()` finds the coordinator by itself):

    gcloud compute tpus tpu-vm create alx --zone=us-central2-b --accelerator-type=v4-32 \
        --version=tpu-ubuntu2204-base
    gcloud compute tpus tpu-vm ssh alx --zone=us-central2-b --worker=all \
        --command="git clone REPO_URL alx && cd alx && pip install -e '.[tpu]'"
    gcloud compute tpus tpu-vm ssh alx --zone=us-central2-b --worker=all \
        --command="cd alx && python -m alx_trainer train --distributed \
                   --data gs://BUCKET/web_graph/de-dense --model_dir gs://BUCKET/alx/de-dense \
                   --dim 128 --epochs 16 --alpha 0.1 --reg 1.0"

Elsewhere (CPU or GPU hosts) give the coordinator explicitly: `--distributed
--coordinator_address HOST0:PORT --num_processes N --process_id I` on each process.

The other commands' flags come from their options dataclasses (`EvalOptions`, `SweepOptions`,
`PredictOptions`, `ExportOptions`, through `cli.common.parse_dataclass_args`, as `train`'s come
from `TrainConfig`); a thing has one flag name in every command (`--eval_k`, `--eval_rows`,
`--top_k`, `--out_dir`), the older spellings (`--k`, `--max_rows`, `--topk`, `--output`) are
accepted as aliases. Bad input gives one line on stderr naming what and where, and exit code 1
(2 for bad flags); a `--data` other than the model's training data (another
`dataset_fingerprint`) is refused. Results go to stdout; diagnostics (sweep progress) to stderr
through `logging` (`--log_level`). The heavy modules (JAX, orbax, matplotlib) are imported inside
the commands, after the flags are read: `--help` and a bad flag stay fast.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING, Sequence

from alx_trainer import phase_times
from alx_trainer.cli.common import (
    at_least,
    build_parser,
    fraction,
    grid,
    ks,
    option,
    parse_dataclass_args,
    parse_options,
    run,
    setup_logging,
    use_compile_cache,
)
from alx_trainer.config import LOG_LEVELS, ConfigError, TrainConfig
from webgraph_contract.command_line import one_line

if TYPE_CHECKING:
    from alx_trainer.data.dataset import Dataset
    from alx_trainer.evaluation.ranking import Ranker

log = logging.getLogger("alx_trainer.predict")


@dataclasses.dataclass(kw_only=True)
class CommandOptions:
    """Compilation cache and diagnostics (as `train`'s flags of the same names)."""

    compile_cache: str = option(
        "auto",
        "JAX's persistent compilation cache: 'auto' (this user's ~/.cache/alx/jax or "
        "$XDG_CACHE_HOME/alx/jax), a directory only this user can write, or 'off'.",
    )
    log_level: str = option("info", "Diagnostics on stderr from this level.", choices=LOG_LEVELS)


@dataclasses.dataclass(kw_only=True)
class EvalOptions(CommandOptions):
    """The flags of `eval`."""

    data: str = option(help="Dataset directory in the WebGraph contract, or a TFDS name.")
    tfds_data_dir: str = option("", "TFDS data_dir when --data is a TFDS name.")
    model_dir: str = option(help="Model directory written by `train`.")
    eval_k: list[int] = option(
        [20, 50], "Cut-offs K of Recall@K, comma-separated.", aliases=("--k",), parse=ks
    )
    ndcg_k: int = option(100, "Cut-off of NDCG (0: none).", parse=at_least(0))
    approx: bool = option(
        False,
        "Approximate top-k (lax.approx_max_k) per column block; its recall against exact is "
        "reported.",
    )
    recall_target: float = option(
        0.95, "Recall target of the approximate top-k, in (0, 1].", parse=fraction
    )
    batch_size: int = option(
        0,
        "Test rows per scoring batch (0: by backend; capped at the rows to score).",
        parse=at_least(0),
    )
    cols_per_block: int = option(
        0,
        "Columns scored per block (0: by backend); a device's score buffer is batch_size x "
        "cols_per_block.",
        parse=at_least(0),
    )
    progress: bool | None = option(
        None, "A progress bar with rows per second on stderr (default: when stderr is a terminal)."
    )
    eval_rows: int = option(
        0,
        "Evaluate only the first N rows of the split (0: all).",
        aliases=("--max_rows",),
        parse=at_least(0),
    )
    split: str = option(
        "test",
        "Rows to evaluate: test, or validation (a dataset directory made with "
        "--validation_fraction).",
        choices=("test", "validation"),
    )
    fold_in: bool = option(
        False,
        "Fold every row in from its fold-in items, also on a given split (whose users are scored "
        "from their trained rows by default).",
    )
    output: str = option("", "Also write the metrics as JSON to this file.")


@dataclasses.dataclass(kw_only=True)
class SweepOptions:
    """The sweep's own flags (every other flag is `train`'s)."""

    out_dir: str = option(
        help="Where sweep.csv/.json, the heatmap, best_config.json and final/ go."
    )
    dims: list[int] = option([], "Embedding dimensions d (default: --dim).", parse=ks)
    lambdas: tuple[float, ...] = option(
        (),
        "L2 regularization values, comma-separated (default: the paper's).",
        parse=grid,
    )
    alphas: tuple[float, ...] = option(
        (),
        "Unobserved weights, comma-separated (default: the paper's).",
        parse=grid,
    )
    nus: tuple[float, ...] = option(
        (),
        "Frequency-scaling exponents nu (--reg_exponent; default: --reg_exponent).",
        parse=grid,
    )
    metric: str = option(
        "",
        "Validation metric that picks the best point (default: recall_gt@20, hits / |gt| as the "
        "published Gowalla tables' Recall@20).",
    )
    keep_models: bool = option(False, "Keep every point's model directory.")
    no_final: bool = option(False, "Stop after the sweep (no training on the full data).")


@dataclasses.dataclass(kw_only=True)
class PredictOptions(CommandOptions):
    """The flags of `predict`."""

    data: str = option(help="Dataset directory (vocabulary and known links).")
    model_dir: str = option(help="Model directory written by `train`.")
    node: list[str] = option(
        [],
        "Names or URLs from the vocabulary, or ids: `id:N`, or a bare number N where no name of "
        "the vocabulary is a number (in a dataset of numeric names a number is a name).",
        nargs="*",
        positional=True,
    )
    links: list[str] = option(
        [],
        "A new page's known outlinks (names or URLs of the column vocabulary, or column ids, as "
        "nodes are given): its predicted outlinks, folded in as `eval` folds in a test row.",
        nargs="+",
        metavar="URL",
    )
    name: str = option(
        "",
        "With --links: the page's name (its URL, left out of the predictions when the "
        "vocabulary holds it).",
    )
    rows: str = option(
        "",
        "New pages, one per line `NAME<TAB>URL URL ...` ('-': stdin), answered as JSON lines.",
        metavar="FILE",
    )
    json: bool = option(False, "With --links: one JSON line, as --rows answers.")
    top_k: int = option(
        10, "How many predictions per node.", aliases=("--k",), parse=at_least(1), metavar="K"
    )
    batch_size: int = option(
        0,
        "Pages per scoring batch of --links/--rows (0: by backend, as `eval`; capped at the "
        "pages given).",
        parse=at_least(0),
    )
    neighbors: bool = option(False, "Nearest neighbours by cosine instead of outlinks.")
    table: str = option("col", "Table of --neighbors.", choices=("row", "col"))


@dataclasses.dataclass(kw_only=True)
class ExportOptions(CommandOptions):
    """The flags of `export`."""

    model_dir: str = option(help="Model directory written by `train`.")
    out_dir: str = option(help="Output directory.", aliases=("--output",))
    data: str = option(
        "",
        "Dataset directory whose vocabulary names the ids (optional; --top_k needs it: it holds "
        "the rows and their known links).",
    )
    top_k: int = option(
        0,
        "Write the top K columns (K >= 1) of every row with known links (topk.tfr-*, topk.json) "
        "instead of the tables.",
        aliases=("--topk",),
        parse=at_least(1),
        metavar="K",
    )
    num_shards: int = option(
        0,
        "TFRecord shards per table (0: 1), or of --top_k (0: one per 2^20 rows).",
        parse=at_least(0),
    )
    batch_size: int = option(
        0,
        "Rows per scoring batch of --top_k (0: by backend, as `eval`; capped at the rows).",
        parse=at_least(0),
    )


def main_eval(argv: Sequence[str]) -> int:
    """Recall@K / NDCG of a trained model and of the popularity baseline on a test split."""
    _, args = parse_options(EvalOptions, argv, "alx_trainer eval", main_eval.__doc__)
    setup_logging(args.log_level)

    def body() -> int:
        phase_times.command_started()
        with phase_times.timed("imports", is_startup=True):
            use_compile_cache(args.compile_cache)
            # the evaluation stack (JAX, orbax) takes seconds to import: not for --help or a bad
            # flag (it leaves JAX's backend unstarted)
            from alx_trainer.evaluation.evaluate import Ranking, evaluate_model_dir, format_metrics
            from alx_trainer.execution import start_scoring_cpu_devices  # (as above)

        with phase_times.timed("backend", is_startup=True):
            start_scoring_cpu_devices()

        ranking = Ranking(
            ks=args.eval_k,
            ndcg_k=args.ndcg_k or None,
            approx=args.approx,
            recall_target=args.recall_target,
            rows_per_batch=args.batch_size or None,
            cols_per_block=args.cols_per_block or None,
            progress=args.progress,
        )
        result = evaluate_model_dir(
            args.model_dir,
            args.data,
            ranking,
            tfds_data_dir=args.tfds_data_dir,
            split=args.split,
            fold_in=args.fold_in,
            max_rows=args.eval_rows or None,
        )
        print(format_metrics(result))
        if args.output:
            with open(args.output, "w", encoding="utf-8") as f:
                json.dump(result, f, indent=2, sort_keys=True)
        _log_phases()
        return 0

    return run("eval", body)


def _log_phases() -> None:
    """A scoring command's phases line (`phase_times.summary`), then its phases forgotten."""
    logging.getLogger("alx_trainer").info("%s", phase_times.summary())
    phase_times.reset()


def main_sweep(argv: Sequence[str]) -> int:
    """Tune (d, alpha, lambda, nu, epochs) by validation Recall@20, then train the best point on
    the full training data and report test; every other flag is `train`'s."""
    p = build_parser(
        SweepOptions,
        prog="alx_trainer sweep",
        description=main_sweep.__doc__,
        config_file=False,
        epilog="Remaining flags (--data, --epochs, --solver, ...) configure each training run; "
        "see `train --help`. --data must hold the validation splits (the pipeline's "
        "--validation_fraction).",
    )
    known, rest = p.parse_known_args(list(argv))
    args = SweepOptions(**vars(known))

    def body() -> int:
        config = parse_dataclass_args(
            TrainConfig, rest, prog="alx_trainer sweep", also_known=p.known_flags()
        )
        _check_sweep_flags(args, config, rest)
        config = dataclasses.replace(config, model_dir=args.out_dir).validate()
        # the training stack (JAX, orbax, matplotlib) takes seconds to import: not for --help
        from alx_trainer import loading
        from alx_trainer.data.dataset import check_outside_data  # (as above)
        from alx_trainer.execution import start_cpu_devices  # (as above)
        from alx_trainer.tools import sweep  # (as above)
        from alx_trainer.tools.output_swap import check_out_dir  # (as above)

        check_out_dir(args.out_dir)
        check_outside_data(config.data, args.out_dir, "--out_dir")
        metric = args.metric or sweep.DEFAULT_METRIC
        # before any training
        sweep.check_metric(metric, config)
        # the dataset checked whole once, before anything is written; its fingerprint keys the rows
        dataset = loading.open_checked(config.data, config.tfds_data_dir)
        dims = args.dims or [config.dim]
        nus = args.nus or (config.reg_exponent,)
        setup_logging(config.log_level)
        use_compile_cache(config.compile_cache)
        # before JAX starts: per-core CPU devices where the solver allows (as `train`)
        start_cpu_devices(config)
        rows = sweep.run_sweep(
            config,
            args.out_dir,
            dims,
            args.alphas or sweep.PAPER_ALPHAS,
            args.lambdas or sweep.PAPER_LAMBDAS,
            nus,
            keep_models=args.keep_models,
            fingerprint=dataset.fingerprint,
            dataset=dataset,
        )
        print(sweep.format_table(rows, metric))
        final = None
        if not args.no_final:
            final = sweep.final_run(
                config,
                sweep.best_row(rows, metric),
                args.out_dir,
                ks=config.recall_ks(),
                ndcg_k=config.ndcg_k or 20,
                fingerprint=dataset.fingerprint,
            )
            print(sweep.format_final(final))
        paths = sweep.write_outputs(rows, args.out_dir, config, metric, final)
        print("wrote " + " ".join(paths.values()))
        return 0

    return run("sweep", body)


def _check_sweep_flags(args: SweepOptions, config: TrainConfig, rest: Sequence[str]) -> None:
    """A ConfigError (exit 2) for `train` flags a sweep cannot honour: `--model_dir` (each point
    trains into `--out_dir`), `--dim` beside `--dims`, `--eval_every 0` (no evaluation to
    compare)."""
    if config.model_dir:
        raise ConfigError(
            f"--model_dir {config.model_dir}: a sweep trains into --out_dir (models/, final/); "
            "leave --model_dir out"
        )
    if args.dims and any(a == "--dim" or a.startswith("--dim=") for a in rest):
        raise ConfigError(
            "--dim and --dims: give the dimensions to sweep with --dims only (--dims 64 for one)"
        )
    if config.eval_every == 0:
        raise ConfigError(
            "--eval_every 0 evaluates no point, leaving the sweep nothing to compare; give N >= 1 "
            f"(every N epochs and after the last; --eval_every {config.epochs}: the last only)"
        )


def main_predict(argv: Sequence[str]) -> int:
    """Top-K predicted outlinks of a URL or id, or its nearest neighbours (--neighbors); of a page
    not in the vocabulary, known by its outlinks (--links); of many such pages (--rows)."""
    p, args = parse_options(PredictOptions, argv, "alx_trainer predict", main_predict.__doc__)
    setup_logging(args.log_level)
    if sum(map(bool, (args.node, args.links, args.rows))) != 1:
        p.error("give nodes of the vocabulary, or --links URL ..., or --rows FILE (one of them)")
    if (args.links or args.rows) and args.neighbors:
        p.error("--neighbors takes nodes of the vocabulary, not --links or --rows")
    if (args.json or args.name) and not args.links:
        p.error("--json and --name go with --links")

    def body() -> int:
        use_compile_cache(args.compile_cache)
        # the scoring stack (JAX, orbax) takes seconds to import: not for --help or a bad flag
        from alx_trainer import loading  # (as above)
        from alx_trainer.evaluation.ranking import Ranker  # (as above)
        from alx_trainer.tools.predict import (  # (as above)
            format_predictions,
            nearest_neighbors,
            neighbor_ranker,
            predict_outlinks,
        )

        # pages to score: one, the lines of a --rows file (at most), or unknown (stdin)
        pages = 1 if args.links else _rows_lines(args.rows) if args.rows not in ("", "-") else None
        model, dataset = loading.load(args.model_dir, args.data)
        if args.links or args.rows:
            ranker = Ranker(
                model.col_table, model.config, batch_size=args.batch_size or None, rows=pages
            )
            return _predict_new(args, dataset, ranker)
        # one table placed on the devices for every node, each ranked as one row
        if args.neighbors:
            ranker = neighbor_ranker(model, args.table)
        else:
            ranker = Ranker(model.col_table, model.config, rows=1)
        # every node answered before any is printed: a bad one prints nothing
        answers = []
        for node in args.node:
            if args.neighbors:
                preds = nearest_neighbors(
                    model, node, args.top_k, data_dir=args.data, table=args.table, ranker=ranker
                )
                title = f"nearest neighbours of {node} ({args.table} table):"
            else:
                preds = predict_outlinks(
                    model,
                    args.data,
                    node,
                    args.top_k,
                    ranker=ranker,
                    shared=not dataset.bipartite,
                )
                title = f"predicted outlinks of {node}:"
            answers.append(format_predictions(title, preds))
        print("\n".join(answers))
        return 0

    return run("predict", body)


def _rows_lines(path: str) -> int:
    """The lines of a `--rows` file (at most its pages); a one-line error when it is none."""
    if os.path.isdir(path):
        raise IsADirectoryError(
            f"--rows {path}: is a directory; give a file of `NAME<TAB>URL URL ...` lines"
        )
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"--rows {path}: no such file; give a file of `NAME<TAB>URL URL ...` lines"
        )
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def _predict_new(args: PredictOptions, dataset: Dataset, ranker: Ranker) -> int:
    """`predict --links` or `--rows`: answers on stdout, what was not found on stderr."""
    # imported with the scoring stack by `main_predict`'s body (JAX): not for --help
    from alx_trainer.tools.new_pages import (
        ColumnLookup,
        Report,
        answer,
        json_line,
        parse_rows,
        predict_pages,
    )

    # (as above)
    from alx_trainer.tools.predict import Prediction, format_predictions, vocabulary_names

    names = vocabulary_names(args.data)
    lookup = ColumnLookup({name: i for i, name in names.items()}, ranker.num_cols)
    shared, report = not dataset.bipartite, Report()
    if args.links:
        page = lookup.page(args.name, args.links, report, shared=shared)
        found = [(url, *lookup.column(url)) for url in args.links]
        missing = [(url, reason) for url, col, reason in found if col is None]
        if missing:
            shown = ", ".join(f"{url} ({reason})" for url, reason in missing[:5])
            more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            log.warning(
                "%d of %d links not found, left out: %s%s",
                len(missing),
                len(args.links),
                shown,
                more,
            )
        _, scores, ids = next(predict_pages(ranker, [page], args.top_k, report))
        result = answer(page, scores, ids, names)
        if args.json:
            print(json_line(result))
        else:
            preds = [
                Prediction(p["id"], p["url"] or str(p["id"]), p["score"])
                for p in result["predictions"]
            ]
            title = (
                f"predicted outlinks of {args.name or 'the page'} "
                f"(from {len(page.known)} known links):"
            )
            print(format_predictions(title, preds))
            if "reason" in result:
                print(f"no predictions: {result['reason']}")
        return 0
    with contextlib.ExitStack() as stack:
        lines = sys.stdin.buffer if args.rows == "-" else stack.enter_context(open(args.rows, "rb"))
        pages = parse_rows(lines, lookup, report, shared)
        log.debug("predict --rows %s: %s", args.rows, ranker.describe(args.top_k))
        for page, scores, ids in predict_pages(ranker, pages, args.top_k, report):
            sys.stdout.write(json_line(answer(page, scores, ids, names)) + "\n")
    summary = report.summary(f"--rows {args.rows}")
    if not report.pages and report.bad_lines:
        raise ValueError(f"{summary}; expected lines `NAME<TAB>URL URL ...`")
    if not report.pages:
        raise ValueError(
            f"--rows {args.rows}: no page to answer (no line but blank ones); expected lines "
            "`NAME<TAB>URL URL ...`"
        )
    log.info("%s", summary)
    return 0


def main_export(argv: Sequence[str]) -> int:
    """Write a model's tables with their ids (and URLs) as NumPy .npz/.npy and TFRecord, or with
    --top_k K the top K columns of every row as TFRecord."""
    p, args = parse_options(ExportOptions, argv, "alx_trainer export", main_export.__doc__)
    setup_logging(args.log_level)
    if args.top_k and not args.data:
        p.error("--top_k needs --data: the dataset whose rows and known links are ranked")

    def body() -> int:
        phase_times.command_started()
        with phase_times.timed("imports", is_startup=True):
            use_compile_cache(args.compile_cache)
            # the export stack (JAX, orbax) takes seconds to import: not for --help or a bad flag
            import jax

            from alx_trainer import loading  # (as above)
            from alx_trainer.tools.output_swap import check_out_dir  # (as above)
            from alx_trainer.tools.predict import export_tables  # (as above)
            from alx_trainer.tools.topk_export import export_topk  # (as above)

        with phase_times.timed("backend", is_startup=True):
            jax.devices()
        check_out_dir(args.out_dir)
        with phase_times.timed("load", "model and data"):
            model, dataset = loading.load(args.model_dir, args.data)
        # SIGTERM as Ctrl-C: the staging directory removed, the previous export left as it was
        previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
        try:
            if args.top_k:
                paths = export_topk(
                    model,
                    dataset,
                    args.out_dir,
                    args.top_k,
                    num_shards=args.num_shards,
                    batch_size=args.batch_size or None,
                    model_dir=args.model_dir,
                )
            else:
                with phase_times.timed("write"):
                    paths = export_tables(
                        model,
                        args.out_dir,
                        data_dir=args.data or None,
                        num_shards=args.num_shards or 1,
                        model_dir=args.model_dir,
                        shared=dataset is not None and not dataset.bipartite,
                    )
        finally:
            signal.signal(signal.SIGTERM, previous)
        for path in paths:
            print(path)
        _log_phases()
        return 0

    return run("export", body)


# The train command


def _init_distributed(config: TrainConfig) -> None:
    """`jax.distributed.initialize` (explicit coordinator for CPU/GPU clusters, auto on a TPU
    slice)."""
    # JAX takes a second to import: not for --help or a bad flag
    import jax

    # CPU devices of several processes need gloo for cross-process collectives; TPU/GPU ignore it.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")

    kwargs: dict = {"initialization_timeout": config.distributed_timeout}
    if config.process_id >= 0 or config.coordinator_address:
        kwargs.update(
            coordinator_address=config.coordinator_address or None,
            num_processes=config.num_processes or None,
            process_id=config.process_id if config.process_id >= 0 else None,
        )
    where = config.coordinator_address or "the auto-detected coordinator"
    check = (
        "check that every process has its own --process_id (0 to --num_processes - 1, none "
        "twice), the same --num_processes, and --coordinator_address of process 0 (host:port "
        "reachable from all)"
    )

    try:
        jax.distributed.initialize(**kwargs)
    # JAX's Python-level errors: a bad value, a refusal
    except (ValueError, RuntimeError) as e:
        raise ConnectionError(
            f"jax.distributed: could not join the run at {where}; {check} ({_short(e)})"
        ) from None


def _short(error: object) -> str:
    """The first line of a JAX runtime status or error, cut to 200 characters."""
    return one_line(str(error)).split("RPC:")[0].strip()[:200]


def main_train(argv: list[str] | None = None) -> int:
    """Parse flags, train, print a one-line summary; 0 on success, 2 for a bad flag or value, 1 for
    bad data or a failed run (one line on stderr; `--debug` or WEBGRAPH_DEBUG=1 adds the
    traceback)."""
    return run("train", lambda: _main_train(argv))


def _main_train(argv: list[str] | None) -> int:
    config = parse_dataclass_args(TrainConfig, argv, prog="alx_trainer train").validate()
    setup_logging(config.log_level)
    # not for --help or a bad flag (as below)
    from alx_trainer import phase_times

    # the seconds before the command's imports, from the process's start
    phase_times.command_started()
    # the training stack (orbax, ...) takes seconds to import: not for --help or a bad flag
    with phase_times.timed("imports", is_startup=True):
        use_compile_cache(config.compile_cache)
        import jax  # (as above)

        from alx_trainer import execution  # (as above)
        from alx_trainer.callbacks import Stopped  # (as above)
        from alx_trainer.train import train  # (as above)

    with phase_times.timed("backend", is_startup=True):
        if config.distributed:
            _init_distributed(config)
        else:
            # a small problem (stats.json's count) runs on one CPU device (`execution`)
            execution.start_cpu_devices(config, execution.stats_links(config.data))
        jax.devices()
    try:
        # the summary needs the metrics only
        model = train(config, tables=False)
    # SIGTERM in a multi-process run: all stopped after the same epoch
    except Stopped as e:
        print(f"alx_trainer train: {e}", file=sys.stderr)
        return 128 + signal.SIGTERM
    finally:
        phase_times.reset()
    if not model.epochs_trained:
        print(
            f"nothing to train: {config.model_dir} is at epoch {model.epoch} already (--epochs "
            f"{config.epochs}); it and its config.json are as they were"
        )
        return 0
    last = model.metrics[-1] if model.metrics else {}
    shown = [k for k in last if k == "loss" or (k.startswith("recall@") and "/" not in k)]
    summary = ", ".join(
        f"{k} {last[k]:.6g}" if k == "loss" else f"{k} {last[k]:.4f}" for k in shown
    )
    where = f"{jax.device_count()} device(s) in {jax.process_count()} process(es)"
    this_run = model.metrics[len(model.metrics) - model.epochs_trained :]
    compiles = sum(r.get("compiles", 0) for r in this_run)
    spent = f", {compiles} program(s) compiled" if compiles else ", nothing compiled"
    print(
        f"trained {model.epoch} epoch(s) on {where} into {config.model_dir}{spent}"
        + (f": {summary}" if summary else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main_train())
