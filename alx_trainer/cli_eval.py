"""Command lines `python -m alx_trainer eval|sweep|predict|export|split`; each returns an exit code.

Bad input gives one line on stderr naming what and where, and exit code 1 (2 for bad flags).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Callable, Sequence

EXPECTED_ERRORS = (ValueError, FileNotFoundError, KeyError, OSError)


def _run(prog: str, body: Callable[[], int]) -> int:
    try:
        return body()
    except EXPECTED_ERRORS as e:
        message = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"alx_trainer {prog}: error: {message}", file=sys.stderr)
        return 1


def _ks(text: str) -> list[int]:
    try:
        ks = [int(k) for k in text.split(",") if k.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not ks or min(ks) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return ks


def _model(model_dir: str):
    from alx_trainer.train import load_model

    if not os.path.isdir(model_dir):
        raise FileNotFoundError(f"{model_dir}: model directory not found")
    return load_model(model_dir)


def _tfds_eval_data(name: str, tfds_data_dir: str):
    """Test rows and evaluate() options (popularity, self-exclusion) of a prepared TFDS dataset."""
    import numpy as np

    from alx_trainer.train import open_dataset
    from alx_trainer.config import TrainConfig
    from webgraph_pipeline.contract import read_records

    dataset = open_dataset(TrainConfig(data=name, model_dir="-", tfds_data_dir=tfds_data_dir))
    if "test" not in dataset.files:
        raise FileNotFoundError(f"{name}: the dataset has no test split")
    train = read_records(dataset.files["train"])
    cols = np.concatenate([c for _, c, _ in train]) if train else np.zeros(0, np.int64)
    popularity = np.bincount(cols, minlength=dataset.num_cols).astype(np.float32)
    shared = dataset.num_rows == dataset.num_cols
    return read_records(dataset.files["test"]), {"popularity": popularity, "exclude_self": shared}


def main_eval(argv: Sequence[str]) -> int:
    """Recall@K / NDCG of a trained model and of the popularity baseline on a test split."""
    p = argparse.ArgumentParser(prog="alx_trainer eval", description=main_eval.__doc__)
    p.add_argument("--data", required=True, help="Dataset directory in the WebGraph contract, or a TFDS name.")
    p.add_argument("--tfds_data_dir", default="", help="TFDS data_dir when --data is a TFDS name.")
    p.add_argument("--model_dir", required=True, help="Model directory written by `train`.")
    p.add_argument("--k", type=_ks, default=[20, 50], help="Cut-offs K of Recall@K, comma-separated.")
    p.add_argument("--ndcg_k", type=int, default=100, help="Cut-off of NDCG (0: none).")
    p.add_argument("--approx", action="store_true", help="Approximate top-k (lax.approx_max_k) per shard.")
    p.add_argument("--recall_target", type=float, default=0.95, help="Recall target of the approximate top-k.")
    p.add_argument("--batch_size", type=int, default=0, help="Test rows per scoring batch (0: by memory budget).")
    p.add_argument("--max_rows", type=int, default=0, help="Evaluate only the first N test rows (0: all).")
    p.add_argument("--output", default="", help="Also write the metrics as JSON to this file.")
    args = p.parse_args(list(argv))

    def body() -> int:
        from alx_trainer.evaluation.evaluate import evaluate, format_metrics

        data, extra = args.data, {}
        if not os.path.isdir(args.data):
            data, extra = _tfds_eval_data(args.data, args.tfds_data_dir)
        result = evaluate(
            _model(args.model_dir), data, ks=args.k, ndcg_k=args.ndcg_k or None, approx=args.approx,
            recall_target=args.recall_target, batch_size=args.batch_size or None, max_rows=args.max_rows or None,
            **extra,
        )
        print(format_metrics(result))
        if args.output:
            with open(args.output, "w", encoding="utf-8") as f:
                json.dump(result, f, indent=2, sort_keys=True)
        return 0

    return _run("eval", body)


def main_sweep(argv: Sequence[str]) -> int:
    """Grid search over lambda x alpha (the paper's grid by default); every other flag is `train`'s."""
    from alx_trainer.config import TrainConfig, parse_dataclass_args
    from alx_trainer.tools.sweep import PAPER_ALPHAS, PAPER_LAMBDAS, parse_grid

    p = argparse.ArgumentParser(
        prog="alx_trainer sweep", description=main_sweep.__doc__,
        epilog="Remaining flags (--data, --dim, --epochs, ...) configure each training run; see `train --help`.",
    )
    p.add_argument("--out_dir", required=True, help="Where sweep.csv, the heatmap and the models go.")
    p.add_argument("--lambdas", default=",".join(f"{v:g}" for v in PAPER_LAMBDAS), help="L2 regularization values.")
    p.add_argument("--alphas", default=",".join(f"{v:g}" for v in PAPER_ALPHAS), help="Unobserved weights.")
    p.add_argument("--metric", default="recall@20", help="Metric of the table's best cell and the heatmap.")
    p.add_argument("--keep_models", action="store_true", help="Keep every cell's model directory.")
    args, rest = p.parse_known_args(list(argv))

    def body() -> int:
        import dataclasses

        from alx_trainer.tools.sweep import HEATMAP_PNG, format_table, plot_heatmap, run_sweep

        lambdas, alphas = parse_grid(args.lambdas), parse_grid(args.alphas)
        config = parse_dataclass_args(TrainConfig, rest, prog="alx_trainer sweep")
        config = dataclasses.replace(config, model_dir=config.model_dir or args.out_dir).validate()
        rows = run_sweep(config, args.out_dir, lambdas, alphas, keep_models=args.keep_models)
        print(format_table(rows, args.metric))
        print(f"heatmap: {plot_heatmap(rows, os.path.join(args.out_dir, HEATMAP_PNG), args.metric)}")
        return 0

    return _run("sweep", body)


def main_predict(argv: Sequence[str]) -> int:
    """Top-K predicted outlinks of a URL or id, or its nearest neighbours (--neighbors)."""
    p = argparse.ArgumentParser(prog="alx_trainer predict", description=main_predict.__doc__)
    p.add_argument("--data", required=True, help="Dataset directory (vocabulary and known links).")
    p.add_argument("--model_dir", required=True, help="Model directory written by `train`.")
    p.add_argument("node", nargs="+", help="URL(s) from the vocabulary, or node ids.")
    p.add_argument("--k", type=int, default=10, help="How many predictions per node.")
    p.add_argument("--neighbors", action="store_true", help="Nearest neighbours by cosine instead of outlinks.")
    p.add_argument("--table", choices=("row", "col"), default="col", help="Table of --neighbors.")
    args = p.parse_args(list(argv))

    def body() -> int:
        from alx_trainer.tools.predict import format_predictions, nearest_neighbors, predict_outlinks

        model = _model(args.model_dir)
        for node in args.node:
            if args.neighbors:
                preds = nearest_neighbors(model, node, args.k, data_dir=args.data, table=args.table)
                print(format_predictions(f"nearest neighbours of {node} ({args.table} table):", preds))
            else:
                preds = predict_outlinks(model, args.data, node, args.k)
                print(format_predictions(f"predicted outlinks of {node}:", preds))
        return 0

    return _run("predict", body)


def main_export(argv: Sequence[str]) -> int:
    """Write a model's tables with their ids (and URLs) as NumPy .npz/.npy and TFRecord."""
    p = argparse.ArgumentParser(prog="alx_trainer export", description=main_export.__doc__)
    p.add_argument("--model_dir", required=True, help="Model directory written by `train`.")
    p.add_argument("--output", required=True, help="Output directory.")
    p.add_argument("--data", default="", help="Dataset directory whose vocabulary names the ids (optional).")
    p.add_argument("--num_shards", type=int, default=1, help="TFRecord shards per table.")
    args = p.parse_args(list(argv))

    def body() -> int:
        from alx_trainer.tools.predict import export_tables

        for path in export_tables(_model(args.model_dir), args.output, data_dir=args.data or None,
                                  num_shards=args.num_shards):
            print(path)
        return 0

    return _run("export", body)


def main_split(argv: Sequence[str]) -> int:
    """Strong-generalization split of interaction data, written in the dataset contract."""
    from alx_trainer.interactions import FORMATS

    p = argparse.ArgumentParser(prog="alx_trainer split", description=main_split.__doc__)
    p.add_argument("--input", nargs="+", required=True, help="Input file(s); ml1m takes train.txt and test.txt.")
    p.add_argument("--format", choices=FORMATS, required=True,
                   help="ml1m: `user item item ...`; udata: MovieLens u.data; pairs: `user item`; "
                        "edges: `src dst` of one graph (shared ids).")
    p.add_argument("--output", required=True, help="Dataset directory to write.")
    held = p.add_mutually_exclusive_group(required=True)
    held.add_argument("--test_rows", type=int, help="Number of held-out rows.")
    held.add_argument("--test_fraction", type=float, help="Fraction of the rows held out.")
    p.add_argument("--fold_in_fraction", type=float, default=0.8, help="Share of a held-out row's items kept to fold it in.")
    p.add_argument("--seed", type=int, default=0, help="Seed of the row choice and the fold-in/ground-truth split.")
    p.add_argument("--num_shards", type=int, default=1, help="TFRecord shards per split.")
    p.add_argument("--names", default="", help="`id name` file (e.g. URLs) for the vocabulary.")
    args = p.parse_args(list(argv))

    def body() -> int:
        from alx_trainer import interactions as it

        if args.num_shards <= 0:
            raise ValueError(f"--num_shards must be positive, got {args.num_shards}")
        matrix = it.build_matrix(it.read_interactions(args.input, args.format))
        split = it.split_rows(matrix, test_rows=args.test_rows, test_fraction=args.test_fraction,
                              fold_in_fraction=args.fold_in_fraction, seed=args.seed)
        config = {"format": args.format, "test_rows": args.test_rows, "test_fraction": args.test_fraction,
                  "fold_in_fraction": args.fold_in_fraction, "seed": args.seed}
        stats = it.write_dataset(args.output, matrix, split, num_shards=args.num_shards,
                                 names=it.read_names(args.names) if args.names else None,
                                 config=config, inputs=args.input)
        print(f"wrote {args.output}: {stats['num_rows']} rows x {stats['num_cols']} columns, "
              f"{stats['edges']} pairs, splits {stats['splits']}")
        return 0

    return _run("split", body)
