"""Quality against peers and published tables: Recall@K of ours and implicit at the same objective.

    python -m benchmarks.quality ml1m [--dim 128] [--epochs 8] [--lambdas 5,10,20]
        [--alphas 0.25,0.5,1]
    python -m benchmarks.quality hollins [--dim 64] [--epochs 8] [--lambdas ...] [--alphas ...]
    python -m benchmarks.quality --device cpu hollins --dim 8 --epochs 2 --lambdas 10 --alphas 0.5
    python -m benchmarks.quality gowalla [--data data/gowalla]
        [--config configs/gowalla.json] [--work DIR] [--grid_dims 64]
        [--grid_alphas 0.005,0.01,0.02]
        [--grid_lambdas '0:0.75,1.5,3;1:0.002,0.004,0.008'] [--grid_epochs 8] [--grid_eval_every 4]
    python -m benchmarks.quality gowalla --per_d 64,256,1024 --work DIR [the grid flags]
        [--ours_flags '...']
    python -m benchmarks.quality planted --scale 0.01 [--on device] [--config FILE]
        [--gpu_path_memory] [train flags]

`--device auto|cpu|gpu` (before the subcommand) picks JAX's platform for ours (cpu, or gpu:
JAX_PLATFORMS=cuda; auto: JAX's choice) and implicit's model (its GPU model with gpu, else its CPU
model). implicit gets each of our points mapped to its parameters (`benchmarks.core.implicit_als`:
exact at nu = 0, ours at the mean row for nu > 0).

`ml1m` and `hollins` (`benchmarks.core.strong_accuracy`): one strong-generalization split for
both, made by the pipeline (10% of the rows held out by a seeded hash; 80% of each held-out row's
items fold it in, 20% are the ground truth): MovieLens-1M's users, or the hollins.edu crawl's pages
with at least 2 links (the README's example, whose `make demo` Recall@20 is printed beside). Each
library trains on the same rows with the same d and epochs over the same (lambda, alpha) grid and
its best cell by Recall@20 is reported. Held-out rows are folded in by each library's own exact
solve (ours `fold_in`, Cholesky; implicit `recalculate_user`), then ranked and scored by the same
code (`alx_trainer.evaluation.evaluate.evaluate_dataset`: Recall@K over min(K, |gt|), NDCG@100),
next to the popularity baseline.

`gowalla`: LightGCN's split against the published table, through the command line. The grid:
alpha x (nu, lambda) pairs (`nu:lambda,lambda;nu:...`) x the epoch counts grid_eval_every, 2
grid_eval_every, ... up to grid_epochs, on `--eval_rows` validation users, CG `--cg_iters` steps.
Without --per_d: the dataset is made by `python -m webgraph_pipeline --edge_format given_split
--validation_fraction 0.2`; ours is `alx_trainer train --config configs/gowalla.json` (the point
`alx_trainer sweep` picked on validation) on the training data, then `alx_trainer eval --k 20
--ndcg_k 20` on test (seconds per epoch: the mean after the first; peak RSS by wait4); implicit (CG,
our steps) at (a) our tuned point, (b) its own best point of the same grid picked on validation,
each fit in a child process, its user rows scored by our scorer. With --per_d: for each d, ours
tuned by `alx_trainer sweep` over the grid (one call per nu, into WORK/sweep_dD, resumed if there)
and implicit tuned over the same grid on validation (cached in WORK/implicit_validation.jsonl),
each best point reported on test. Metrics: `recall_gt@20` = hits / |test items| (LightGCN's, the
published column), `recall@20` = hits / min(20, |test items|), NDCG@20; training items excluded.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from typing import Sequence

import numpy as np

from benchmarks.core import datasets, implicit_als, paths, planted_quality
from benchmarks.core.children import PLATFORMS, run_child
from benchmarks.core.gowalla import score_trained_rows
from benchmarks.core.strong_accuracy import strong
from benchmarks.core.trainer_cli import ours_sweep, run_ours

MODULE = "benchmarks.quality"
PUBLISHED = (("LightGCN (published)", 0.1830, 0.1554), ("UltraGCN (published)", 0.1862, 0.1580))


def floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",") if v.strip()]


def implicit_child(args: argparse.Namespace) -> int:
    """(In a child) fit implicit on one split at one point; one JSON line of metrics per epoch count
    in `--eval_epochs` (default: the last), each with the mean seconds per epoch so far."""
    from alx_trainer import loading

    train_split = "validation_train" if args.split == "validation" else "train"
    _, n_cols, indptr, cols = datasets.read_csr(args.dataset, train_split)
    matrix, reg = implicit_als.implicit_problem(indptr, cols, n_cols, args.alpha, args.reg, args.nu)
    gpu = args.device == "gpu"
    model = implicit_als.implicit_model(args.dim, reg, args.epochs, args.cg_iters, gpu=gpu)
    # the rows (and order) our evaluation uses
    data = loading.eval_data(args.dataset, args.split)
    held = list(zip(data.known.row_ids.tolist(), data.known.lists(), data.gt.lists()))
    held = held[: args.eval_rows] if args.eval_rows else held
    at = {int(e) for e in floats(args.eval_epochs)} if args.eval_epochs else {args.epochs}
    seconds: list[float] = []

    def on_epoch(epoch: int, elapsed: float) -> None:
        seconds.append(elapsed)
        if epoch in at:
            trained = model.to_cpu() if gpu else model
            users, items = np.asarray(trained.user_factors), np.asarray(trained.item_factors)
            result = score_trained_rows(users, items, held)
            result.update(epochs=epoch, seconds_per_epoch=float(np.mean(seconds[1:] or seconds)))
            print(json.dumps(result), flush=True)

    implicit_als.fit(model, matrix, on_epoch)
    return 0


def run_implicit(
    dataset: str,
    split: str,
    dim: int,
    alpha: float,
    reg: float,
    nu: float,
    epochs: int,
    cg_iters: int,
    eval_epochs: str = "",
    eval_rows: int = 0,
    device: str = "auto",
) -> list[dict]:
    """implicit fitted in a child process: its metrics at each evaluated epoch count (peak RSS,
    CPU s)."""
    child = run_child(
        [
            sys.executable,
            "-m",
            MODULE,
            "--device",
            device,
            "gowalla",
            "--implicit_child",
            "--dataset",
            dataset,
            "--split",
            split,
            "--dim",
            dim,
            "--alpha",
            alpha,
            "--reg",
            reg,
            "--nu",
            nu,
            "--epochs",
            epochs,
            "--cg_iters",
            cg_iters,
            "--eval_epochs",
            eval_epochs,
            "--eval_rows",
            eval_rows,
        ]
    )
    return [
        dict(json.loads(line), rss_mib=child.peak_gib * 1024, cpu_s=child.cpu_s)
        for line in child.stdout.splitlines()
        if line.startswith("{")
    ]


def lambda_grid(text: str) -> dict[float, list[float]]:
    """`"0:0.75,1.5;1:0.004"` -> {nu: [lambda, ...]} (lambda's scale depends on nu)."""
    grid = {}
    for group in filter(str.strip, text.split(";")):
        try:
            nu, lams = group.split(":")
            grid[float(nu)] = floats(lams)
        except ValueError:
            grid[float("nan")] = []
        if not list(grid.values())[-1]:
            raise SystemExit(
                f"{MODULE}: error: --grid_lambdas: expected "
                f"'nu:lambda,lambda;nu:...', got {group!r}"
            )
    return grid


def point_name(d: int, alpha: float, lam: float, nu: float, epochs: int) -> str:
    return f"d={d} alpha={alpha:g} lambda={lam:g} nu={nu:g} {epochs} ep"


def implicit_sweep(args: argparse.Namespace, data: str, d: int) -> tuple[tuple, float]:
    """implicit over the grid at d on validation (cached in WORK/implicit_validation.jsonl): the
    best (alpha, lambda, nu, epochs) by validation Recall@20 (hits/|gt|) and that recall."""
    cache_path = os.path.join(args.work_dir, "implicit_validation.jsonl")
    cache = {}
    if os.path.exists(cache_path):
        with open(cache_path) as f:
            cache = {r["key"]: r for r in map(json.loads, f)}
    best, best_score = None, -1.0
    every = range(args.grid_eval_every, args.grid_epochs + 1, args.grid_eval_every)
    for nu, lams in lambda_grid(args.grid_lambdas).items():
        for lam in lams:
            for alpha in floats(args.grid_alphas):
                key = (
                    f"{d}|{alpha:g}|{lam:g}|{nu:g}|{args.grid_epochs}|{args.grid_eval_every}|"
                    f"{args.cg_iters}|{args.eval_rows}"
                )
                if key not in cache:
                    results = run_implicit(
                        data,
                        "validation",
                        d,
                        alpha,
                        lam,
                        nu,
                        args.grid_epochs,
                        args.cg_iters,
                        ",".join(str(e) for e in every),
                        args.eval_rows,
                        args.device,
                    )
                    cache[key] = {"key": key, "results": results}
                    with open(cache_path, "a") as f:
                        f.write(json.dumps(cache[key]) + "\n")
                for r in cache[key]["results"]:
                    if r["recall_gt@20"] > best_score:
                        best, best_score = (alpha, lam, nu, int(r["epochs"])), r["recall_gt@20"]
    return best, best_score


def gowalla(args: argparse.Namespace) -> int:
    if args.implicit_child:
        return implicit_child(args)
    tmp = tempfile.TemporaryDirectory()
    args.work_dir = args.work or tmp.name
    os.makedirs(args.work_dir, exist_ok=True)
    data = os.path.join(args.work_dir, "gowalla")
    if not os.path.exists(os.path.join(data, "stats.json")):
        datasets.gowalla_split(data, args.data, validation_fraction=0.2)
    print(
        f"Gowalla (LightGCN split, pipeline given split); {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.2f}"
    )
    head = (
        f"{'model':<58} {'Recall@20':>9} {'R@20 min':>9} {'NDCG@20':>8} {'s/epoch':>8} "
        f"{'peak MiB':>9} {'load':>5}"
    )

    def line(name: str, r: dict) -> None:
        print(
            f"{name:<58} {r['recall_gt@20']:>9.4f} {r['recall@20']:>9.4f} {r['ndcg@20']:>8.4f} "
            f"{r['seconds_per_epoch']:>8.2f} {r.get('rss_mib', float('nan')):>9.0f} "
            f"{os.getloadavg()[0]:>5.2f}",
            flush=True,
        )

    if args.per_d:
        print(
            f"grid (validation, {args.eval_rows or 'all'} rows): alpha {args.grid_alphas}; "
            f"nu:lambda {args.grid_lambdas}; epochs {args.grid_eval_every}..{args.grid_epochs}; "
            f"CG {args.cg_iters} steps"
        )
        print(head)
        for d in (int(v) for v in floats(args.per_d)):
            ours = ours_sweep(args, data, d, lambda_grid(args.grid_lambdas))
            b, final = ours["best"], ours["final"]
            line(
                f"ours, val {b['recall_gt@20']:.4f}: "
                + point_name(d, b["alpha"], b["lambda"], b["nu"], int(b["epochs"])),
                dict(
                    final["test"],
                    seconds_per_epoch=final["seconds_per_epoch"],
                    rss_mib=ours["rss_mib"],
                ),
            )
            (alpha, lam, nu, ep), score = implicit_sweep(args, data, d)
            line(
                f"implicit, val {score:.4f}: " + point_name(d, alpha, lam, nu, ep),
                run_implicit(
                    data, "test", d, alpha, lam, nu, ep, args.cg_iters, device=args.device
                )[-1],
            )
    else:
        with open(args.config) as f:
            tuned = json.load(f)
        point = ", ".join(f"{k}={v}" for k, v in tuned.items())
        print(f"our tuned point ({args.config}): {point}")
        print(head)
        d, epochs, cg = int(tuned["dim"]), int(tuned["epochs"]), int(tuned.get("cg_iters", 3))
        at = (tuned["alpha"], tuned["reg"], tuned["reg_exponent"])
        line(
            f"ours {tuned.get('solver', 'cg')}, {point_name(d, *at, epochs)}",
            run_ours(args.config, data, os.path.join(args.work_dir, "ours")),
        )
        line(
            "implicit cg, same point",
            run_implicit(data, "test", d, *at, epochs, cg, device=args.device)[-1],
        )
        args.cg_iters = cg
        for gd in (int(v) for v in floats(args.grid_dims)):
            (alpha, lam, nu, ep), score = implicit_sweep(args, data, gd)
            line(
                f"implicit, own best (val {score:.4f}): " + point_name(gd, alpha, lam, nu, ep),
                run_implicit(data, "test", gd, alpha, lam, nu, ep, cg, device=args.device)[-1],
            )
    for name, recall, ndcg in PUBLISHED:
        print(f"{name:<58} {recall:>9.4f} {'':>9} {ndcg:>8.4f}")
    tmp.cleanup()
    return 0


def add_grid_args(m: argparse.ArgumentParser, dim: int, lambdas: str, alphas: str) -> None:
    """The flags of a strong-generalization subcommand (`ml1m`, `hollins`)."""
    m.add_argument("--dim", type=int, default=dim)
    m.add_argument("--epochs", type=int, default=8)
    m.add_argument("--lambdas", type=floats, default=floats(lambdas), help="our L2 grid")
    m.add_argument("--alphas", type=floats, default=floats(alphas), help="our unobserved weight")
    m.add_argument(
        "--test_fraction", type=float, default=0.1, help="share of rows held out (pipeline hash)"
    )
    m.add_argument("--seed", type=int, default=0)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog=f"python -m {MODULE}",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--device", choices=("auto", "cpu", "gpu"), default="auto", help="ours' and implicit's"
    )
    sub = p.add_subparsers(dest="dataset_name", required=True)
    m = sub.add_parser("ml1m", help="MovieLens-1M, strong generalization, each one's best cell")
    add_grid_args(m, 128, "5,10,20", "0.25,0.5,1")
    h = sub.add_parser("hollins", help="the hollins.edu crawl, strong generalization")
    add_grid_args(h, 64, "5,10,20", "0.25,0.5,1")
    g = sub.add_parser("gowalla", help="Gowalla (LightGCN's split) against the published table")
    g.add_argument("--data", default=str(paths.GOWALLA_DIR), help="train.txt/test.txt folder")
    g.add_argument("--config", default=str(paths.GOWALLA_CONFIG), help="our tuned point")
    g.add_argument(
        "--work",
        default="",
        help="where the dataset, sweeps and models go (default: a "
        "temporary directory); sweeps already in it are resumed, not rerun",
    )
    g.add_argument(
        "--per_d",
        default="",
        help="instead of the tuned point: for each d (comma-separated), ours "
        "and implicit each tuned on validation over the grid, reported on test",
    )
    g.add_argument("--grid_dims", default="64", help="d of implicit's own grid (without --per_d)")
    g.add_argument("--grid_alphas", default="0.005,0.01,0.02")
    g.add_argument(
        "--grid_lambdas",
        default="0:0.75,1.5,3;1:0.002,0.004,0.008",
        help="nu:lambda,... groups separated by ';' (lambda's scale depends on nu)",
    )
    g.add_argument("--grid_epochs", type=int, default=8, help="epochs per grid point")
    g.add_argument(
        "--grid_eval_every", type=int, default=4, help="every so many epochs is a grid point too"
    )
    g.add_argument(
        "--eval_rows", type=int, default=10000, help="validation rows per grid point (0: all)"
    )
    g.add_argument(
        "--cg_iters", type=int, default=3, help="CG steps of both (without --per_d: the config's)"
    )
    g.add_argument("--ours_flags", default="", help="more `train` flags for our sweep (--per_d)")
    # one implicit fit, in a child process of this benchmark
    g.add_argument("--implicit_child", action="store_true", help=argparse.SUPPRESS)
    for name, kind in (
        ("dataset", str),
        ("split", str),
        ("dim", int),
        ("alpha", float),
        ("reg", float),
        ("nu", float),
        ("epochs", int),
        ("eval_epochs", str),
    ):
        g.add_argument(f"--{name}", type=kind, help=argparse.SUPPRESS)
    sub.add_parser(
        "planted",
        add_help=False,
        help="a planted-community graph against its oracle, `train` and `eval` as a user runs "
        "them (`planted --help`: benchmarks.core.planted_quality)",
    )
    args, rest = p.parse_known_args(argv)
    if args.device in PLATFORMS:
        os.environ["JAX_PLATFORMS"] = PLATFORMS[args.device]
    if args.dataset_name == "planted":
        return planted_quality.main(rest)
    if rest:
        p.error(f"unrecognized arguments: {' '.join(rest)}")
    return gowalla(args) if args.dataset_name == "gowalla" else strong(args)


if __name__ == "__main__":
    sys.exit(main())
