"""Command lines `python -m alx_trainer eval|sweep|predict|export`; each returns an exit code.

Bad input gives one line on stderr naming what and where, and exit code 1 (2 for bad flags); a
`--data` other than the model's training data (another `dataset_fingerprint`) is refused.
Results go to stdout; diagnostics (sweep progress) to stderr through `logging` (`--log_level`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import sys
from typing import Sequence

from alx_trainer.cli.common import (
    add_compile_cache,
    add_log_level,
    at_least,
    fraction,
    ks,
    run,
    setup_logging,
    use_compile_cache,
)
from alx_trainer.cli.dataclass_flags import parse_dataclass_args
from alx_trainer.config import TrainConfig
from alx_trainer.data import integrity
from alx_trainer.data.dataset import Dataset, open_dataset
from alx_trainer.evaluation.evaluate import Ranking, evaluate_model_dir, format_metrics
from alx_trainer.execution import start_cpu_devices, start_scoring_cpu_devices
from alx_trainer.model import Model, load_model
from alx_trainer.tools.new_pages import (
    ColumnLookup,
    Report,
    answer,
    json_line,
    parse_rows,
    predict_pages,
)
from alx_trainer.tools.predict import (
    Prediction,
    export_tables,
    format_predictions,
    nearest_neighbors,
    predict_outlinks,
    vocabulary_names,
)
from alx_trainer.tools.ranking import Ranker
from alx_trainer.tools.sweep import (
    DEFAULT_METRIC,
    PAPER_ALPHAS,
    PAPER_LAMBDAS,
    best_row,
    check_metric,
    final_run,
    format_final,
    format_table,
    parse_grid,
    run_sweep,
    write_outputs,
)
from alx_trainer.tools.topk_export import export_topk
from webgraph_contract import fileio
from webgraph_contract.command_line import OneLineParser

log = logging.getLogger("alx_trainer.predict")


def _model(model_dir: str, data: str = "", tfds_data_dir: str = "") -> tuple[Model, Dataset | None]:
    """The model of `model_dir` and the opened `data` (if given), refused unless the model was
    trained
    on it (same `dataset_fingerprint`; a warning when either side predates fingerprints)."""
    if not fileio.isdir(model_dir):
        raise FileNotFoundError(
            f"{model_dir}: model directory not found; give the --model_dir of a `train` run"
        )
    model = load_model(model_dir)
    if not data:
        return model, None
    dataset = open_dataset(data, tfds_data_dir)
    integrity.check_same_data(
        model_dir, model.dataset_fingerprint, model.config.data, data, dataset.fingerprint
    )
    return model, dataset


def main_eval(argv: Sequence[str]) -> int:
    """Recall@K / NDCG of a trained model and of the popularity baseline on a test split."""
    p = OneLineParser(prog="alx_trainer eval", description=main_eval.__doc__)
    p.add_argument(
        "--data", required=True, help="Dataset directory in the WebGraph contract, or a TFDS name."
    )
    p.add_argument("--tfds_data_dir", default="", help="TFDS data_dir when --data is a TFDS name.")
    p.add_argument("--model_dir", required=True, help="Model directory written by `train`.")
    p.add_argument(
        "--k", type=ks, default=[20, 50], help="Cut-offs K of Recall@K, comma-separated."
    )
    p.add_argument("--ndcg_k", type=at_least(0), default=100, help="Cut-off of NDCG (0: none).")
    p.add_argument(
        "--approx",
        action="store_true",
        help="Approximate top-k (lax.approx_max_k) per column block; its recall against exact is "
        "reported.",
    )
    p.add_argument(
        "--recall_target",
        type=fraction,
        default=0.95,
        help="Recall target of the approximate top-k, in (0, 1].",
    )
    p.add_argument(
        "--batch_size",
        type=at_least(0),
        default=0,
        help="Test rows per scoring batch (0: by backend; capped at the rows to score).",
    )
    p.add_argument(
        "--cols_per_block",
        type=at_least(0),
        default=0,
        help="Columns scored per block (0: by backend); a device's score buffer is batch_size x "
        "cols_per_block.",
    )
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="A progress bar with rows per second on stderr (default: when stderr is a terminal).",
    )
    p.add_argument(
        "--max_rows",
        type=at_least(0),
        default=0,
        help="Evaluate only the first N test rows (0: all).",
    )
    p.add_argument(
        "--split",
        choices=("test", "validation"),
        default="test",
        help="Rows to evaluate: test, or validation (a dataset directory made with "
        "--validation_fraction).",
    )
    p.add_argument(
        "--fold_in",
        action="store_true",
        help="Fold every row in from its fold-in items, also on a given split (whose users are "
        "scored from "
        "their trained rows by default).",
    )
    p.add_argument("--output", default="", help="Also write the metrics as JSON to this file.")
    add_compile_cache(p)
    add_log_level(p)
    args = p.parse_args(list(argv))
    setup_logging(args.log_level)

    def body() -> int:
        start_scoring_cpu_devices()
        use_compile_cache(args.compile_cache)
        ranking = Ranking(
            ks=args.k,
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
            max_rows=args.max_rows or None,
        )
        print(format_metrics(result))
        if args.output:
            with open(args.output, "w", encoding="utf-8") as f:
                json.dump(result, f, indent=2, sort_keys=True)
        return 0

    return run("eval", body)


def _grid(text: str) -> tuple[float, ...]:
    """An argparse type: a sweep grid (`sweep.parse_grid`)."""
    try:
        return parse_grid(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def main_sweep(argv: Sequence[str]) -> int:
    """Tune (d, alpha, lambda, nu, epochs) by validation Recall@20, then train the best point on the
    full
    training data and report test; every other flag is `train`'s."""
    p = OneLineParser(
        prog="alx_trainer sweep",
        description=main_sweep.__doc__,
        epilog="Remaining flags (--data, --epochs, --solver, ...) configure each training run; see "
        "`train --help`. "
        "--data must hold the validation splits (the pipeline's --validation_fraction).",
    )
    p.add_argument(
        "--out_dir",
        required=True,
        help="Where sweep.csv/.json, the heatmap, best_config.json and final/ go.",
    )
    p.add_argument("--dims", type=ks, default=[], help="Embedding dimensions d (default: --dim).")
    p.add_argument(
        "--lambdas",
        type=_grid,
        default=PAPER_LAMBDAS,
        help="L2 regularization values, comma-separated (default: the paper's).",
    )
    p.add_argument(
        "--alphas",
        type=_grid,
        default=PAPER_ALPHAS,
        help="Unobserved weights, comma-separated (default: the paper's).",
    )
    p.add_argument(
        "--nus",
        type=_grid,
        default=(),
        help="Frequency-scaling exponents nu (--reg_exponent; default: --reg_exponent).",
    )
    p.add_argument(
        "--metric", default=DEFAULT_METRIC, help="Validation metric that picks the best point."
    )
    p.add_argument("--keep_models", action="store_true", help="Keep every point's model directory.")
    p.add_argument(
        "--no_final",
        action="store_true",
        help="Stop after the sweep (no training on the full data).",
    )
    args, rest = p.parse_known_args(list(argv))

    def body() -> int:
        config = parse_dataclass_args(
            TrainConfig, rest, prog="alx_trainer sweep", also_known=p.known_flags()
        )
        config = dataclasses.replace(config, model_dir=config.model_dir or args.out_dir).validate()
        check_metric(args.metric, config)  # before any training
        dims = args.dims or [config.dim]
        nus = args.nus or (config.reg_exponent,)
        setup_logging(config.log_level)
        use_compile_cache(config.compile_cache)
        # before JAX starts: per-core CPU devices where the solver allows (as `train`)
        start_cpu_devices(config)
        rows = run_sweep(config, args.out_dir, dims, args.alphas, args.lambdas, nus)
        print(format_table(rows, args.metric))
        final = None
        if not args.no_final:
            final = final_run(
                config,
                best_row(rows, args.metric),
                args.out_dir,
                ks=config.recall_ks(),
                ndcg_k=config.ndcg_k or 20,
            )
            print(format_final(final))
        paths = write_outputs(rows, args.out_dir, config, args.metric, final)
        print("wrote " + " ".join(paths.values()))
        return 0

    return run("sweep", body)


def main_predict(argv: Sequence[str]) -> int:
    """Top-K predicted outlinks of a URL or id, or its nearest neighbours (--neighbors); of a page
    not in the vocabulary, known by its outlinks (--links); of many such pages (--rows)."""
    p = OneLineParser(prog="alx_trainer predict", description=main_predict.__doc__)
    p.add_argument("--data", required=True, help="Dataset directory (vocabulary and known links).")
    p.add_argument("--model_dir", required=True, help="Model directory written by `train`.")
    p.add_argument(
        "node",
        nargs="*",
        help="Names or URLs from the vocabulary, or ids: `id:N`, or a bare number N where no "
        "name of the vocabulary is a number (in a dataset of numeric names a number is a name).",
    )
    p.add_argument(
        "--links",
        nargs="+",
        metavar="URL",
        default=[],
        help="A new page's known outlinks (names or URLs of the column vocabulary, or column "
        "ids, as nodes are given): its predicted outlinks, folded in as `eval` folds in a test "
        "row.",
    )
    p.add_argument(
        "--name",
        default="",
        help="With --links: the page's name (its URL, left out of the predictions "
        "when the vocabulary holds it).",
    )
    p.add_argument(
        "--rows",
        metavar="FILE",
        default="",
        help="New pages, one per line `NAME<TAB>URL URL ...` ('-': stdin), answered as JSON lines.",
    )
    p.add_argument(
        "--json", action="store_true", help="With --links: one JSON line, as --rows answers."
    )
    p.add_argument("--k", type=at_least(1), default=10, help="How many predictions per node.")
    p.add_argument(
        "--batch_size",
        type=at_least(0),
        default=0,
        help="Pages per scoring batch of --links/--rows (0: by backend, as `eval`; capped at the "
        "pages given).",
    )
    p.add_argument(
        "--neighbors", action="store_true", help="Nearest neighbours by cosine instead of outlinks."
    )
    p.add_argument("--table", choices=("row", "col"), default="col", help="Table of --neighbors.")
    add_compile_cache(p)
    add_log_level(p)
    args = p.parse_args(list(argv))
    setup_logging(args.log_level)
    if sum(map(bool, (args.node, args.links, args.rows))) != 1:
        p.error("give nodes of the vocabulary, or --links URL ..., or --rows FILE (one of them)")
    if (args.links or args.rows) and args.neighbors:
        p.error("--neighbors takes nodes of the vocabulary, not --links or --rows")
    if (args.json or args.name) and not args.links:
        p.error("--json and --name go with --links")

    def body() -> int:
        use_compile_cache(args.compile_cache)
        # pages to score: one, the lines of a --rows file (at most), or unknown (stdin)
        pages = 1 if args.links else _rows_lines(args.rows) if args.rows not in ("", "-") else None
        model, dataset = _model(args.model_dir, args.data)
        if args.links or args.rows:
            ranker = Ranker(
                model.col_table, model.config, batch_size=args.batch_size or None, rows=pages
            )
            return _predict_new(args, dataset, ranker)
        answers = []  # every node answered before any is printed: a bad one prints nothing
        for node in args.node:
            if args.neighbors:
                preds = nearest_neighbors(model, node, args.k, data_dir=args.data, table=args.table)
                title = f"nearest neighbours of {node} ({args.table} table):"
            else:
                preds = predict_outlinks(model, args.data, node, args.k)
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


def _predict_new(args: argparse.Namespace, dataset: Dataset, ranker: Ranker) -> int:
    """`predict --links` or `--rows`: answers on stdout, what was not found on stderr."""
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
        _, scores, ids = next(predict_pages(ranker, [page], args.k, report))
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
        log.debug("predict --rows %s: %s", args.rows, ranker.describe(args.k))
        for page, scores, ids in predict_pages(ranker, pages, args.k, report):
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
    --topk K the top K columns of every row as TFRecord."""
    p = OneLineParser(prog="alx_trainer export", description=main_export.__doc__)
    p.add_argument("--model_dir", required=True, help="Model directory written by `train`.")
    p.add_argument("--output", required=True, help="Output directory.")
    p.add_argument(
        "--data",
        default="",
        help="Dataset directory whose vocabulary names the ids (optional; --topk "
        "needs it: it holds the rows and their known links).",
    )
    p.add_argument(
        "--topk",
        type=at_least(0),
        default=0,
        metavar="K",
        help="Write the top K columns of every row with known links (topk.tfr-*, "
        "topk.json) instead of the tables.",
    )
    p.add_argument(
        "--num_shards",
        type=at_least(0),
        default=0,
        help="TFRecord shards per table (0: 1), or of --topk (0: one per 2^20 rows).",
    )
    p.add_argument(
        "--batch_size",
        type=at_least(0),
        default=0,
        help="Rows per scoring batch of --topk (0: by backend, as `eval`; capped at the rows).",
    )
    add_compile_cache(p)
    add_log_level(p)
    args = p.parse_args(list(argv))
    setup_logging(args.log_level)
    if args.topk and not args.data:
        p.error("--topk needs --data: the dataset whose rows and known links are ranked")

    def body() -> int:
        use_compile_cache(args.compile_cache)
        if fileio.exists(args.output) and not fileio.isdir(args.output):
            raise FileExistsError(
                f"--output {args.output} is a file, not a directory; give a directory to export "
                "into"
            )
        model, dataset = _model(args.model_dir, args.data)
        if args.topk:
            paths = export_topk(
                model,
                dataset,
                args.output,
                args.topk,
                num_shards=args.num_shards,
                batch_size=args.batch_size or None,
            )
        else:
            paths = export_tables(
                model, args.output, data_dir=args.data or None, num_shards=args.num_shards or 1
            )
        for path in paths:
            print(path)
        return 0

    return run("export", body)
