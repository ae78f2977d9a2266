"""Gowalla (LightGCN's split) against the published table, through the command line.

    python benchmarks/gowalla.py [--data data/gowalla] [--config configs/gowalla.json]
        [--work DIR] [--grid_dims 64] [--grid_alphas 0.005,0.01,0.02]
        [--grid_lambdas '0:0.75,1.5,3;1:0.002,0.004,0.008'] [--grid_epochs 8] [--grid_eval_every 4]
    python benchmarks/gowalla.py --per_d 64,256,1024 --work DIR [the same grid flags] [--ours_flags '...']

The grid: alpha x (nu, lambda) pairs (`nu:lambda,lambda;nu:...`: lambda's scale depends on nu) x
the epoch counts grid_eval_every, 2 grid_eval_every, ... up to grid_epochs, on a fixed sample of
`--eval_rows` validation users, CG `--cg_iters` steps. Without --per_d:
1. `python -m webgraph_pipeline --edge_format given_split ... --validation_fraction 0.2` makes the
   dataset (train, test, and the validation splits carved from train).
2. Ours: `python -m alx_trainer train --config configs/gowalla.json` (the point `alx_trainer sweep`
   picked on validation) on the full training data, then `python -m alx_trainer eval --k 20
   --ndcg_k 20` on test. Seconds per epoch are the mean over the epochs after the first (which
   compiles) in metrics.jsonl; peak memory is the child process's peak RSS (wait4).
3. implicit (`implicit.cpu.als`, CG with our number of steps) at our objective mapped to its
   parameters (below): (a) at our tuned point, (b) at its own best point of the same grid, picked on
   validation (trained on validation_train, scored on validation) and then trained on the full
   training data. Each implicit fit runs in a child process of this script (peak RSS by wait4); its
   user rows are scored by our scorer and metrics.
With --per_d: for each d, ours tuned by `alx_trainer sweep` over the grid (one call per nu, into
WORK/sweep_dD: a table already there is resumed, not rerun) and its final run on train reported
on test; implicit tuned over the same grid on validation (cached in WORK/implicit_validation.jsonl),
its best point trained on train and reported on test. One line per model and d.

The two objectives. Ours, for a row x with observed columns S against the fixed table H (rows h_j):
    sum_{i in S} (1 - h_i.x)^2 + alpha sum_{all j} (h_j.x)^2 + lambda_x |x|^2,
    lambda_x = lambda (|S| + alpha N)^nu  (N: columns of H; nu = 0 is a constant lambda),
with the same form, and the column's own lambda, for the columns. implicit 0.7 (`alpha` A, L2 weight
R, binary data) weights an observed pair by its confidence A and every other pair by 1:
    sum_{i in S} A (1 - h_i.x)^2 + sum_{j not in S} (h_j.x)^2 + R |x|^2
  = (A - 1) [ sum_{i in S} (t - h_i.x)^2 + sum_{all j} (h_j.x)^2 / (A - 1) + R |x|^2 / (A - 1) ] + const,
with t = A / (A - 1). Put A = 1 + 1/alpha: that is (1/alpha) x ours with target t = 1 + alpha instead
of 1 and lambda = alpha R. A target t is the same problem with every embedding scaled by sqrt(t)
and lambda divided by t (each term scales by t^2 except the L2 terms, by t), and a scale changes no
ranking; CG from a scaled start runs the scaled iterates. So implicit(A = 1 + 1/alpha,
R = lambda (1 + alpha) / alpha) is exactly ours at (alpha, lambda, nu = 0), up to a constant factor
of the objective and a common scale sqrt(1 + alpha) of the embeddings. At nu > 0 there is no exact
counterpart: implicit has one L2 weight for every row and column, and `implicit_params` gives it
ours at the mean user row, lambda (|S|_mean + alpha N_items)^nu (1 + alpha) / alpha: weaker than
ours on long rows and items with few users, stronger on short rows. The starts differ too:
implicit draws uniform [0, 0.01) entries, ours normal(0, --init_stddev) ones (0.1/sqrt(d) by default).
4. The published rows: LightGCN (He et al. 2020) and UltraGCN (Mao et al. 2021), Recall@20 (hits /
   |test items|) and NDCG@20 as their papers report them.

Metrics: `recall_gt@20` = hits / |test items| (LightGCN's, the published column), `recall@20` = hits /
min(20, |test items|) (the ALX paper's), NDCG@20; all items ranked, training items excluded.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

PUBLISHED = (("LightGCN (published)", 0.1830, 0.1554), ("UltraGCN (published)", 0.1862, 0.1580))


def run_child(cmd: list[str]) -> tuple[str, float, float]:
    """(stdout, peak RSS MiB, CPU seconds) of a command; a clear error with its stderr if it fails."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=REPO)
        _, status, usage = os.wait4(proc.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            err.seek(0)
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{err.read()[-3000:]}")
        out.seek(0)
        return out.read(), usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def make_dataset(data: str, out: str) -> None:
    if os.path.exists(os.path.join(out, "stats.json")):
        return
    run_child([sys.executable, "-m", "webgraph_pipeline", "--edge_format", "given_split",
               "--input", os.path.join(data, "train.txt"), "--test_input", os.path.join(data, "test.txt"),
               "--validation_fraction", "0.2", "--num_shards", "4", "--output", out])


def run_ours(config: str, data: str, model_dir: str) -> dict:
    """Train with the config file, evaluate on test; metrics, s/epoch and the train process's peak RSS."""
    _, rss, cpu = run_child([sys.executable, "-m", "alx_trainer", "train", "--config", config, "--data", data,
                             "--model_dir", model_dir, "--eval_every", "0", "--checkpoint_every", "0", "--no-progress"])
    with open(os.path.join(model_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    result_path = os.path.join(model_dir, "eval.json")
    run_child([sys.executable, "-m", "alx_trainer", "eval", "--data", data, "--model_dir", model_dir,
               "--k", "20", "--ndcg_k", "20", "--output", result_path])
    with open(result_path) as f:
        result = json.load(f)
    seconds = [r["seconds"] for r in records[1:]] or [records[0]["seconds"]]
    return dict(result, seconds_per_epoch=float(np.mean(seconds)), rss_mib=rss, cpu_s=cpu)


def implicit_params(alpha: float, lam: float, nu: float, mean_row: float, n_cols: int) -> tuple[float, float]:
    """implicit's (alpha, regularization) for our (alpha, lambda, nu): exact at nu = 0; for nu > 0, one
    constant L2 weight (the user side's lambda_r at the mean row length) where ours scales it per row."""
    return 1 + 1 / alpha, lam * (1 + alpha) / alpha * (mean_row + alpha * n_cols) ** nu


def implicit_child(args: argparse.Namespace) -> int:
    """(In a child process) fit implicit on one split at one point; print one JSON line of metrics per
    epoch count in `--eval_epochs` (default: the last), each with the mean seconds per epoch so far."""
    import scipy.sparse as sp
    from implicit.cpu.als import AlternatingLeastSquares
    from threadpoolctl import threadpool_limits

    from alx_trainer.evaluation import evaluate, metrics
    from webgraph_contract import dataset_reader, stats_json

    train_split = "validation_train" if args.split == "validation" else "train"
    stats = stats_json.read_stats(args.dataset)
    n_rows, n_cols = stats_json.matrix_shape(stats)
    train = dataset_reader.read_split(args.dataset, train_split)
    rows = np.concatenate([np.full(len(c), r) for r, c, _ in train])
    cols = np.concatenate([c for _, c, _ in train])
    user_items = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(n_rows, n_cols))
    confidence, reg = implicit_params(args.alpha, args.reg, args.nu, len(rows) / len(train), n_cols)
    model = AlternatingLeastSquares(factors=args.dim, regularization=reg, alpha=confidence,
                                    iterations=args.epochs, use_cg=True, random_state=0)
    model.cg_steps = args.cg_iters
    held = evaluate.load_eval_data(args.dataset, args.split)[0]  # the rows (and order) our evaluation uses
    held = held[: args.eval_rows] if args.eval_rows else held
    at = {int(e) for e in floats(args.eval_epochs)} if args.eval_epochs else {args.epochs}
    seconds: list[float] = []

    def on_epoch(it: int, elapsed: float, _loss) -> None:
        seconds.append(elapsed)
        if it + 1 not in at:
            return
        users, items = np.asarray(model.user_factors), np.asarray(model.item_factors)
        scorer = evaluate.ShardedScorer(items, evaluate.one_device_mesh())
        _, top = scorer.topk(users[[r for r, _, _ in held]], [c for _, c, _ in held], 20)
        result = metrics.ranking_metrics(top, [g for _, _, g in held], (20,), 20)
        result.update(epochs=it + 1, seconds_per_epoch=float(np.mean(seconds[1:] or seconds)))
        print(json.dumps(result), flush=True)

    with threadpool_limits(1, "blas"):
        model.fit(user_items, show_progress=False, callback=on_epoch)
    return 0


def run_implicit(dataset: str, split: str, dim: int, alpha: float, reg: float, nu: float, epochs: int,
                 cg_iters: int, eval_epochs: str = "", eval_rows: int = 0) -> list[dict]:
    """implicit fitted in a child process: its metrics at each evaluated epoch count (peak RSS, CPU s of the fit)."""
    out, rss, cpu = run_child([sys.executable, __file__, "--_implicit_child", "--dataset", dataset, "--split", split,
                               "--dim", str(dim), "--alpha", str(alpha), "--reg", str(reg), "--nu", str(nu),
                               "--epochs", str(epochs), "--cg_iters", str(cg_iters), "--eval_epochs", eval_epochs,
                               "--eval_rows", str(eval_rows)])
    return [dict(json.loads(line), rss_mib=rss, cpu_s=cpu) for line in out.splitlines() if line.startswith("{")]


def floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",") if v.strip()]


def lambda_grid(text: str) -> dict[float, list[float]]:
    """`"0:0.75,1.5;1:0.004"` -> {nu: [lambda, ...]} (lambda's scale depends on nu); a one-line error if malformed."""
    grid = {}
    for group in filter(str.strip, text.split(";")):
        try:
            nu, lams = group.split(":")
            grid[float(nu)] = floats(lams)
        except ValueError:
            grid[float("nan")] = []
        if not list(grid.values())[-1]:
            raise SystemExit(f"gowalla.py: error: --grid_lambdas: expected 'nu:lambda,lambda;nu:...', got {group!r}")
    return grid


def point_name(d: int, alpha: float, lam: float, nu: float, epochs: int) -> str:
    return f"d={d} alpha={alpha:g} lambda={lam:g} nu={nu:g} {epochs} ep"


def implicit_sweep(args: argparse.Namespace, data: str, d: int) -> tuple[tuple, float]:
    """implicit over the grid at d on validation (results cached in WORK/implicit_validation.jsonl):
    the best (alpha, lambda, nu, epochs) by validation Recall@20 (hits/|gt|) and that recall."""
    cache_path = os.path.join(args.work_dir, "implicit_validation.jsonl")
    cache = {}
    if os.path.exists(cache_path):
        with open(cache_path) as f:
            cache = {r["key"]: r for r in map(json.loads, f)}
    best, best_score = None, -1.0
    for nu, lams in lambda_grid(args.grid_lambdas).items():
        for lam in lams:
            for alpha in floats(args.grid_alphas):
                key = f"{d}|{alpha:g}|{lam:g}|{nu:g}|{args.grid_epochs}|{args.grid_eval_every}|{args.cg_iters}|{args.eval_rows}"
                if key not in cache:
                    every = range(args.grid_eval_every, args.grid_epochs + 1, args.grid_eval_every)
                    results = run_implicit(data, "validation", d, alpha, lam, nu, args.grid_epochs, args.cg_iters,
                                           ",".join(str(e) for e in every), args.eval_rows)
                    cache[key] = {"key": key, "results": results}
                    with open(cache_path, "a") as f:
                        f.write(json.dumps(cache[key]) + "\n")
                for r in cache[key]["results"]:
                    if r["recall_gt@20"] > best_score:
                        best, best_score = (alpha, lam, nu, int(r["epochs"])), r["recall_gt@20"]
    return best, best_score


def ours_sweep(args: argparse.Namespace, data: str, d: int) -> dict:
    """`alx_trainer sweep` over the grid at d (one call per nu; resumes a table already in WORK/sweep_dD),
    then its final run of the best point on train, evaluated on test: sweep.json's best and final."""
    out = os.path.join(args.work_dir, f"sweep_d{d}")
    groups = list(lambda_grid(args.grid_lambdas).items())
    for i, (nu, lams) in enumerate(groups):
        last = i == len(groups) - 1
        _, rss, _ = run_child([sys.executable, "-m", "alx_trainer", "sweep", "--data", data, "--out_dir", out,
                               "--dims", str(d), "--alphas", args.grid_alphas, "--nus", f"{nu:g}",
                               "--lambdas", ",".join(f"{v:g}" for v in lams), "--epochs", str(args.grid_epochs),
                               "--eval_every", str(args.grid_eval_every), "--eval_rows", str(args.eval_rows),
                               "--eval_k", "20", "--ndcg_k", "20", "--cg_iters", str(args.cg_iters), "--no-progress",
                               *args.ours_flags.split(), *([] if last else ["--no_final"])])
    with open(os.path.join(out, "sweep.json")) as f:
        result = json.load(f)
    return dict(result, rss_mib=rss)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=str(REPO / "data" / "gowalla"), help="train.txt/test.txt folder")
    p.add_argument("--config", default=str(REPO / "configs" / "gowalla.json"), help="our tuned point")
    p.add_argument("--work", default="", help="where the dataset, sweeps and models go (default: a temporary "
                   "directory); sweeps already in it are resumed, not rerun")
    p.add_argument("--per_d", default="", help="instead of the tuned point: for each d (comma-separated), ours and "
                   "implicit each tuned on validation over the grid, reported on test")
    p.add_argument("--grid_dims", default="64", help="d of implicit's own grid (without --per_d)")
    p.add_argument("--grid_alphas", default="0.005,0.01,0.02")
    p.add_argument("--grid_lambdas", default="0:0.75,1.5,3;1:0.002,0.004,0.008",
                   help="nu:lambda,... groups separated by ';' (lambda's scale depends on nu)")
    p.add_argument("--grid_epochs", type=int, default=8, help="epochs per grid point")
    p.add_argument("--grid_eval_every", type=int, default=4, help="every so many epochs is a grid point too")
    p.add_argument("--eval_rows", type=int, default=10000, help="validation rows evaluated per grid point (0: all)")
    p.add_argument("--cg_iters", type=int, default=3, help="CG steps of both (without --per_d: the config's)")
    p.add_argument("--ours_flags", default="", help="more `train` flags for our sweep (--per_d), e.g. '--init_stddev 0.01'")
    # the child mode: one implicit fit
    p.add_argument("--_implicit_child", action="store_true", help=argparse.SUPPRESS)
    for name, kind in (("dataset", str), ("split", str), ("dim", int), ("alpha", float), ("reg", float),
                       ("nu", float), ("epochs", int), ("eval_epochs", str)):
        p.add_argument(f"--{name}", type=kind, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args._implicit_child:
        return implicit_child(args)

    tmp = tempfile.TemporaryDirectory()
    args.work_dir = args.work or tmp.name
    os.makedirs(args.work_dir, exist_ok=True)
    data = os.path.join(args.work_dir, "gowalla")
    make_dataset(args.data, data)
    print(f"Gowalla (LightGCN split, pipeline given split); {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    head = f"{'model':<58} {'Recall@20':>9} {'R@20 min':>9} {'NDCG@20':>8} {'s/epoch':>8} {'peak MiB':>9} {'load':>5}"

    def line(name: str, r: dict) -> None:
        print(f"{name:<58} {r['recall_gt@20']:>9.4f} {r['recall@20']:>9.4f} {r['ndcg@20']:>8.4f} "
              f"{r['seconds_per_epoch']:>8.2f} {r.get('rss_mib', float('nan')):>9.0f} {os.getloadavg()[0]:>5.2f}",
              flush=True)

    if args.per_d:
        print(f"grid (validation, {args.eval_rows or 'all'} rows): alpha {args.grid_alphas}; nu:lambda "
              f"{args.grid_lambdas}; epochs {args.grid_eval_every}..{args.grid_epochs}; CG {args.cg_iters} steps")
        print(head)
        for d in (int(v) for v in floats(args.per_d)):
            ours = ours_sweep(args, data, d)
            b = ours["best"]
            line(f"ours, val {b['recall_gt@20']:.4f}: " + point_name(d, b["alpha"], b["lambda"], b["nu"], int(b["epochs"])),
                 dict(ours["final"]["test"], seconds_per_epoch=ours["final"]["seconds_per_epoch"], rss_mib=ours["rss_mib"]))
            (alpha, lam, nu, ep), score = implicit_sweep(args, data, d)
            line(f"implicit, val {score:.4f}: " + point_name(d, alpha, lam, nu, ep),
                 run_implicit(data, "test", d, alpha, lam, nu, ep, args.cg_iters)[-1])
    else:
        with open(args.config) as f:
            tuned = json.load(f)
        print(f"our tuned point ({args.config}): " + ", ".join(f"{k}={v}" for k, v in tuned.items()))
        print(head)
        d, epochs, cg = int(tuned["dim"]), int(tuned["epochs"]), int(tuned.get("cg_iters", 3))
        point = point_name(d, tuned["alpha"], tuned["reg"], tuned["reg_exponent"], epochs)
        line(f"ours {tuned.get('solver', 'cg')}, {point}", run_ours(args.config, data, os.path.join(args.work_dir, "ours")))
        line("implicit cg, same point", run_implicit(data, "test", d, tuned["alpha"], tuned["reg"],
                                                      tuned["reg_exponent"], epochs, cg)[-1])
        args.cg_iters = cg
        for gd in (int(v) for v in floats(args.grid_dims)):
            (alpha, lam, nu, ep), score = implicit_sweep(args, data, gd)
            line(f"implicit, own best (val {score:.4f}): " + point_name(gd, alpha, lam, nu, ep),
                 run_implicit(data, "test", gd, alpha, lam, nu, ep, cg)[-1])
    for name, recall, ndcg in PUBLISHED:
        print(f"{name:<58} {recall:>9.4f} {'':>9} {ndcg:>8.4f}")
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
