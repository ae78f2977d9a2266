"""The one power-law generator of the benchmarks, on the host (NumPy) or on the device (JAX).

Its law is `webgraph_contract.synthetic_matrix`'s (the rank density ~ rank^-s, ranks mapped to ids
through seeded permutations): on the host it is that module's own generator (row degrees a
multinomial, each row's columns drawn until distinct), as the matrices it writes to disk; on the
device the same rank law is drawn in float32 through equal-probability rank buckets whose
boundaries are the module's `rank_quantile` in float64, pairs drawn independently, deduplicated on
the device and exactly `nnz` kept. `edge_batch` draws a web-like graph's edges for the pipeline.
"""

from __future__ import annotations

import math
import time

import numpy as np

from webgraph_contract import synthetic_matrix as law

# synthetic_matrix's defaults
ROW_EXPONENT, COL_EXPONENT = 0.5, 0.7
# equal-probability rank buckets of the device generator
BUCKETS = 1 << 20
# pairs drawn at a time by the device generator (bounds its random bits' memory)
CHUNK = 1 << 26
# edge_batch: node ranks floor(n u^3), degrees of exponent 2.5
EDGE_EXPONENT = 2 / 3
# edge_batch: a multiplicative hash spreading popular ids over the range
SCRAMBLE = 2654435761


def power_law_csr(
    seed: int,
    num_rows: int,
    num_cols: int,
    nnz: int,
    on: str = "host",
    row_exponent: float = ROW_EXPONENT,
    col_exponent: float = COL_EXPONENT,
) -> tuple[np.ndarray, np.ndarray, dict]:
    """A power-law matrix as host CSR (indptr int64, cols), made on the host or the default JAX
    device (`on`); `facts`: seconds spent, and on the device the draws made."""
    if on == "device":
        return device_csr(seed, num_rows, num_cols, nnz, row_exponent, col_exponent)
    if on != "host":
        raise ValueError(f"on: expected 'host' or 'device', got {on!r}")
    t = time.perf_counter()
    rng = np.random.default_rng(seed)
    degrees = law.row_degrees(rng, num_rows, num_cols, nnz, row_exponent)
    cols = law.block_edges(rng, degrees, num_cols, col_exponent, rng.permutation(num_cols))
    indptr = np.concatenate([[0], np.cumsum(degrees)])
    return indptr, cols, {"host_s": time.perf_counter() - t}


def rank_buckets(n: int, exponent: float, buckets: int = BUCKETS) -> np.ndarray:
    """Rank boundaries B (int64, B[0] = 0, B[-1] = n): bucket b, ranks [B[b], B[b+1]), has
    probability 1/buckets under the law's CDF (a bucket narrower than a rank puts it on B[b])."""
    # checks the exponent
    law.rank_probabilities(1, exponent)
    return np.floor(law.rank_quantile(np.arange(buckets + 1) / buckets, n, exponent)).astype(
        np.int64
    )


def device_csr(
    seed: int,
    num_rows: int,
    num_cols: int,
    nnz: int,
    row_exponent: float = ROW_EXPONENT,
    col_exponent: float = COL_EXPONENT,
) -> tuple[np.ndarray, np.ndarray, dict]:
    """`device_matrix` brought to the host: (indptr int64, cols int32, facts); `facts` adds the
    seconds to the host."""
    indptr, cols, facts = device_matrix(seed, num_rows, num_cols, nnz, row_exponent, col_exponent)
    t = time.perf_counter()
    host_indptr, host_cols = np.asarray(indptr).astype(np.int64), np.asarray(cols)
    return host_indptr, host_cols, dict(facts, to_host_s=time.perf_counter() - t)


def device_matrix(
    seed: int,
    num_rows: int,
    num_cols: int,
    nnz: int,
    row_exponent: float = ROW_EXPONENT,
    col_exponent: float = COL_EXPONENT,
):
    """A power-law matrix generated on the default JAX device, left there: (indptr int32 [rows + 1],
    cols int32 [nnz], facts).

    Pairs are drawn with the law's row and column ranks (a bucket, then a uniform rank in it),
    sorted on the device, deduplicated, and exactly `nnz` distinct pairs kept at random (lowest
    random priorities, ties broken by position). Too few distinct pairs: the draw is repeated with
    more pairs. `facts`: seconds on the device, draws made.
    """
    import jax
    import jax.numpy as jnp

    if not 0 < nnz <= num_rows * num_cols // 2:
        half = num_rows * num_cols // 2
        raise ValueError(f"nnz: must be in (0, rows x cols / 2 = {half}], got {nnz}")
    if nnz >= 2**31 - 1 or max(num_rows, num_cols) >= 2**31 - 1:
        raise ValueError(
            "sizes: int32 ids and positions on the device, so rows, cols and nnz must be < 2^31"
        )
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
        tries.append(len(first))
        if distinct >= nnz:
            break
        if len(tries) == 6 or draws == 2**31 - 2:
            raise ValueError(
                f"{nnz} distinct pairs not reached in {len(tries)} draws "
                f"(last {draws} gave {distinct})"
            )
        # the device's memory for the next, larger draw
        del rows, cols, first
        factor *= 1.1 * nnz / distinct
    key_draw, key = jax.random.split(key_draw)
    indptr, kept_cols = _keep_pairs(key, rows, cols, first, nnz, num_rows)
    indptr.block_until_ready()
    return indptr, kept_cols, {"device_s": time.perf_counter() - t0, "draws": tries}


def _ranks(key, buckets, size: int):
    import jax
    import jax.numpy as jnp

    k_bucket, k_offset = jax.random.split(key)
    b = jax.random.randint(k_bucket, (size,), 0, len(buckets) - 1)
    lo, width = buckets[b], buckets[b + 1] - buckets[b]
    offset = jnp.floor(jax.random.uniform(k_offset, (size,)) * width).astype(jnp.int32)
    return lo + jnp.clip(offset, 0, jnp.maximum(width - 1, 0))


def _draw_pairs(key, b_r, b_c, perm_r, perm_c, draws: int):
    """`draws` (row, col) pairs (above `CHUNK`, rounded up to whole chunks) sorted by row then
    column, and a mask of each distinct pair's first copy."""
    import jax
    import jax.numpy as jnp

    @jax.jit
    def run(key, b_r, b_c, perm_r, perm_c):
        def draw(key, size: int):
            k_r, k_c = jax.random.split(key)
            return perm_r[_ranks(k_r, b_r, size)], perm_c[_ranks(k_c, b_c, size)]

        if draws <= CHUNK:
            rows, cols = draw(key, draws)
        # in chunks: the random bits of one chunk at a time
        else:

            def step(i, pairs):
                at = (i * CHUNK,)
                r, c = draw(jax.random.fold_in(key, i), CHUNK)
                return (
                    jax.lax.dynamic_update_slice(pairs[0], r, at),
                    jax.lax.dynamic_update_slice(pairs[1], c, at),
                )

            empty = jnp.zeros(-(-draws // CHUNK) * CHUNK, jnp.int32)
            rows, cols = jax.lax.fori_loop(0, len(empty) // CHUNK, step, (empty, empty))
        rows, cols = jax.lax.sort((rows, cols), num_keys=2)
        new = (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1])
        return rows, cols, jnp.concatenate([jnp.ones(1, bool), new])

    return run(key, b_r, b_c, perm_r, perm_c)


def _keep_pairs(key, rows, cols, first, nnz: int, num_rows: int):
    """(indptr, cols) of exactly `nnz` distinct pairs: those with the lowest random priorities."""
    import jax
    import jax.numpy as jnp

    @jax.jit
    def run(key, rows, cols, first):
        # above every drawn priority: copies are never kept
        top = jnp.iinfo(jnp.int32).max
        priority = jnp.where(first, jax.random.randint(key, first.shape, 0, top), top)
        threshold = jnp.sort(priority)[nnz - 1]
        below, tie = priority < threshold, priority == threshold
        keep = below | (tie & (jnp.cumsum(tie) <= nnz - below.sum()))
        idx = jnp.nonzero(keep, size=nnz)[0]
        bounds = jnp.arange(num_rows + 1, dtype=jnp.int32)
        indptr = jnp.searchsorted(rows[idx], bounds).astype(jnp.int32)
        return indptr, cols[idx]

    return run(key, rows, cols, first)


def edge_batch(seed: int, index: int, size: int, num_nodes: int) -> tuple[list[str], list[str]]:
    """One batch of a generated web-like graph, (sources, destinations) as `n<id>` names: both ends
    drawn with the law at exponent 2/3 (node rank floor(n u^3)), ids scrambled by a hash."""
    rng = np.random.default_rng([seed, index])
    scramble = np.arange(num_nodes, dtype=np.int64) * SCRAMBLE % num_nodes
    ends = [law.power_law_ids(rng, num_nodes, size, EDGE_EXPONENT, scramble) for _ in range(2)]
    src, dst = (np.char.add("n", e.astype(str)).tolist() for e in ends)
    return src, dst
