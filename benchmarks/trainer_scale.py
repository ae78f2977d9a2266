"""Ours against implicit 0.7 (CPU) per size and d: seconds per epoch, peak memory, work rates.

    python -m benchmarks.trainer_scale [--sizes ml1m,25m,60m,ml1m-real,gowalla] [--dims 64,128]
        [--epochs 3] [--cg_iters 3] [--solvers cg,block,implicit] [--block_size 32]
        [--work /tmp/trainer_scale] [--hugepages both|on|off] [--train_loss both|off|on]
        [--ours_flags='--stream_batches ...'] [--threads N] [--recall]

Sizes: the generated power-law matrices of `benchmarks.core.datasets.SIZES` (written once by
`python -m webgraph_contract.synthetic_matrix`, seeded, reused when their stats.json matches);
`ml1m-real`, MovieLens-1M's training users (the pipeline's strong-generalization split, 90% of the
users); `gowalla`, LightGCN's Gowalla training pairs (the pipeline's given split of `--gowalla`),
the size for high d. Ours runs at the trainer's defaults (alpha, lambda, nu), Gowalla at alpha
0.02, lambda 0.002, nu 1; implicit at the same objective (`benchmarks.core.implicit_als`).

Per size and d every trainer runs in its own process (peak RSS by wait4): ours as a user runs it
(`python -m alx_trainer train ... --eval_every 0`: the CLI's CPU split and 'owner' layout), with
`--solver cg` (solver `cg`) or the iALS++ block solver (`block`, `--block_size`); implicit's CPU
ALS with CG, the same d, `cg_steps` = our `cg_iters`, `--threads` threads, BLAS at one thread, on
the same TFRecords. Seconds per epoch are medians over the epochs after the first (ours compiles
in its first). `--hugepages`: ours with glibc's `malloc.hugetlb=1` tunable, without, or both.
`--train_loss`: `off`, neither computes the training loss; `on`, both do every epoch; each ratio
is against implicit with the same setting. `--recall`: Recall@20 (hits / |test items|, training
items excluded) of both on Gowalla's test users. Per core: `--threads 1
--ours_flags='--cpu_devices 1'`.

Work per epoch is counted, not measured (`benchmarks.core.work`); rates are set against the
machine's matmul peak (a large float32 `jnp.dot`) and memory bandwidth (a large NumPy copy).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from typing import Sequence

import numpy as np

from benchmarks.core import datasets, implicit_als, machine, paths
from benchmarks.core.children import run_child
from benchmarks.core.tables import print_table
from benchmarks.core.work import block_flops, epoch_work

MODULE = "benchmarks.trainer_scale"
HUGEPAGES_ENV = "glibc.malloc.hugetlb=1"
REAL, GOWALLA = "ml1m-real", "gowalla"
GOWALLA_POINT = {
    "alpha": 0.02,
    "reg": 0.002,
    "reg_exponent": 1.0,
}  # frequency-scaled regularization
SOLVERS = ("cg", "block", "implicit")


def ensure_data(work: str, name: str, gowalla: str, seed: int = 0) -> str:
    """The dataset directory of a size, made once under `work`."""
    out = os.path.join(work, f"matrix-{name}")
    if name in datasets.SIZES:
        return datasets.ensure_matrix(work, name, seed)
    if not os.path.exists(os.path.join(out, "stats.json")):
        if name == REAL:
            datasets.ml1m_split(out, seed)
        else:
            datasets.gowalla_split(out, gowalla)
    return out


def point(name: str) -> dict:
    """Our (alpha, reg, reg_exponent) at a size: Gowalla's, else the trainer's defaults."""
    from alx_trainer.config import TrainConfig

    defaults = TrainConfig(data="", model_dir="")
    return GOWALLA_POINT if name == GOWALLA else {k: getattr(defaults, k) for k in GOWALLA_POINT}


def per_epoch(seconds: list[float]) -> float:
    return float(np.median(seconds[1:] or seconds))


def run_ours(
    data: str,
    dim: int,
    args: argparse.Namespace,
    at: dict,
    hugepages: bool,
    train_loss: bool,
    solver: str,
    score: bool,
) -> dict:
    """Ours through the command line in its own process: seconds per epoch, peak RSS, Recall@20."""
    solver_flags = (
        ["--solver", "block", "--block_size", args.block_size] if solver == "block" else []
    )
    with tempfile.TemporaryDirectory() as model_dir:
        cmd = [
            sys.executable,
            "-m",
            "alx_trainer",
            "train",
            "--data",
            data,
            "--model_dir",
            model_dir,
            "--dim",
            dim,
            "--epochs",
            args.epochs,
            "--cg_iters",
            args.cg_iters,
            "--eval_every",
            "0",
            "--checkpoint_every",
            "0",
            "--no-progress",
            "--train_loss_every",
            int(train_loss),
            *[f"--{k}={v}" for k, v in at.items()],
            *solver_flags,
            *args.ours_flags.split(),
        ]
        env = dict(os.environ, GLIBC_TUNABLES=HUGEPAGES_ENV if hugepages else "")
        child = run_child(cmd, env=env)
        with open(os.path.join(model_dir, "metrics.jsonl")) as f:
            seconds = [json.loads(line)["seconds"] for line in f if line.strip()]
        result = {"seconds": seconds, "s_per_epoch": per_epoch(seconds), "peak_gib": child.peak_gib}
        if score:
            from alx_trainer.model import load_model

            model = load_model(model_dir)
            result.update(scores(data, model.row_table, model.col_table))
    return result


def scores(data: str, row_table: np.ndarray, col_table: np.ndarray) -> dict:
    """Recall@20 and NDCG@20 of trained rows on a given split's test users."""
    from benchmarks.core.gowalla import score_trained_rows
    from webgraph_contract import dataset_reader

    _, _, indptr, cols = datasets.read_csr(data, "train")
    rows = [
        (r, cols[indptr[r] : indptr[r + 1]], g)
        for r, _, g in dataset_reader.read_split(data, "test")
        if len(g)
    ]
    return score_trained_rows(row_table, col_table, rows)


def implicit_worker(args: argparse.Namespace) -> None:
    """(In a child) implicit's CPU ALS on the dataset's train split; prints its per-epoch seconds
    (and scores) as JSON."""
    _, num_cols, indptr, cols = datasets.read_csr(args.data, "train")
    matrix, reg = implicit_als.implicit_problem(
        indptr, cols, num_cols, args.alpha, args.reg, args.reg_exponent
    )
    del indptr, cols
    model = implicit_als.implicit_model(
        int(args.dims),
        reg,
        args.epochs,
        args.cg_iters,
        threads=args.threads,
        training_loss=args.train_loss == "on",
    )
    result: dict = {"seconds": implicit_als.fit(model, matrix)}
    if args.recall:
        result.update(
            scores(args.data, np.asarray(model.user_factors), np.asarray(model.item_factors))
        )
    print(json.dumps(result))


def run_implicit(
    data: str, dim: int, args: argparse.Namespace, at: dict, train_loss: bool, score: bool
) -> dict:
    cmd = [
        sys.executable,
        "-m",
        MODULE,
        "--implicit_worker",
        "--data",
        data,
        "--dims",
        dim,
        "--epochs",
        args.epochs,
        "--cg_iters",
        args.cg_iters,
        "--threads",
        args.threads,
        "--train_loss",
        "on" if train_loss else "off",
        *[f"--{k}={v}" for k, v in at.items()],
        *(["--recall"] if score else []),
    ]
    child = run_child(cmd)
    result = json.loads(child.stdout.strip().splitlines()[-1])
    return dict(result, s_per_epoch=per_epoch(result["seconds"]), peak_gib=child.peak_gib)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    names = [*datasets.SIZES, REAL, GOWALLA]
    p = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="ml1m,25m", help=f"comma-separated, of {names}")
    p.add_argument("--dims", default="64,128")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--cg_iters", type=int, default=3)
    p.add_argument("--solvers", default="cg,implicit", help=f"comma-separated, of {list(SOLVERS)}")
    p.add_argument("--block_size", type=int, default=32, help="the block solver's block")
    p.add_argument(
        "--threads", type=int, default=len(os.sched_getaffinity(0)), help="implicit's threads"
    )
    p.add_argument("--work", default=str(paths.work_dir("trainer_scale")))
    p.add_argument("--gowalla", default=str(paths.GOWALLA_DIR), help="train.txt/test.txt folder")
    p.add_argument("--hugepages", choices=("both", "on", "off"), default="both")
    p.add_argument("--ours_flags", default="", help="more flags for ours, e.g. '--stream_batches'")
    p.add_argument(
        "--train_loss",
        choices=("both", "off", "on"),
        default="both",
        help="training loss computed by neither (off), by both (on), or each in turn",
    )
    p.add_argument(
        "--recall", action="store_true", help="Recall@20 of both on Gowalla's test users"
    )
    p.add_argument("--data", help=argparse.SUPPRESS)  # the implicit worker's
    p.add_argument("--implicit_worker", action="store_true", help=argparse.SUPPRESS)
    for key in GOWALLA_POINT:
        p.add_argument(f"--{key}", type=float, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.size_list, args.solver_list = args.sizes.split(","), args.solvers.split(",")
    bad = [s for s in args.size_list if s not in names]
    bad += [s for s in args.solver_list if s not in SOLVERS]
    if bad:
        p.error(
            f"--sizes or --solvers: unknown {bad}; sizes of {names}, solvers of {list(SOLVERS)}"
        )
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.implicit_worker:
        implicit_worker(args)
        return 0
    os.makedirs(args.work, exist_ok=True)
    peak_flops, bandwidth = machine.cpu_matmul_peak(), machine.memory_bandwidth()
    print(
        f"machine: matmul peak {peak_flops / 1e9:.1f} GFLOP/s, copy bandwidth "
        f"{bandwidth / 1e9:.1f} GB/s, "
        f"{machine.load_line()}; ours: {args.ours_flags or 'CLI defaults'}",
        flush=True,
    )
    hugepage_modes = {"both": (True, False), "on": (True,), "off": (False,)}[args.hugepages]
    table = []
    for name in args.size_list:
        data = ensure_data(args.work, name, args.gowalla)
        with open(os.path.join(data, "stats.json")) as f:
            stats = json.load(f)
        at, score = point(name), args.recall and name == GOWALLA
        nnz = stats.get("split_edges", {}).get("train", stats["edges"])
        for dim in (int(d) for d in args.dims.split(",")):
            cg = epoch_work(stats["num_rows"], stats["num_cols"], nnz, dim, args.cg_iters)
            flops_of = {
                "cg": cg,
                "implicit": cg,
                "block": (
                    block_flops(nnz, stats["num_rows"], stats["num_cols"], dim, args.block_size),
                    cg[1],
                ),
            }
            for loss in {"both": (False, True), "off": (False,), "on": (True,)}[args.train_loss]:
                results = {}
                for hp in hugepage_modes:  # ours and implicit interleaved in one run
                    for solver in (s for s in args.solver_list if s != "implicit"):
                        who = f"ours {solver}" + (" +hp" if hp else "")
                        results[who] = run_ours(data, dim, args, at, hp, loss, solver, score)
                        results[who]["work"] = flops_of[solver]
                    if "implicit" in args.solver_list and "implicit" not in results:
                        results["implicit"] = run_implicit(data, dim, args, at, loss, score)
                        results["implicit"]["work"] = flops_of["implicit"]
                base = results.get("implicit", {}).get("s_per_epoch")
                for who, r in results.items():
                    s, (flops, byte_count) = r["s_per_epoch"], r["work"]
                    row = {
                        "size": name,
                        "dim": dim,
                        "who": who,
                        "train_loss": "on" if loss else "off",
                        "s_per_epoch": round(s, 3),
                        "ratio": round(s / base, 3) if base else None,
                        "peak_gib": round(r["peak_gib"], 2),
                        "gflop_s": round(flops / s / 1e9, 2),
                        "pct_matmul_peak": round(100 * flops / s / peak_flops, 1),
                        "gb_s": round(byte_count / s / 1e9, 2),
                        "pct_bandwidth": round(100 * byte_count / s / bandwidth, 1),
                        "recall_gt@20": r.get("recall_gt@20"),
                        "epochs_s": [round(x, 2) for x in r["seconds"]],
                        "load": round(os.getloadavg()[0], 1),
                    }
                    print(json.dumps(row), flush=True)
                    table.append(row)
    print_table(
        [
            ("size", "size", "", -10),
            ("d", "dim", "", 5),
            ("who", "who", "", -14),
            ("loss", "train_loss", "", -4),
            ("s/epoch", "s_per_epoch", ".3f", 8),
            ("ratio", "ratio", ".3f", 6),
            ("peak GiB", "peak_gib", ".2f", 8),
            ("GFLOP/s", "gflop_s", ".1f", 8),
            ("%peak", "pct_matmul_peak", ".1f", 6),
            ("Recall@20", "recall_gt@20", ".4f", 9),
        ],
        table,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
