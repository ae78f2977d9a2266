"""Command line `python -m alx_trainer split`; returns an exit code (eval, sweep, predict, export: `cli/tools.py`).

Bad input gives one line on stderr naming what and where, and exit code 1 (2 for bad flags).
"""

from __future__ import annotations

import argparse
from typing import Sequence

from alx_trainer.cli.common import run as _run


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
