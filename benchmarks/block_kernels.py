"""Where the iALS++ block sweep spends its time on CPU, at the trainer's real batch shapes.

    python benchmarks/block_kernels.py [--dim 1024] [--block_sizes 16,32,64] [--rows 160] [--unrolled_max 32]

One dense batch as the trainer packs Gowalla (`--pieces` 256 pieces of `--piece_len` 16 ids, about
`--rows` 160 row slots, d = `--dim`), random data. In one process, interleaved, median of
`--repeats` calls after a warm-up (compilation excluded):
- the whole batch sweep (`block_solver.sweep`) per block size, and its parts for one block: the
  column slice of the gathered rows, the b x b statistics (per-piece outer products, then the
  segment sum over each row's pieces), the Gramian term x G[:, block], and the b x b solves;
- the b x b solves two ways: LAPACK (`jnp.linalg.cholesky` + two triangular solves, what the
  sweep uses) and a Cholesky vectorized over the rows in plain XLA operations (unrolled over the
  b columns: rank-1 updates of the shrinking trailing matrix, the right-hand side eliminated
  alongside, then back substitution), the candidate for running on per-core devices, for
  b <= `--unrolled_max` (it compiles slowly beyond).
FLOPs are counted from the shapes (useful work only): the statistics 2 B L b^2, the Gramian term
2 R d b, a Cholesky solve b^3/3 + 2 b^2 per row.
"""

from __future__ import annotations

import argparse
import functools
import os
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))


def unrolled_cholesky_solve(a, g):
    """x with a x = g for a [R, k, k] SPD and g [R, k], in elementwise XLA operations (no LAPACK)."""
    import jax.numpy as jnp

    k = a.shape[-1]
    pivots, columns, ys = [], [], []
    trail, rhs = a, g
    for _ in range(k):
        pivot = jnp.sqrt(trail[:, 0, 0])
        column = trail[:, 1:, 0] / pivot[:, None]
        y = rhs[:, 0] / pivot
        trail = trail[:, 1:, 1:] - column[:, :, None] * column[:, None, :]
        rhs = rhs[:, 1:] - column * y[:, None]
        pivots.append(pivot)
        columns.append(column)
        ys.append(y)
    x = (ys[-1] / pivots[-1])[:, None]
    for j in range(k - 2, -1, -1):
        xj = (ys[j] - jnp.sum(columns[j] * x, axis=-1)) / pivots[j]
        x = jnp.concatenate([xj[:, None], x], axis=-1)
    return x


def lapack_cholesky_solve(a, g):
    import jax
    import jax.numpy as jnp

    chol = jnp.linalg.cholesky(a)
    y = jax.scipy.linalg.solve_triangular(chol, g[..., None], lower=True)
    return jax.scipy.linalg.solve_triangular(chol, y, lower=True, trans=1)[..., 0]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--block_sizes", default="16,32,64")
    parser.add_argument("--pieces", type=int, default=256)
    parser.add_argument("--piece_len", type=int, default=16)
    parser.add_argument("--rows", type=int, default=160)
    parser.add_argument("--unrolled_max", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)

    import jax
    import jax.numpy as jnp

    from alx_trainer.ops import block_solver

    d, B, L, R = args.dim, args.pieces, args.piece_len, args.rows
    rng = np.random.default_rng(0)
    h = jnp.asarray(rng.normal(size=(B, L, d)).astype(np.float32) * 0.05)
    seg = jnp.asarray(np.sort(rng.integers(0, R, size=B)).astype(np.int32))
    x = jnp.asarray(rng.normal(size=(R, d)).astype(np.float32) * 0.05)
    fixed = rng.normal(size=(4 * d, d)).astype(np.float32) * 0.05
    gram = jnp.asarray(fixed.T @ fixed)
    lam = jnp.ones(R, jnp.float32)
    valid = jnp.ones(R, bool)

    cases = {}  # name -> (jitted fn, args, FLOPs)
    for b in (int(v) for v in args.block_sizes.split(",")):
        blocks = -(-d // b)
        sweep_flops = 2 * B * L * d + blocks * (2 * B * L * b * b + 4 * B * L * b + R * (2 * d * b + b**3 / 3 + 2 * b * b))
        cases[f"sweep, b={b}"] = (
            jax.jit(functools.partial(lambda h, s, x, g, lm, b: block_solver.sweep(h, s, x, g, lm, 0.02, valid, b)[0], b=b)),
            (h, seg, x, gram, lam),
            sweep_flops,
        )
        hb = h[:, :, :b]
        cases[f"  slice h[:, :, block], b={b}"] = (
            jax.jit(functools.partial(lambda h, b: jax.lax.dynamic_slice_in_dim(h, b, b, 2), b=b)),
            (h,),
            0,
        )
        cases[f"  statistics (outer + segment sum), b={b}"] = (
            jax.jit(lambda hb, s: jax.ops.segment_sum(jnp.einsum("bli,blj->bij", hb, hb), s, num_segments=R)),
            (hb, seg),
            2 * B * L * b * b,
        )
        cases[f"  Gramian term x G[:, block], b={b}"] = (
            jax.jit(functools.partial(lambda x, g, b: x @ jax.lax.dynamic_slice_in_dim(g, b, b, 1), b=b)),
            (x, gram),
            2 * R * d * b,
        )
        m = rng.normal(size=(R, b, 2 * b)).astype(np.float32)
        spd = jnp.asarray(m @ m.transpose(0, 2, 1) + np.eye(b, dtype=np.float32))
        rhs = x[:, :b]
        solve_flops = R * (b**3 / 3 + 2 * b * b)
        cases[f"  solves, LAPACK, b={b}"] = (jax.jit(lapack_cholesky_solve), (spd, rhs), solve_flops)
        if b <= args.unrolled_max:
            cases[f"  solves, unrolled XLA Cholesky, b={b}"] = (jax.jit(unrolled_cholesky_solve), (spd, rhs), solve_flops)

    compile_s = {}
    for name, (fn, fn_args, _) in cases.items():
        start = time.perf_counter()
        fn(*fn_args).block_until_ready()
        compile_s[name] = time.perf_counter() - start
    times = {name: [] for name in cases}
    for _ in range(args.repeats):
        for name, (fn, fn_args, _) in cases.items():
            start = time.perf_counter()
            fn(*fn_args).block_until_ready()
            times[name].append(time.perf_counter() - start)
    print(
        f"one batch: {B} pieces x {L} ids, {R} rows, d={d}; {os.cpu_count()} CPUs, one JAX device; "
        f"median of {args.repeats} calls; load {os.getloadavg()[0]:.2f}"
    )
    print(f"{'case':<48} {'ms':>9} {'GFLOP/s':>8} {'first call s':>12}")
    for name, (_, _, flops) in cases.items():
        t = float(np.median(times[name]))
        rate = f"{flops / t / 1e9:8.1f}" if flops else f"{'':>8}"
        print(f"{name:<48} {t * 1e3:9.3f} {rate} {compile_s[name]:12.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
