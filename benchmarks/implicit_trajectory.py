"""Ours and implicit from the SAME start tables, compared after every half-epoch.

    python benchmarks/implicit_trajectory.py --data G [--dim 256] [--alpha 0.01] [--reg 1.5]
        [--epochs 4] [--cg_iters 3] [--init_stddev 0] [--split validation] [--eval_rows 10000]

At nu = 0 our objective is implicit 0.7's with confidence 1 + 1/alpha and L2 weight
lambda (1 + alpha) / alpha, its embeddings scaled by t = sqrt(1 + alpha) (see benchmarks/gowalla.py).
Our trainer (`alx_trainer.train.train`, the command line's devices) runs the epochs; a callback
starts implicit's `least_squares_cg` from our initial tables times t and runs its half-epochs in
lockstep. After every half-epoch it prints, for the side just solved:
- `traj`: median / largest per-row relative difference between our table and implicit's (divided by
  t), each having run its own trajectory from the shared start;
- `step`: the same for implicit's half-epoch run from OUR tables before it (isolates one step:
  warm start, Gramian, CG recurrences, long rows);
- each model's objective (ours, float64, from its tables) and, after each epoch, Recall@20
  (hits/|gt|) / NDCG@20 on the split's first `--eval_rows` rows scored from the trained user rows;
  after the last epoch also scored as `alx_trainer eval` scores (each user folded in from its
  training items: `cg_iters` CG steps from zero against the item table).
"""

from __future__ import annotations

import argparse
import math
import os
import pathlib
import sys
import tempfile
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def objective(users: np.ndarray, items: np.ndarray, rows: np.ndarray, cols: np.ndarray, alpha: float,
              lam: float) -> float:
    """Ours at nu = 0 in float64: sum_obs (1 - u.v)^2 + alpha <U^T U, V^T V> + lam (|U|^2 + |V|^2)."""
    u, v = users.astype(np.float64), items.astype(np.float64)
    observed = 0.0
    for s in range(0, len(rows), 1 << 16):
        r, c = rows[s : s + (1 << 16)], cols[s : s + (1 << 16)]
        observed += float(np.sum((1 - np.einsum("nd,nd->n", u[r], v[c])) ** 2))
    return observed + alpha * float(np.sum((u.T @ u) * (v.T @ v))) + lam * float(np.sum(u * u) + np.sum(v * v))


def rel_diff(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Median and largest per-row |a - b| / |b| over the rows where b is not zero."""
    norm = np.linalg.norm(b, axis=1)
    rel = np.linalg.norm(a - b, axis=1)[norm > 0] / norm[norm > 0]
    return float(np.median(rel)), float(rel.max())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="a given-split dataset with validation splits")
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--alpha", type=float, default=0.01)
    p.add_argument("--reg", type=float, default=1.5)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--cg_iters", type=int, default=3)
    p.add_argument("--init_stddev", type=float, default=0.0, help="of our start (0: 0.1/sqrt(dim), train's default)")
    p.add_argument("--split", choices=("validation", "test"), default="validation")
    p.add_argument("--eval_rows", type=int, default=10000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ours_flags", default="", help="more TrainConfig fields, 'name=value,...' (e.g. cg_form=explicit)")
    args = p.parse_args(argv)

    from alx_trainer.cli.train import split_cpu
    from alx_trainer.config import TrainConfig

    fields = dict(kv.split("=") for kv in args.ours_flags.split(",") if kv)
    work = tempfile.TemporaryDirectory()
    config = TrainConfig(
        data=args.data, model_dir=work.name, dim=args.dim, alpha=args.alpha, reg=args.reg, reg_exponent=0.0,
        epochs=args.epochs, cg_iters=args.cg_iters, init_stddev=args.init_stddev,
        seed=args.seed, eval_every=0, checkpoint_every=0, progress=False, validation=args.split == "validation",
    )
    config = TrainConfig(**{**config.to_dict(), **{k: type(getattr(config, k))(v) for k, v in fields.items()}})
    split_cpu(config)

    import scipy.sparse as sp
    from implicit.cpu import _als
    from threadpoolctl import threadpool_limits

    from alx_trainer.callbacks import Callback
    from alx_trainer.evaluation import evaluate, metrics
    from alx_trainer.model import trim
    from alx_trainer.train import train
    from webgraph_pipeline import contract

    n_rows, n_cols = contract.matrix_shape(contract.read_stats(args.data))
    train_split = "validation_train" if args.split == "validation" else "train"
    records = contract.read_split(args.data, train_split)
    rows = np.concatenate([np.full(len(c), r) for r, c, _ in records])
    cols = np.concatenate([c for _, c, _ in records])
    t = math.sqrt(1 + args.alpha)
    confidence, l2 = 1 + 1 / args.alpha, args.reg * (1 + args.alpha) / args.alpha
    cui = sp.csr_matrix((np.full(len(rows), confidence, np.float32), (rows, cols)), shape=(n_rows, n_cols))
    ciu = cui.T.tocsr()
    held = evaluate.load_eval_data(args.data, args.split)[0][: args.eval_rows]
    print(f"d={args.dim} alpha={args.alpha} lambda={args.reg} nu=0 CG {args.cg_iters} start N(0, {config.start_stddev():.4g}) "
          f"{train_split}: {n_rows} x {n_cols}, {len(rows)} pairs; {args.split} {len(held)} rows; "
          f"rows without pairs: {int(np.sum(np.diff(cui.indptr) == 0))} users, {int(np.sum(np.diff(ciu.indptr) == 0))} items; "
          f"load {os.getloadavg()[0]:.1f}", flush=True)

    def quality(users: np.ndarray, items: np.ndarray, fold: bool = False) -> str:
        if fold:
            m = evaluate.evaluate((None, items), held, config, ks=(20,), ndcg_k=20, mesh=evaluate.one_device_mesh())
        else:
            scorer = evaluate.ShardedScorer(items, evaluate.one_device_mesh())
            _, top = scorer.topk(users[[r for r, _, _ in held]], [c for _, c, _ in held], 20)
            m = metrics.ranking_metrics(top, [g for _, _, g in held], (20,), 20)
        return f"R@20 {m['recall_gt@20']:.4f} N@20 {m['ndcg@20']:.4f}"

    def implicit_half(side: str, users: np.ndarray, items: np.ndarray) -> None:
        """implicit's half-epoch in place on tables in implicit's scale."""
        with threadpool_limits(1, "blas"):
            if side == "row":
                _als.least_squares_cg(cui, users, items, l2, num_threads=2, cg_steps=args.cg_iters)
            else:
                _als.least_squares_cg(ciu, items, users, l2, num_threads=2, cg_steps=args.cg_iters)

    class Trace(Callback):
        def on_train_begin(self, run) -> None:
            self.ours = {"row": trim(run.tables["row"], n_rows), "col": trim(run.tables["col"], n_cols)}
            self.imp = {k: np.ascontiguousarray(v * t, np.float32) for k, v in self.ours.items()}
            self.clock = time.perf_counter()

        def on_half_epoch_end(self, run, epoch: int, side: str) -> None:
            seconds = time.perf_counter() - self.clock
            before = self.ours
            new = trim(run.tables[side], n_rows if side == "row" else n_cols)
            step = {k: np.ascontiguousarray(v * t, np.float32) for k, v in before.items()}
            implicit_half(side, step["row"], step["col"])
            implicit_half(side, self.imp["row"], self.imp["col"])
            self.ours = dict(before, **{side: new})
            imp = {k: v / t for k, v in self.imp.items()}
            traj, one = rel_diff(new, imp[side]), rel_diff(new, step[side] / t)
            line = (f"epoch {epoch} {side:>3}: traj {traj[0]:.1e} / {traj[1]:.1e}  step {one[0]:.1e} / {one[1]:.1e}  "
                    f"objective ours {objective(self.ours['row'], self.ours['col'], rows, cols, args.alpha, args.reg):.6e} "
                    f"implicit {objective(imp['row'], imp['col'], rows, cols, args.alpha, args.reg):.6e}")
            if side == "col":
                line += f"  ours {quality(**self.ours_tables())}  implicit {quality(imp['row'], imp['col'])}"
            print(f"{line}  ({seconds:.0f} s ours, load {os.getloadavg()[0]:.1f})", flush=True)
            if side == "col" and epoch == args.epochs:
                print(f"folded in as `alx_trainer eval` does: ours {quality(**self.ours_tables(), fold=True)}  "
                      f"implicit {quality(imp['row'], imp['col'], fold=True)}", flush=True)
            self.clock = time.perf_counter()

        def ours_tables(self) -> dict:
            return {"users": self.ours["row"], "items": self.ours["col"]}

    train(config, callbacks=[Trace()], tables=False)
    work.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
