"""Gowalla (LightGCN's split) against the published table, through the command line.

    python benchmarks/gowalla.py [--data ../shared/data/gowalla] [--config configs/gowalla.json]
        [--work DIR] [--grid_dims 64] [--grid_alphas 0.01,0.02,0.04] [--grid_lambdas 0.001,0.002,0.004]
        [--grid_nus 1] [--grid_epochs 5,10]

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
implicit draws uniform [0, 0.01) entries, ours normal(0, --init_stddev) ones.
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
    """(In a child process) fit implicit on one split at one point; print its metrics as JSON."""
    import scipy.sparse as sp
    from implicit.cpu.als import AlternatingLeastSquares
    from threadpoolctl import threadpool_limits

    from alx_trainer.evaluation import evaluate, metrics
    from webgraph_pipeline import contract

    train_split, eval_split = ("validation_train", "validation") if args.split == "validation" else ("train", "test")
    stats = contract.read_stats(args.dataset)
    n_rows, n_cols = contract.matrix_shape(stats)
    train = contract.read_split(args.dataset, train_split)
    rows = np.concatenate([np.full(len(c), r) for r, c, _ in train])
    cols = np.concatenate([c for _, c, _ in train])
    user_items = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(n_rows, n_cols))
    confidence, reg = implicit_params(args.alpha, args.reg, args.nu, len(rows) / len(train), n_cols)
    model = AlternatingLeastSquares(factors=args.dim, regularization=reg, alpha=confidence,
                                    iterations=args.epochs, use_cg=True, random_state=0)
    model.cg_steps = args.cg_iters
    seconds: list[float] = []
    with threadpool_limits(1, "blas"):
        model.fit(user_items, show_progress=False, callback=lambda it, elapsed, loss: seconds.append(elapsed))
    users, items = np.asarray(model.user_factors), np.asarray(model.item_factors)
    held = contract.read_split(args.dataset, eval_split)
    scorer = evaluate.ShardedScorer(items, evaluate.one_device_mesh())
    _, top = scorer.topk(users[[r for r, _, _ in held]], [c for _, c, _ in held], 20)
    result = metrics.ranking_metrics(top, [g for _, _, g in held], (20,), 20)
    result["seconds_per_epoch"] = float(np.mean(seconds[1:] or seconds))
    print(json.dumps(result))
    return 0


def run_implicit(dataset: str, split: str, dim: int, alpha: float, reg: float, nu: float, epochs: int,
                 cg_iters: int) -> dict:
    out, rss, cpu = run_child([sys.executable, __file__, "--_implicit_child", "--dataset", dataset, "--split", split,
                               "--dim", str(dim), "--alpha", str(alpha), "--reg", str(reg), "--nu", str(nu),
                               "--epochs", str(epochs), "--cg_iters", str(cg_iters)])
    return dict(json.loads(out.strip().splitlines()[-1]), rss_mib=rss, cpu_s=cpu)


def floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",") if v.strip()]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=str(REPO.parent / "shared" / "data" / "gowalla"), help="train.txt/test.txt folder")
    p.add_argument("--config", default=str(REPO / "configs" / "gowalla.json"), help="our tuned point")
    p.add_argument("--work", default="", help="where the dataset and models go (default: a temporary directory)")
    p.add_argument("--grid_dims", default="64", help="implicit's grid (the one our sweep searched)")
    p.add_argument("--grid_alphas", default="0.01,0.02,0.04")
    p.add_argument("--grid_lambdas", default="0.001,0.002,0.004")
    p.add_argument("--grid_nus", default="1")
    p.add_argument("--grid_epochs", default="5,10")
    # the child mode: one implicit fit
    p.add_argument("--_implicit_child", action="store_true", help=argparse.SUPPRESS)
    for name, kind in (("dataset", str), ("split", str), ("dim", int), ("alpha", float), ("reg", float),
                       ("nu", float), ("epochs", int), ("cg_iters", int)):
        p.add_argument(f"--{name}", type=kind, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args._implicit_child:
        return implicit_child(args)

    with open(args.config) as f:
        tuned = json.load(f)
    tmp = tempfile.TemporaryDirectory()
    work = args.work or tmp.name
    os.makedirs(work, exist_ok=True)
    data = os.path.join(work, "gowalla")
    make_dataset(args.data, data)
    print(f"Gowalla (LightGCN split, pipeline given split); {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    print(f"our tuned point ({args.config}): " + ", ".join(f"{k}={v}" for k, v in tuned.items()))
    head = f"{'model':<44} {'Recall@20':>9} {'R@20 min':>9} {'NDCG@20':>8} {'s/epoch':>8} {'peak MiB':>9} {'load':>5}"
    print(head)

    def line(name: str, r: dict) -> None:
        print(f"{name:<44} {r['recall_gt@20']:>9.4f} {r['recall@20']:>9.4f} {r['ndcg@20']:>8.4f} "
              f"{r['seconds_per_epoch']:>8.2f} {r['rss_mib']:>9.0f} {os.getloadavg()[0]:>5.2f}", flush=True)

    d, epochs, cg = int(tuned["dim"]), int(tuned["epochs"]), int(tuned.get("cg_iters", 3))
    point = f"d={d} alpha={tuned['alpha']:g} lambda={tuned['reg']:g} nu={tuned['reg_exponent']:g} {epochs} ep"
    line(f"ours {tuned.get('solver', 'cg')}, {point}", run_ours(args.config, data, os.path.join(work, "ours")))
    line("implicit cg, same point", run_implicit(data, "test", d, tuned["alpha"], tuned["reg"],
                                                  tuned["reg_exponent"], epochs, cg))
    best, best_score = None, -1.0
    for gd in floats(args.grid_dims):
        for nu in floats(args.grid_nus):
            for lam in floats(args.grid_lambdas):
                for alpha in floats(args.grid_alphas):
                    for ep in floats(args.grid_epochs):
                        r = run_implicit(data, "validation", int(gd), alpha, lam, nu, int(ep), cg)
                        if r["recall_gt@20"] > best_score:
                            best, best_score = (int(gd), alpha, lam, nu, int(ep)), r["recall_gt@20"]
    gd, alpha, lam, nu, ep = best
    line(f"implicit cg, own best (validation {best_score:.4f}): d={gd} alpha={alpha:g} lambda={lam:g} nu={nu:g} {ep} ep",
         run_implicit(data, "test", gd, alpha, lam, nu, ep, cg))
    for name, recall, ndcg in PUBLISHED:
        print(f"{name:<44} {recall:>9.4f} {'':>9} {ndcg:>8.4f}")
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
