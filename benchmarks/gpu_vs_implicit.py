"""Ours against implicit's CUDA ALS on one GPU, in one run: seconds per epoch, memory, work rates, recall.

Made for the lent GPU machine (`../shared/gpu/README.md`: Python 3.12, JAX with CUDA, NumPy,
SciPy; no TensorFlow, no Beam, no network). On a machine with internet, first fetch implicit's
GPU wheels into `.whl/` (gitignored) and copy the project with them:

    bash benchmarks/gpu_wheels.sh

then on the GPU machine, from the project root:

    python3 benchmarks/gpu_vs_implicit.py [--sizes gowalla,10m,25m,149m] [--dims 64,1024]
        [--gowalla data/gowalla] [--epochs N] [--ours KEY=VALUE ...] [--json FILE]
        [--forms explicit:float32,explicit:tf32,explicit:bfloat16,matvec] [--forms_at gowalla:64,gowalla:1024,25m:128]
    python3 benchmarks/gpu_vs_implicit.py --sizes de-sparse --budget_s 900 --section_timeout 800  # opt-in

The run installs `.whl/*.whl` into `--site` (default /tmp/site) itself when they are there and
gives every child process the environment the GPU README lists (PYTHONPATH=site; LD_LIBRARY_PATH
with the CUDA libraries of the `nvidia` packages; JAX's memory fraction as exported, or 75%).
By hand, the same is:

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site
    export LD_LIBRARY_PATH=$(python3 -c "import glob,os,nvidia;print(':'.join(sorted({os.path.dirname(p) \
        for d in nvidia.__path__ for p in glob.glob(d+'/**/lib*.so*',recursive=True)})))"):$LD_LIBRARY_PATH

Without a GPU (or `--implicit cpu`) implicit's CPU model stands in and the table says so; at
`--sizes toy` (and `--gowalla_users`, `--peak_n`, `--copy_mib` small) it runs end to end on CPU.

What one run does, each step in its own child process (a failure, an out-of-memory or a
timeout prints one line and the run goes on; the run stops starting sections after `--budget_s`):
1. The device's own peaks: a `--peak_n`^3 matmul in bfloat16 and in float32 (HIGHEST precision,
   no TF32; and at DEFAULT precision, TF32 where XLA picks it) and a device-to-device copy of
   `--copy_mib` MiB (read + write counted); then the power-law matrices, generated on the device
   with jax.random (`power_law_csr`) and brought to the host once as CSR (generation, transfer
   and saving timed apart).
2. Gowalla (LightGCN's split: `user item item ...` lines in train.txt/test.txt) read on the host.
3. Per size and d: ours (`alx_trainer.train.train` on `dataset.in_memory`, config from
   `ours_config`; `--ours KEY=VALUE` overrides any TrainConfig field), then implicit GPU
   (`implicit.gpu.als`, CG with our `cg_iters`, float32) at our objective (`implicit_problem`).
   Seconds per epoch: the median of the epochs after the first (the first compiles).
   Ours' setup (`in_memory`'s transpose, planning, the final checkpoint) is timed apart.
4. The solve forms (`--forms`, at the `--forms_at` points, with what is left of the budget):
   ours again in each form the default ('auto', which ran in step 3, its form said by the
   child) did not run: `cg_form=matvec`, or `cg_form=explicit` with `matmul_precision`
   float32, tf32 or bfloat16. Per point, the fastest form whose Gowalla Recall@20 is within
   0.002 of the best form's there (a form that lost it on Gowalla is out at the other sizes
   too), and whether 'auto' ran it: the figures that set `cg_form` 'auto'
   (`alx_trainer/ops/spec.py`, `EXPLICIT_MAX_DIM`; DESIGN.md's trainer section).
5. One table (its form column: what each row of ours ran; 'auto: ' marks the default run),
   the forms' verdicts, and `--json` (default WORK/gpu_vs_implicit.json) with every figure.

The mapping to implicit (`benchmarks/gowalla.py` derives it): ours at (alpha, lambda, nu = 0) is
implicit with confidence 1 + 1/alpha on every observed pair and L2 weight lambda (1 + alpha) / alpha
(embeddings scaled by sqrt(1 + alpha), same rankings); at nu > 0, one L2 weight at the mean row.
implicit 0.7's GPU `fit` never applies its `alpha` (only `recalculate_user` does), so the
confidence is written into the matrix's values and both models get alpha = 1.

Work per epoch is counted, not measured (`trainer_scale.epoch_work`): the FLOPs of matrix-free CG (the same count
for both) and the bytes any implementation must move; achieved rates are set against the peaks of
step 1. Peak device memory: ours, JAX's `peak_bytes_in_use`; implicit, RMM's statistics (its
factors and work buffers) plus its two CSR copies (CUDA managed memory, outside RMM). Host peak
RSS of every child is reported too. Timings on a shared machine are noisy.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import glob
import json
import math
import os
import pathlib
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Sequence

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))


@dataclasses.dataclass(frozen=True)
class Size:
    """A power-law matrix generated on the device: shape, nonzeros, default epochs and d, our overrides."""

    rows: int
    cols: int
    nnz: int
    epochs: int
    dims: tuple[int, ...] = (128,)
    ours: tuple[tuple[str, str], ...] = ()


SIZES = {
    "toy": Size(2_000, 500, 6_000, 3, (16,)),
    "10m": Size(400_000, 100_000, 10_000_000, 3),
    "25m": Size(1_000_000, 250_000, 25_000_000, 3),
    "149m": Size(1_500_000, 1_500_000, 149_000_000, 2),  # WebGraph in-sparse
    "de-sparse": Size(19_700_000, 19_700_000, 1_190_000_000, 2, ours=(("table_dtype", "bfloat16"),)),
}
GOWALLA = "gowalla"
GOWALLA_DIMS = (64, 1024)
GOWALLA_CONFIG = REPO / "configs" / "gowalla.json"  # our tuned point; its d is replaced by --dims
ROW_EXPONENT, COL_EXPONENT = 0.5, 0.7  # as webgraph_pipeline.synthetic_matrix: rank density ~ rank^-s
BUCKETS = 1 << 20  # equal-probability rank buckets of the generator
GIB = 2.0**30
EXPLICIT_PRECISIONS = ("float32", "tf32", "bfloat16")  # TrainConfig.matmul_precision's, less 'auto'
FORMS = "explicit:float32,explicit:tf32,explicit:bfloat16,matvec"
FORMS_AT = "gowalla:64,gowalla:1024,25m:128"  # 10M and 149M nnz: ours at 'auto' only
RECALL_TOLERANCE = 0.002  # a form whose Gowalla Recall@20 is lower than the best form's by more is out


# ---------------------------------------------------------------- the matrices


def rank_buckets(n: int, exponent: float, buckets: int = BUCKETS) -> np.ndarray:
    """Rank boundaries B (int64, B[0] = 0, B[-1] = n): bucket b, ranks [B[b], B[b+1]), has probability
    1/buckets when P(rank < r) = (r / n)^(1 - exponent) (a bucket narrower than a rank puts it on B[b])."""
    if not 0 <= exponent < 1:
        raise ValueError(f"exponent: must be in [0, 1), got {exponent}")
    return np.floor(n * (np.arange(buckets + 1) / buckets) ** (1 / (1 - exponent))).astype(np.int64)


def power_law_csr(seed: int, num_rows: int, num_cols: int, nnz: int, row_exponent: float = ROW_EXPONENT,
                  col_exponent: float = COL_EXPONENT) -> tuple[np.ndarray, np.ndarray, dict]:
    """A power-law matrix generated on the default JAX device: (indptr int64, cols int32, facts).

    Pairs are drawn with Zipf-like row and column ranks (rank buckets of equal probability, then a
    uniform rank in the bucket; ranks become ids through seeded permutations), sorted on the device,
    deduplicated, and exactly `nnz` distinct pairs kept at random (lowest random priorities, ties
    broken by position). Too few distinct pairs: the draw is repeated with more pairs. Only the CSR
    arrays come to the host. `facts`: seconds on the device, seconds to the host, draws made.
    """
    import jax
    import jax.numpy as jnp

    if not 0 < nnz <= num_rows * num_cols // 2:
        raise ValueError(f"nnz: must be in (0, rows x cols / 2 = {num_rows * num_cols // 2}], got {nnz}")
    if nnz >= 2**31 - 1 or max(num_rows, num_cols) >= 2**31 - 1:
        raise ValueError("sizes: int32 ids and positions on the device, so rows, cols and nnz must be < 2^31")
    t0 = time.perf_counter()
    key_r, key_c, key_draw = jax.random.split(jax.random.key(seed), 3)
    perm_r = jax.random.permutation(key_r, num_rows).astype(jnp.int32)
    perm_c = jax.random.permutation(key_c, num_cols).astype(jnp.int32)
    b_r = jnp.asarray(rank_buckets(num_rows, row_exponent), jnp.int32)
    b_c = jnp.asarray(rank_buckets(num_cols, col_exponent), jnp.int32)
    factor, tries = 1.1, []
    while True:
        key_draw, key = jax.random.split(key_draw)
        draws = min(math.ceil(nnz * factor), 2**31 - 2)
        rows, cols, first = _draw_pairs(key, b_r, b_c, perm_r, perm_c, draws)
        distinct = int(first.sum())
        tries.append(draws)
        if distinct >= nnz:
            break
        if len(tries) == 6 or draws == 2**31 - 2:
            raise ValueError(f"{nnz} distinct pairs not reached in {len(tries)} draws (last {draws} gave {distinct})")
        factor *= 1.1 * nnz / distinct
    key_draw, key = jax.random.split(key_draw)
    indptr, kept_cols = _keep_pairs(key, rows, cols, first, nnz, num_rows)
    indptr.block_until_ready()
    t1 = time.perf_counter()
    del rows, cols, first
    host_indptr, host_cols = np.asarray(indptr).astype(np.int64), np.asarray(kept_cols)
    return host_indptr, host_cols, {"device_s": t1 - t0, "to_host_s": time.perf_counter() - t1, "draws": tries}


def _ranks(key, buckets, size: int):
    import jax
    import jax.numpy as jnp

    k_bucket, k_offset = jax.random.split(key)
    b = jax.random.randint(k_bucket, (size,), 0, len(buckets) - 1)
    lo, width = buckets[b], buckets[b + 1] - buckets[b]
    offset = jnp.floor(jax.random.uniform(k_offset, (size,)) * width).astype(jnp.int32)
    return lo + jnp.clip(offset, 0, jnp.maximum(width - 1, 0))


def _draw_pairs(key, b_r, b_c, perm_r, perm_c, draws: int):
    """`draws` (row, col) pairs sorted by row then column, and a mask of each distinct pair's first copy."""
    import jax
    import jax.numpy as jnp

    @jax.jit
    def run(key, b_r, b_c, perm_r, perm_c):
        k_r, k_c = jax.random.split(key)
        rows, cols = perm_r[_ranks(k_r, b_r, draws)], perm_c[_ranks(k_c, b_c, draws)]
        rows, cols = jax.lax.sort((rows, cols), num_keys=2)
        first = jnp.concatenate([jnp.ones(1, bool), (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1])])
        return rows, cols, first

    return run(key, b_r, b_c, perm_r, perm_c)


def _keep_pairs(key, rows, cols, first, nnz: int, num_rows: int):
    """(indptr, cols) of exactly `nnz` distinct pairs: those with the lowest random priorities."""
    import jax
    import jax.numpy as jnp

    @jax.jit
    def run(key, rows, cols, first):
        top = jnp.iinfo(jnp.int32).max  # above every drawn priority: copies are never kept
        priority = jnp.where(first, jax.random.randint(key, first.shape, 0, top), top)
        threshold = jnp.sort(priority)[nnz - 1]
        below, tie = priority < threshold, priority == threshold
        keep = below | (tie & (jnp.cumsum(tie) <= nnz - below.sum()))
        idx = jnp.nonzero(keep, size=nnz)[0]
        kept_rows = rows[idx]
        indptr = jnp.searchsorted(kept_rows, jnp.arange(num_rows + 1, dtype=jnp.int32)).astype(jnp.int32)
        return indptr, cols[idx]

    return run(key, rows, cols, first)


def read_gowalla(folder: str, users: int = 0) -> dict[str, np.ndarray | int]:
    """train.txt / test.txt (`user item item ...` per line) as two CSR matrices over the same ids;
    `users` > 0 keeps the users below that id (a slice for small runs)."""
    split = {}
    for name in ("train", "test"):
        path = os.path.join(folder, f"{name}.txt")
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path}: not found (--gowalla names the folder of train.txt and test.txt)")
        rows: dict[int, np.ndarray] = {}
        with open(path) as f:
            for number, line in enumerate(f, 1):
                ids = line.split()
                if not ids:
                    continue
                try:
                    values = np.array(ids, np.int64)
                except ValueError:
                    raise ValueError(f"{path}:{number}: expected integers 'user item item ...'") from None
                if (values < 0).any():
                    raise ValueError(f"{path}:{number}: negative id")
                if not users or values[0] < users:
                    rows[int(values[0])] = np.unique(values[1:])
        split[name] = rows
    num_rows = 1 + max(max(r) for r in split.values() if r)
    num_cols = 1 + max(int(c.max()) for r in split.values() for c in r.values() if len(c))
    out: dict[str, np.ndarray | int] = {"num_rows": num_rows, "num_cols": num_cols}
    for name, rows in split.items():
        lengths = np.zeros(num_rows, np.int64)
        for r, c in rows.items():
            lengths[r] = len(c)
        out[f"{name}_indptr"] = np.concatenate([[0], np.cumsum(lengths)])
        out[f"{name}_cols"] = np.concatenate([rows[r] for r in sorted(rows)] or [np.zeros(0, np.int64)])
    return out


def save_matrix(folder: pathlib.Path, arrays: dict[str, np.ndarray | int], facts: dict) -> dict:
    """Arrays as .npy files and facts (with the shape) as meta.json; the meta, with the seconds to save."""
    t = time.perf_counter()
    folder.mkdir(parents=True, exist_ok=True)
    for name, value in arrays.items():
        if isinstance(value, np.ndarray):
            np.save(folder / f"{name}.npy", value)
    meta = dict(facts, rows=int(arrays["num_rows"]), cols=int(arrays["num_cols"]),
                nnz=int(len(arrays["train_cols"])), save_s=time.perf_counter() - t)
    (folder / "meta.json").write_text(json.dumps(meta))
    return meta


def load_matrix(folder: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads((pathlib.Path(folder) / "meta.json").read_text())
    for path in glob.glob(os.path.join(folder, "*.npy")):
        out[pathlib.Path(path).stem] = np.load(path)
    return out


# ---------------------------------------------------------------- the two trainers' settings and work


def ours_config(size: str, dim: int, epochs: int | None, model_dir: str, overrides: Sequence[str] = ()):
    """Our TrainConfig for one section: Gowalla from configs/gowalla.json, the power-law sizes at the
    trainer's defaults; no evaluation, training loss or progress, and no checkpoint before the last
    epoch's (which the trainer always writes; it falls in `setup_s`); then the size's own overrides
    and `overrides` (`KEY=VALUE`, any TrainConfig field, typed as a config file)."""
    from alx_trainer.config import TrainConfig, parse_dataclass_args

    values: dict[str, Any] = {}
    if size == GOWALLA:
        values.update(json.loads(GOWALLA_CONFIG.read_text()))
    if size in SIZES:
        values.update(SIZES[size].ours, epochs=SIZES[size].epochs)
    values.update(data=size, model_dir=model_dir, dim=dim, eval_every=0, train_loss_every=0, checkpoint_every=0,
                  progress=False, log_level="warning", **({"epochs": epochs} if epochs else {}))
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--ours: expected KEY=VALUE, got {item!r}")
        values[key.strip()] = value.strip()
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:  # typed and checked as a config file
        json.dump(values, f)
        f.flush()
        return parse_dataclass_args(TrainConfig, ["--config", f.name]).validate()


def form_overrides(form: str) -> list[str]:
    """The `--ours` overrides of one solve form of `--forms`: 'matvec' (matrix-free CG) or
    'explicit:PRECISION' (d x d normal matrices whose h h^T products run at PRECISION)."""
    kind, _, precision = form.partition(":")
    if kind == "matvec" and not precision:
        return ["cg_form=matvec"]
    if kind == "explicit" and precision in EXPLICIT_PRECISIONS:
        return ["cg_form=explicit", f"matmul_precision={precision}"]
    raise ValueError(f"--forms: expected 'matvec' or 'explicit:' with one of {EXPLICIT_PRECISIONS}, got {form!r}")


def solve_form(config) -> dict:
    """What `config` runs on this backend: `form` in the names of `--forms` ('matvec', 'explicit:PRECISION';
    an exact solver is 'SOLVER:PRECISION', iALS++ 'block') and whether the accelerator path is on."""
    from alx_trainer.ops import spec

    step = spec.step_spec(config, num_other=1)
    if step.solver == "block":
        form = "block"
    elif step.solver == "cg":
        form = "matvec" if step.matvec else f"explicit:{step.precision}"
    else:
        form = f"{step.solver}:{step.precision}"
    return {"form": form, "accelerator": spec.accelerator(config)}


def choose_form(rows: Sequence[dict], tolerance: float = RECALL_TOLERANCE, excluded: Sequence[str] = ()) -> dict:
    """The fastest solve form among `rows` (ours at one size and d, one row per form).

    A form is a candidate when it was timed, is not in `excluded` (forms that lost recall elsewhere
    in the run), and, where recall was scored, its Recall@20 is at most `tolerance` below the best
    form's there. Returns `fastest` (None when no form qualifies), its `s_per_epoch` and `recall`,
    and `why_not`: the reason each other form was passed over.
    """
    scored = [r["recall_gt@20"] for r in rows if r.get("recall_gt@20") is not None]
    best_recall = max(scored, default=None)
    why_not: dict[str, str] = {}
    candidates = []
    for r in rows:
        recall_value = r.get("recall_gt@20")
        if not r.get("s_per_epoch"):
            why_not[r["form"]] = r.get("error") or "not timed"
        elif r["form"] in excluded:
            why_not[r["form"]] = f"lost more than {tolerance} Recall@20 on Gowalla"
        elif best_recall is not None and (recall_value is None or recall_value < best_recall - tolerance):
            why_not[r["form"]] = f"Recall@20 {fmt(recall_value, '.4f')} < best {best_recall:.4f} - {tolerance}"
        else:
            candidates.append(r)
    fastest = min(candidates, key=lambda r: r["s_per_epoch"], default=None)
    for r in candidates:
        if r is not fastest:
            why_not[r["form"]] = f"slower: {r['s_per_epoch'] / fastest['s_per_epoch']:.2f}x"
    return {"fastest": fastest and fastest["form"], "s_per_epoch": fastest and fastest["s_per_epoch"],
            "recall_gt@20": fastest and fastest.get("recall_gt@20"), "why_not": why_not}


def implicit_problem(indptr: np.ndarray, cols: np.ndarray, num_cols: int, alpha: float, reg: float,
                     reg_exponent: float):
    """implicit's input for our objective: (CSR matrix whose values are the confidences, regularization).

    Fit it with implicit's alpha = 1: the GPU model ignores alpha in `fit`, the CPU model multiplies by it.
    """
    import scipy.sparse as sp
    from gowalla import implicit_params

    lengths = np.diff(indptr)
    mean_row = float(lengths.sum() / max(1, np.count_nonzero(lengths)))
    confidence, regularization = implicit_params(alpha, reg, reg_exponent, mean_row, num_cols)
    data = np.full(len(cols), confidence, np.float32)
    matrix = sp.csr_matrix((data, np.asarray(cols, np.int32), np.asarray(indptr, np.int64)),
                           shape=(len(indptr) - 1, num_cols))
    return matrix, regularization


# ---------------------------------------------------------------- child processes


def one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]


def device_child(spec: dict, out: pathlib.Path) -> None:
    """Peaks of the device, then each power-law size generated and saved (one failure each, not all)."""
    import jax

    device = jax.devices()[0]
    report: dict[str, Any] = {"platform": device.platform, "device_kind": device.device_kind,
                              "devices": jax.device_count(), "jax": jax.__version__, "peaks": {}, "data": {}}
    for name, measure in (("matmul_bf16_flop_s", lambda: matmul_rate(spec["peak_n"], "bfloat16", "DEFAULT")),
                          ("matmul_f32_flop_s", lambda: matmul_rate(spec["peak_n"], "float32")),
                          ("matmul_f32_default_flop_s", lambda: matmul_rate(spec["peak_n"], "float32", "DEFAULT")),
                          ("copy_bytes_s", lambda: copy_rate(spec["copy_mib"]))):
        try:
            report["peaks"][name] = measure()
        except Exception as e:  # one line, and the run goes on
            report["peaks"][name] = None
            report["peaks"][f"{name}_error"] = one_line(e)
    write_line(out, {"device": report})
    for size in spec["generate"]:
        s = SIZES[size]
        try:
            indptr, cols, facts = power_law_csr(spec["seed"], s.rows, s.cols, s.nnz)
            arrays = {"num_rows": s.rows, "num_cols": s.cols, "train_indptr": indptr, "train_cols": cols}
            meta = save_matrix(pathlib.Path(spec["work"]) / "data" / size, arrays, dict(facts, source="jax.random"))
        except Exception as e:
            meta = {"error": one_line(e)}
        write_line(out, {"data": {size: meta}})


def timed_calls(fn, args: tuple, calls: int = 10) -> float:
    """Seconds per call of a jitted function, calls queued back to back after a warm-up."""
    fn(*args).block_until_ready()
    t = time.perf_counter()
    for _ in range(calls):
        y = fn(*args)
    y.block_until_ready()
    return (time.perf_counter() - t) / calls


def matmul_rate(n: int, dtype: str, precision: str = "HIGHEST") -> float:
    """FLOP/s of an n^3 matmul at a precision: float32 HIGHEST is true float32; DEFAULT lets XLA use
    TF32 (NVIDIA) or bfloat16 passes (TPU) for float32 inputs."""
    import jax
    import jax.numpy as jnp

    a = jax.random.normal(jax.random.key(0), (n, n), dtype)
    b = jax.random.normal(jax.random.key(1), (n, n), dtype)
    precision = getattr(jax.lax.Precision, precision)
    return 2 * n**3 / timed_calls(jax.jit(lambda a, b: jnp.dot(a, b, precision=precision)), (a, b))


def copy_rate(mib: int) -> float:
    """Bytes/s of a device-to-device copy of `mib` MiB (an elementwise pass: read once, written once)."""
    import jax
    import jax.numpy as jnp

    x = jnp.ones(mib * 2**20 // 4, jnp.float32)
    return 2 * x.nbytes / timed_calls(jax.jit(lambda x: x + 1), (x,))


def device_memory() -> dict:
    """JAX's peak and limit on the first device in GiB (None where the backend keeps no statistics)."""
    import jax

    stats = jax.local_devices()[0].memory_stats() or {}
    peak, limit = stats.get("peak_bytes_in_use"), stats.get("bytes_limit")
    return {"peak_device_gib": peak / GIB if peak is not None else None,
            "peak_device_source": "JAX peak_bytes_in_use" if peak is not None else None,
            "device_limit_gib": limit / GIB if limit is not None else None}


def gowalla_rows(m: dict) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """(user, training items, test items) of every user with test items: the rows Recall@20 ranks."""
    rows = []
    for u in range(m["rows"]):
        gt = m["test_cols"][m["test_indptr"][u] : m["test_indptr"][u + 1]]
        if len(gt):
            rows.append((u, m["train_cols"][m["train_indptr"][u] : m["train_indptr"][u + 1]], gt))
    return rows


def recall(row_table: np.ndarray, col_table: np.ndarray, m: dict) -> dict:
    """Recall@20 (hits/|test|: `recall_gt@20`; hits/min(20, |test|): `recall@20`) and NDCG@20 on Gowalla's
    test users, scored from the trained user rows, training items excluded (our evaluator for both)."""
    from alx_trainer.evaluation.evaluate import evaluate

    t = time.perf_counter()
    result = evaluate((row_table, col_table), gowalla_rows(m), ks=(20,), ndcg_k=20, baseline=False, trained_rows=True)
    return dict({k: result[k] for k in ("recall_gt@20", "recall@20", "ndcg@20")}, eval_s=time.perf_counter() - t)


def ours_child(spec: dict, out: pathlib.Path) -> None:
    """Ours on one matrix: per-epoch seconds as they come, then timings, memory, recall (Gowalla)."""
    from alx_trainer.callbacks import Callback
    from alx_trainer.config import TrainConfig
    from alx_trainer.data.dataset import in_memory
    from alx_trainer.model import table_dtype
    from alx_trainer.train import train

    class EpochLine(Callback):
        def on_epoch_end(self, run, epoch: int, record: dict) -> None:
            write_line(out, {"epoch": epoch, "seconds": record["seconds"]})

    t = time.perf_counter()
    m = load_matrix(spec["data"])
    load_s = time.perf_counter() - t
    t = time.perf_counter()
    dataset = in_memory(spec["size"], m["train_indptr"], m["train_cols"], m["cols"])
    dataset_s = time.perf_counter() - t
    config = TrainConfig(**spec["config"])
    shutil.rmtree(config.model_dir, ignore_errors=True)  # a fresh run, never a resumed one
    t = time.perf_counter()
    model = train(config, dataset=dataset, callbacks=[EpochLine()], tables=spec["size"] == GOWALLA)
    train_s = time.perf_counter() - t
    seconds = [r["seconds"] for r in model.metrics]
    result = dict(device_memory(), **solve_form(config), load_s=load_s, dataset_s=dataset_s,
                  setup_s=train_s - sum(seconds), epochs_s=seconds, table_bytes=int(np.dtype(table_dtype(config)).itemsize),
                  table_dtype=str(np.dtype(table_dtype(config))))
    write_line(out, {"result": result})
    if spec["size"] == GOWALLA:
        write_line(out, {"result": recall(model.row_table, model.col_table, m)})


def implicit_child(spec: dict, out: pathlib.Path) -> None:
    """implicit at our objective: GPU model (or its CPU model standing in), same epochs and CG steps."""
    import implicit.gpu

    c = spec["config"]
    gpu = spec["implicit"] == "gpu" or (spec["implicit"] == "auto" and implicit.gpu.HAS_CUDA)
    t = time.perf_counter()
    m = load_matrix(spec["data"])
    matrix, regularization = implicit_problem(m["train_indptr"], m["train_cols"], m["cols"], c["alpha"], c["reg"],
                                              c["reg_exponent"])
    load_s = time.perf_counter() - t
    kwargs = {"factors": c["dim"], "regularization": regularization, "alpha": 1.0, "iterations": c["epochs"],
              "calculate_training_loss": False, "random_state": c["seed"]}
    if gpu:
        import rmm.statistics
        from implicit.gpu.als import AlternatingLeastSquares

        rmm.statistics.enable_statistics()
        model = AlternatingLeastSquares(**kwargs)
    else:
        from implicit.cpu.als import AlternatingLeastSquares
        from threadpoolctl import threadpool_limits

        model = AlternatingLeastSquares(**kwargs, use_cg=True, num_threads=0)
    model.cg_steps = c["cg_iters"]
    seconds: list[float] = []

    def on_epoch(it: int, elapsed: float, _loss) -> None:
        seconds.append(elapsed)
        write_line(out, {"epoch": it + 1, "seconds": elapsed})

    t = time.perf_counter()
    with contextlib.nullcontext() if gpu else threadpool_limits(1, "blas"):  # implicit's advice for its CPU model
        model.fit(matrix, show_progress=False, callback=on_epoch)
    fit_s = time.perf_counter() - t
    result: dict[str, Any] = {"who": "implicit-gpu" if gpu else "implicit-cpu", "load_s": load_s, "epochs_s": seconds,
                              "setup_s": fit_s - sum(seconds), "table_bytes": 4, "table_dtype": "float32",
                              "peak_device_gib": None, "regularization": regularization,
                              "confidence": float(matrix.data[0]) if matrix.nnz else None}
    if gpu:
        result.update(implicit_memory(rmm.statistics.get_statistics(), matrix, c["dim"]))
        model = model.to_cpu()
    write_line(out, {"result": result})  # the timings stand even if scoring fails
    if spec["size"] == GOWALLA:
        write_line(out, {"result": recall(np.asarray(model.user_factors), np.asarray(model.item_factors), m)})


def implicit_memory(stats, matrix, dim: int) -> dict:
    """implicit GPU's peak device memory: RMM's peak (factors, gramians, buffers) plus its two CSR copies,
    which it allocates as CUDA managed memory outside RMM. Where RMM saw less than the two factor tables
    (its statistics did not reach implicit's allocator), the same allocations counted instead."""
    users, items = matrix.shape
    managed = 2 * (4 * (users + items + 2) + 8 * matrix.nnz)  # Cui and Ciu: indptr, indices, data
    counted = 4 * dim * (users + items + 2 * dim)  # the two tables and the two d x d gramians, float32
    measured = stats is not None and stats.peak_bytes >= 4 * dim * (users + items)
    return {"peak_device_gib": ((stats.peak_bytes if measured else counted) + managed) / GIB,
            "peak_device_source": "RMM statistics + managed CSR" if measured else "counted"}


def write_line(out: pathlib.Path, record: dict) -> None:
    """Append a JSON line to the child's output (a result line carries the child's peak host RSS)."""
    if "result" in record:
        record["result"]["peak_host_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    with open(out, "a") as f:
        f.write(json.dumps(record) + "\n")


def child_main(kind: str, spec_path: str) -> None:
    spec = json.loads(pathlib.Path(spec_path).read_text())
    out = pathlib.Path(spec["out"])
    {"device": device_child, "ours": ours_child, "implicit": implicit_child}[kind](spec, out)


# ---------------------------------------------------------------- the run


def child_env(wheels: pathlib.Path, site: pathlib.Path) -> dict[str, str]:
    """The environment of every child: wheels in `wheels` installed into `site` (once) and put on
    PYTHONPATH, the `nvidia` packages' libraries on LD_LIBRARY_PATH (the GPU README's steps)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    found = sorted(glob.glob(str(wheels / "*.whl")))
    if not found:
        return env
    if not (site / "implicit").is_dir():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                        "--no-cache-dir", "--target", str(site), *found], check=True)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH", "")]))
    roots = [str(site), *[p for p in sys.path if p and os.path.isdir(p)]]
    libs = sorted({os.path.dirname(p) for root in roots
                   for p in glob.glob(os.path.join(root, "nvidia", "**", "lib*.so*"), recursive=True)})
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [*libs, os.environ.get("LD_LIBRARY_PATH", "")]))
    return env


@dataclasses.dataclass
class Runner:
    """Runs child processes within the run's budget; each gives its JSON lines or one line of error."""

    work: pathlib.Path
    env: dict[str, str]
    deadline: float
    section_timeout: float

    def __call__(self, kind: str, name: str, spec: dict) -> tuple[list[dict], str | None, float]:
        left = min(self.section_timeout, self.deadline - time.monotonic())
        if left < 5:
            return [], "skipped: the run's --budget_s is spent", 0.0
        out, log = self.work / "logs" / f"{name}.jsonl", self.work / "logs" / f"{name}.log"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.unlink(missing_ok=True)
        spec_path = self.work / "logs" / f"{name}.spec.json"
        spec_path.write_text(json.dumps(dict(spec, out=str(out), work=str(self.work))))
        cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), "--_child", kind, str(spec_path)]
        # implicit's child uses JAX only to score, after the fit: it must not take the GPU's memory first
        env = dict(self.env, XLA_PYTHON_CLIENT_PREALLOCATE="false") if kind == "implicit" else self.env
        error, t = None, time.monotonic()
        with open(log, "w") as err:
            try:
                run = subprocess.run(cmd, stdout=err, stderr=subprocess.STDOUT, env=env, cwd=REPO, timeout=left)
                if run.returncode:
                    error = f"exit {run.returncode}: {last_line(log)}"
            except subprocess.TimeoutExpired:
                error = f"timed out after {left:.0f} s"
        return json_lines(out), error, time.monotonic() - t


def json_lines(path: pathlib.Path) -> list[dict]:
    """A child's JSON lines; a line cut short by a kill is left out."""
    lines = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            lines.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return lines


def last_line(log: pathlib.Path) -> str:
    """The last non-empty line of a child's output (a traceback's exception line)."""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


def merged_result(lines: list[dict]) -> dict:
    """A child's result lines merged in order (timings first, then recall where it was scored)."""
    result: dict = {}
    for line in lines:
        result.update(line.get("result", {}))
    return result


def section_figures(lines: list[dict], error: str | None, work: tuple[float, float], peaks: dict) -> dict:
    """One trainer's figures from its child's lines: s/epoch (median after the first), rates, memory."""
    result = merged_result(lines)
    seconds = result.get("epochs_s") or [line["seconds"] for line in lines if "epoch" in line]
    timed = seconds[1:] or seconds
    s = float(np.median(timed)) if timed else None
    flops, byte_count = work
    f32, bf16, bw = (peaks.get(k) for k in ("matmul_f32_flop_s", "matmul_bf16_flop_s", "copy_bytes_s"))
    figures = {
        "s_per_epoch": s, "epochs_s": seconds, "error": error, "note": None,
        "flops_per_epoch": flops, "bytes_per_epoch": byte_count,
        "gflop_s": flops / s / 1e9 if s else None, "gb_s": byte_count / s / 1e9 if s else None,
        "pct_f32_peak": 100 * flops / s / f32 if s and f32 else None,
        "pct_bf16_peak": 100 * flops / s / bf16 if s and bf16 else None,
        "pct_copy_bw": 100 * byte_count / s / bw if s and bw else None,
    }
    for key in ("who", "form", "accelerator", "peak_device_gib", "peak_device_source", "device_limit_gib", "peak_host_gib",
                "table_dtype", "setup_s", "load_s", "dataset_s", "eval_s", "recall_gt@20", "recall@20", "ndcg@20",
                "regularization", "confidence"):
        figures[key] = result.get(key)
    return figures


def run_section(runner: Runner, args: argparse.Namespace, report: dict, size: str, dim: int, config, who: str,
                name: str) -> dict:
    """One trainer's child on one matrix at one d (log and spec files under `name`): its table row."""
    from trainer_scale import epoch_work

    meta, peaks = report["data"][size], report["device"].get("peaks", {})
    spec = {"size": size, "data": str(runner.work / "data" / size), "config": config.to_dict(),
            "implicit": args.implicit}
    lines, error, child_s = runner(who, name, spec)
    table_bytes = merged_result(lines).get("table_bytes", 4)
    work_counts = epoch_work(meta["rows"], meta["cols"], meta["nnz"], dim, config.cg_iters, table_bytes)
    figures = section_figures(lines, error, work_counts, peaks)
    figures["who"] = figures["who"] or ("ours" if who == "ours" else "implicit")
    if figures["who"] == "implicit-cpu" and report["device"].get("platform") == "gpu":
        figures["note"] = f"implicit's CUDA model did not load: its CPU model stood in (logs/{name}.log)"
    return dict(size=size, dim=dim, epochs=config.epochs, cg_iters=config.cg_iters, child_s=child_s, **figures)


def add_row(report: dict, r: dict, implicit_s: float | None) -> None:
    """A row into the report with its ratio to implicit's seconds per epoch, and its line printed."""
    r["ratio"] = r["s_per_epoch"] / implicit_s if r["s_per_epoch"] and implicit_s else None
    report["sections"].append(r)
    print(f"{r['size']} d={r['dim']} {r['who']}" + (f" ({r['form']})" if r.get("form") else "") + ": "
          + (f"{r['s_per_epoch']:.4f} s/epoch" if r["s_per_epoch"] else "-")
          + (f", ratio {r['ratio']:.2f}" if r["ratio"] else "")
          + (f", Recall@20 {r['recall_gt@20']:.4f}" if r["recall_gt@20"] is not None else "")
          + (f"; {r['error']}" if r["error"] else ""), flush=True)


def compare_forms(runner: Runner, args: argparse.Namespace, report: dict, plan: list,
                  implicit_s: dict[tuple[str, int], float | None]) -> list[dict]:
    """Ours in each `--forms` solve form at the `--forms_at` points, after every section (so the
    comparison takes what is left of `--budget_s`); the form 'auto' ran is not run again. Gowalla's
    points first: a form that loses recall there is no candidate at the other sizes either."""
    points = sorted((p for p in plan if p[3]), key=lambda p: p[0] != GOWALLA)
    out, lost = [], set()
    for size, dim, _, forms in points:
        meta = report["data"].get(size, {})
        if "error" in meta or not meta:
            continue
        auto = next((r for r in report["sections"] if (r["size"], r["dim"], r["who"]) == (size, dim, "ours")), {})
        rows = [dict(auto, variant="auto")] if auto.get("form") in forms else []
        for form, config in forms.items():
            if form != auto.get("form"):
                name = f"{size}-d{dim}-ours-{form.replace(':', '-')}"
                r = run_section(runner, args, report, size, dim, config, "ours", name)
                r["form"], r["variant"] = r["form"] or form, form
                add_row(report, r, implicit_s.get((size, dim)))
                rows.append(r)
        choice = choose_form(rows, excluded=() if size == GOWALLA else sorted(lost))
        if size == GOWALLA:
            lost.update(f for f, why in choice["why_not"].items() if why.startswith("Recall@20"))
        compared = any(r["form"] == auto.get("form") for r in rows)
        choice.update(size=size, dim=dim, auto=auto.get("form"),
                      auto_is_fastest=choice["fastest"] == auto["form"] if compared and choice["fastest"] else None,
                      forms={r["form"]: {k: r[k] for k in ("s_per_epoch", "recall_gt@20", "error")} for r in rows})
        out.append(choice)
        print(f"forms {size} d={dim}: fastest " + (f"{choice['fastest']} {choice['s_per_epoch']:.4f} s/epoch"
              if choice["fastest"] else "none") + (f", Recall@20 {choice['recall_gt@20']:.4f}"
              if choice["recall_gt@20"] is not None else "") + f"; 'auto' ran {choice['auto'] or '?'}", flush=True)
    return out


def gowalla_data(args: argparse.Namespace, work: pathlib.Path) -> dict:
    t = time.perf_counter()
    arrays = read_gowalla(args.gowalla, args.gowalla_users)
    return save_matrix(work / "data" / GOWALLA, arrays, {"source": args.gowalla, "read_s": time.perf_counter() - t})


def fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_table(sections: list[dict]) -> None:
    head = (f"{'size':<10}{'d':>5}  {'who':<13}{'form (auto: default)':<23}{'s/epoch':>9}{'ratio':>7}{'dev GiB':>8}"
            f"{'GFLOP/s':>9}{'%f32':>6}{'%bf16':>6}{'GB/s':>8}{'%copy':>6}{'R@20':>7}  note")
    print("\n" + head + "\n" + "-" * len(head))
    for r in sections:
        note = r["error"] or r["note"] or ""
        form = r.get("form") or "-" if r.get("variant") or not r.get("form") else f"auto: {r['form']}"
        print(f"{r['size']:<10}{r['dim']:>5}  {r['who'] or '?':<13}{form:<23}{fmt(r['s_per_epoch'], '.4f'):>9}"
              f"{fmt(r['ratio'], '.2f'):>7}{fmt(r['peak_device_gib'], '.2f'):>8}{fmt(r['gflop_s'], '.0f'):>9}"
              f"{fmt(r['pct_f32_peak'], '.1f'):>6}{fmt(r['pct_bf16_peak'], '.1f'):>6}{fmt(r['gb_s'], '.0f'):>8}"
              f"{fmt(r['pct_copy_bw'], '.1f'):>6}{fmt(r['recall_gt@20'], '.4f'):>7}  {note}")


def forms_point(item: str) -> tuple[str, int | None]:
    """One `--forms_at` entry: 'SIZE:D' as (size, d), 'SIZE' as (size, None) (its every d)."""
    size, sep, dim = item.partition(":")
    if size != GOWALLA and size not in SIZES or sep and not dim.isdigit():
        raise ValueError(f"--forms_at: expected SIZE or SIZE:D with SIZE of {[GOWALLA, *SIZES]}, got {item!r}")
    return size, int(dim) if sep else None


def print_forms(choices: list[dict]) -> None:
    """Per compared (size, d): the fastest candidate form, what 'auto' ran, and why each other form lost."""
    if choices:
        print(f"\nsolve forms (fastest of those within {RECALL_TOLERANCE} of the best Gowalla Recall@20):")
    for c in choices:
        verdict = {True: "auto ran it", False: f"auto ran {c['auto']}", None: f"auto ran {c['auto'] or '?'}, not compared"}
        print(f"  {c['size']} d={c['dim']}: " + (f"{c['fastest']} {c['s_per_epoch']:.4f} s/epoch"
              if c["fastest"] else "none") + f" ({verdict[c['auto_is_fastest']]}); "
              + "; ".join(f"{form}: {why}" for form, why in c["why_not"].items()))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="gowalla,10m,25m,149m", help=f"comma-separated, of {[GOWALLA, *SIZES]}")
    p.add_argument("--dims", default="", help=f"d for every size (default: Gowalla {GOWALLA_DIMS}, power law 128)")
    p.add_argument("--epochs", type=int, default=0, help="epochs per run (0: Gowalla's config, 3 up to 25M nnz, else 2)")
    p.add_argument("--gowalla", default=str(REPO / "data" / "gowalla"), help="train.txt/test.txt folder")
    p.add_argument("--gowalla_users", type=int, default=0, help="only users below this id (0: all)")
    p.add_argument("--ours", action="append", default=[], metavar="KEY=VALUE", help="a TrainConfig field for ours")
    p.add_argument("--forms", default=FORMS,
                   help="solve forms compared for ours at --forms_at ('matvec', 'explicit:float32|tf32|bfloat16'; '' none)")
    p.add_argument("--forms_at", default=FORMS_AT,
                   help="where the forms are compared: SIZE:D or SIZE (its every d), comma-separated; only planned ones run")
    p.add_argument("--implicit", choices=("auto", "gpu", "cpu", "off"), default="auto",
                   help="implicit's model: auto = GPU when its CUDA extension loads, else CPU (said in the table)")
    p.add_argument("--peak_n", type=int, default=8192, help="matmul size of the peak measurement")
    p.add_argument("--copy_mib", type=int, default=2048, help="MiB copied by the bandwidth measurement")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "gpu_vs_implicit"))
    p.add_argument("--json", default="", help="where the JSON of every figure goes (default WORK/gpu_vs_implicit.json)")
    p.add_argument("--budget_s", type=float, default=340, help="no section starts after this many seconds of the run")
    p.add_argument("--section_timeout", type=float, default=300, help="seconds one child process may run")
    p.add_argument("--wheels", default=str(REPO / ".whl"), help="wheel files installed for the children, if any")
    p.add_argument("--site", default=os.path.join(tempfile.gettempdir(), "site"), help="where those wheels go")
    args = p.parse_args(argv)
    args.size_list = [s for s in args.sizes.split(",") if s]
    bad = [s for s in args.size_list if s != GOWALLA and s not in SIZES]
    if bad or not args.size_list:
        p.error(f"--sizes: unknown {bad or args.sizes!r}; choose from {[GOWALLA, *SIZES]}")
    try:
        args.dim_list = [int(d) for d in args.dims.split(",") if d.strip()]
    except ValueError:
        p.error(f"--dims: expected comma-separated integers, got {args.dims!r}")
    if any(d <= 0 for d in args.dim_list) or args.epochs < 0:
        p.error("--dims and --epochs: must be positive")
    args.form_list = list(dict.fromkeys(f.strip() for f in args.forms.split(",") if f.strip()))
    try:
        for form in args.form_list:
            form_overrides(form)
        args.forms_at = {forms_point(item.strip()) for item in args.forms_at.split(",") if item.strip()}
    except ValueError as e:
        p.error(str(e))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    start = time.monotonic()
    work = pathlib.Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    try:
        env = child_env(pathlib.Path(args.wheels), pathlib.Path(args.site))
    except subprocess.CalledProcessError as e:
        print(f"wheels: install into {args.site} failed ({e}); children run with the environment as it is")
        env = dict(os.environ)
    runner = Runner(work, env, start + args.budget_s, args.section_timeout)
    report: dict[str, Any] = {"run": {"argv": sys.argv[1:] if argv is None else list(argv), "host": platform.node(),
                                      "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
                              "device": {}, "data": {}, "sections": []}
    # sizes, d, epochs and configs first: a bad --ours fails here, in one line, before any work
    plan = []
    for size in args.size_list:
        for dim in args.dim_list or (GOWALLA_DIMS if size == GOWALLA else SIZES[size].dims):
            model_dir = str(work / "models" / f"{size}-d{dim}")
            compared = args.form_list if (size, dim) in args.forms_at or (size, None) in args.forms_at else []
            try:
                config = ours_config(size, dim, args.epochs, model_dir, args.ours)
                forms = {form: ours_config(size, dim, args.epochs, f"{model_dir}-{form.replace(':', '-')}",
                                           [*args.ours, *form_overrides(form)]) for form in compared}
            except ValueError as e:
                print(f"gpu_vs_implicit.py: error: {one_line(e)}", file=sys.stderr)
                return 2
            plan.append((size, dim, config, forms))

    generate = [s for s in args.size_list if s in SIZES]
    lines, error, child_s = runner("device", "device", {"generate": generate, "seed": args.seed, "peak_n": args.peak_n,
                                               "copy_mib": args.copy_mib})
    for line in lines:
        report["device"].update(line.get("device", {}))
        report["data"].update(line.get("data", {}))
    report["device"]["child_s"] = child_s
    peaks = report["device"].get("peaks", {})
    def peak(key: str, scale: float) -> str:
        return fmt(peaks[key] / scale if peaks.get(key) else None, ".1f")

    print(f"device: {report['device'].get('device_kind', '?')} ({report['device'].get('platform', '?')}); "
          f"matmul bf16 {peak('matmul_bf16_flop_s', 1e12)} TFLOP/s, f32 {peak('matmul_f32_flop_s', 1e12)} "
          f"(DEFAULT precision {peak('matmul_f32_default_flop_s', 1e12)}) TFLOP/s, copy {peak('copy_bytes_s', 1e9)} GB/s"
          + (f"; device step: {error}" if error else ""), flush=True)
    if GOWALLA in args.size_list:
        try:
            report["data"][GOWALLA] = gowalla_data(args, work)
        except (OSError, ValueError) as e:
            report["data"][GOWALLA] = {"error": one_line(e)}
    for size in args.size_list:
        meta = report["data"].get(size, {"error": "not generated (the device step failed)"})
        print(f"data {size}: " + (meta["error"] if "error" in meta else
              f"{meta['rows']:,} x {meta['cols']:,}, {meta['nnz']:,} nnz; " +
              ", ".join(f"{k} {meta[k]:.2f} s" for k in ("device_s", "to_host_s", "read_s", "save_s") if k in meta)),
              flush=True)

    implicit_s: dict[tuple[str, int], float | None] = {}
    for size, dim, config, _ in plan:
        meta = report["data"].get(size, {})
        if "error" in meta or not meta:
            continue
        rows: dict[str, dict] = {}
        for who in ("ours", "implicit") if args.implicit != "off" else ("ours",):
            rows[who] = run_section(runner, args, report, size, dim, config, who, f"{size}-d{dim}-{who}")
        base = implicit_s[size, dim] = rows.get("implicit", {}).get("s_per_epoch")
        for r in rows.values():
            add_row(report, r, base)
    report["forms"] = compare_forms(runner, args, report, plan, implicit_s)

    report["run"]["seconds"] = time.monotonic() - start
    print_table(report["sections"])
    print_forms(report["forms"])
    path = pathlib.Path(args.json or work / "gpu_vs_implicit.json")
    path.write_text(json.dumps(report, indent=1, default=float))
    print(f"\n{len(report['sections'])} rows in {report['run']['seconds']:.0f} s; figures in {path}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--_child":
        child_main(sys.argv[2], sys.argv[3])
    else:
        sys.exit(main())
