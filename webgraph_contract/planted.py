"""A web graph with planted structure, whose link probabilities are known: generator and oracle.

    python -m webgraph_contract.planted --out DIR --scale 0.01 [--seed 0] [--on host|device]
        [--validation_fraction F]

The law (`Params`, the same at every scale; scale 1 is the de-sparse size, 19.7M pages):
- Pages fall in `communities` communities (a number fixed at every scale) whose sizes follow the
  rank law of `synthetic_matrix.rank_probabilities` (exponent `community_exponent`), the pages
  allotted exactly (largest remainders). Inside community c each page has a popularity rank; over
  all pages each has a global popularity rank (both by seeded random permutations).
- Page i makes `draws[i]` link draws, a Pareto count floor(degree_min u^(-1/degree_shape)),
  capped at `degree_cap`. A draw goes with probability `in_share` into the page's own community, to
  its member of rank r with probability q(r; size_c, community_popularity), else to the page of
  global rank r with q(r; pages, global_popularity), where q is a power law of exponent a > 1 over
  ranks (a Pareto density (x + 1)^-a on [0, n), the rank its floor):
      q(r; n, a) = ((r + 1)^(1 - a) - (r + 2)^(1 - a)) / (1 - (n + 1)^(1 - a)),
  whose head keeps its mass whatever n (so the law looks the same at every scale). A draw of page
  i in community c reaches page t with
      p(t | c) = in_share [t in c] q(rank_c(t); size_c, a_c) + (1 - in_share) q(rank(t); N, a_g),
  and t is among i's links with probability 1 - (1 - p(t | c))^draws[i] (monotone in p): the
  links are the distinct targets of the draws, self-links dropped (the pipeline drops them).
- Strong generalization, the contract's test split (`holdout`): a page with a candidate uniform
  below `test_fraction` and at least two links is a test row; a random h = clamp(floor(f n + u),
  1, n - 1) of its n links are held out (`gt_tag`), the rest kept for its fold-in (`col_tag`).
- Validation, for tuning (`validation_split`, `--validation_fraction F`, off by default): the same
  rule applied to the training pages with their own uniforms (NumPy's PCG64 from (seed, 2): a
  candidate uniform per page, then a rounding uniform per page; the order keys of the links of
  block b of `BLOCK_PAGES` pages from (seed, 3, b), one per validation link in page and id order).
  A training page with a candidate uniform below F and at least two links is a validation row,
  held out whole from `validation_train` as a test row is from `train` (strong generalization:
  the evaluator folds it in from its kept links, as it does a test row).

The structure (`Structure`: communities, ranks, draw counts, the per-page uniforms) is made on the
host by NumPy from (pages, seed) alone. The links are drawn on the host (`host_graph`: NumPy in
blocks of pages over the host's cores, each block from its own seed) or on a JAX device
(`device_graph`: chunks of draws, each sorted and split on the device), with the same law; the two
draw different links (different random streams) but the same distribution.

The oracle (`oracle_top_k`) ranks each test row's columns by p(t | c), its fold-in links and
itself excluded (the evaluator's rules on a graph); `popularity_top_k` ranks them by training
in-degree. `write` puts the graph (and its validation split) in a dataset directory through
`dataset_writer`.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import functools
import json
import math
import os
import sys
import time
from typing import Any, Sequence

import numpy as np

from webgraph_contract import dataset_writer, holdout, layout
from webgraph_contract import synthetic_matrix as law
from webgraph_contract.ragged import RaggedRows

DE_SPARSE_PAGES = 19_700_000  # pages at scale 1 (the WebGraph de-sparse variant)
BLOCK_PAGES = 1 << 14  # pages per host block (each its own random stream)
CHUNK_DRAWS = 1 << 26  # draws per device chunk at most (bounds the device's memory)
SENTINEL = np.iinfo(np.int32).max


@dataclasses.dataclass(frozen=True)
class Params:
    """The planted law (see the module's docstring); `pages` and `seed` fix the graph."""

    pages: int
    seed: int = 0
    communities: int = 100
    community_exponent: float = 0.5
    in_share: float = 0.8
    community_popularity: float = 1.2
    global_popularity: float = 1.1
    degree_min: float = 33.0
    degree_shape: float = 1.5
    degree_cap: int = 10_000
    test_fraction: float = 0.1
    holdout_fraction: float = 0.25

    @classmethod
    def at_scale(cls, scale: float, seed: int = 0, **overrides: Any) -> Params:
        """The law at `scale` times the de-sparse size: only the pages scale (other parameters
        as given in `overrides`, or the defaults)."""
        return cls(pages=max(1, round(DE_SPARSE_PAGES * scale)), seed=seed, **overrides)

    def check(self) -> None:
        """A ValueError naming the first parameter outside its range."""
        if not 0 <= self.community_exponent < 1:
            raise ValueError(
                f"community_exponent: must be in [0, 1), got {self.community_exponent}"
            )
        for name in ("community_popularity", "global_popularity"):
            if not getattr(self, name) > 1:
                raise ValueError(f"{name}: must be above 1, got {getattr(self, name)}")
        for name in ("in_share", "test_fraction", "holdout_fraction"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name}: must be in [0, 1], got {getattr(self, name)}")
        if not 1 <= self.communities <= self.pages:
            raise ValueError(f"communities: must be in [1, pages = {self.pages}]")
        if self.degree_min < 1 or self.degree_shape <= 0 or self.degree_cap < 1:
            raise ValueError("degree_min >= 1, degree_shape > 0 and degree_cap >= 1 are required")
        if self.pages >= 2**31 - 1:
            raise ValueError(f"pages: int32 ids, so fewer than 2^31 - 1, got {self.pages}")


def rank_mass(rank: np.ndarray, n, exponent: float) -> np.ndarray:
    """q(r; n, a) = ((r + 1)^(1 - a) - (r + 2)^(1 - a)) / (1 - (n + 1)^(1 - a)) in float64, the
    difference as -(r + 1)^(1 - a) expm1((1 - a) log1p(1 / (r + 1))) (no cancellation in the
    tail)."""
    r = np.asarray(rank, np.float64)
    b = 1.0 - exponent
    head = -((r + 1) ** b) * np.expm1(b * np.log1p(1.0 / (r + 1)))
    return head / -np.expm1(b * np.log(np.asarray(n, np.float64) + 1))


def tail_start(n, exponent: float):
    """t = (n + 1)^(1 - a): a draw w uniform in [t, 1] gives the rank floor(w^(1 / (1 - a)) - 1)
    with probability q(r; n, a) (NumPy or jax.numpy arrays alike)."""
    return (n + 1.0) ** (1.0 - exponent)


def community_sizes(pages: int, communities: int, exponent: float) -> np.ndarray:
    """Pages per community: `pages` allotted by the rank law's shares, largest remainders first
    (ties to the lower index), at least one page each."""
    share = law.rank_probabilities(communities, exponent)
    spare = pages - communities
    want = share / share.sum() * spare
    sizes = np.floor(want).astype(np.int64)
    extra = spare - int(sizes.sum())
    sizes[np.lexsort((np.arange(communities), -(want - sizes)))[:extra]] += 1
    return sizes + 1


@dataclasses.dataclass
class Structure:
    """The planted structure of `params`: who is in which community, the popularity ranks, the
    draw counts and the per-page uniforms of the split."""

    params: Params
    sizes: np.ndarray  # int64 [C]: pages per community
    starts: np.ndarray  # int64 [C + 1]: community c holds slots starts[c]..starts[c + 1] - 1
    page_of_slot: np.ndarray  # int32 [N]: slot starts[c] + r is community c's page of rank r
    community: np.ndarray  # int32 [N]: each page's community
    community_rank: np.ndarray  # int32 [N]: each page's rank in its community
    page_of_rank: np.ndarray  # int32 [N]: the page of each global popularity rank
    global_rank: np.ndarray  # int32 [N]: each page's global popularity rank
    draws: np.ndarray  # int32 [N]: link draws per page
    test_u: np.ndarray  # float64 [N]: a page is a test candidate when below test_fraction
    round_u: np.ndarray  # float64 [N]: the stochastic rounding of its held-out count

    def probability(self, sources: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """p(target | source's community) of one draw, float64, for each (source, target)."""
        p = self.params
        sources, targets = np.asarray(sources), np.asarray(targets)
        c = self.community[sources]
        inside = self.community[targets] == c
        q_in = rank_mass(self.community_rank[targets], self.sizes[c], p.community_popularity)
        q_out = rank_mass(self.global_rank[targets], p.pages, p.global_popularity)
        return p.in_share * np.where(inside, q_in, 0.0) + (1 - p.in_share) * q_out


def structure(params: Params) -> Structure:
    """The structure of `params`, from (pages, seed) and the law only (NumPy's PCG64)."""
    params.check()
    n = params.pages
    rng = np.random.default_rng([params.seed, 0])
    sizes = community_sizes(n, params.communities, params.community_exponent)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    page_of_slot = rng.permutation(n).astype(np.int32)
    slot_of_page = np.empty(n, np.int32)
    slot_of_page[page_of_slot] = np.arange(n, dtype=np.int32)
    community = (np.searchsorted(starts, slot_of_page, "right") - 1).astype(np.int32)
    page_of_rank = rng.permutation(n).astype(np.int32)
    global_rank = np.empty(n, np.int32)
    global_rank[page_of_rank] = np.arange(n, dtype=np.int32)
    pareto = params.degree_min * (1.0 - rng.random(n)) ** (-1.0 / params.degree_shape)
    draws = np.minimum(np.floor(pareto), params.degree_cap).astype(np.int32)
    return Structure(
        params,
        sizes,
        starts,
        page_of_slot,
        community,
        (slot_of_page - starts[community]).astype(np.int32),
        page_of_rank,
        global_rank,
        draws,
        rng.random(n),
        rng.random(n),
    )


@dataclasses.dataclass
class Graph:
    """A drawn planted graph: `train` (every non-test page with a link), `test` (the test rows'
    fold-in links) and `held` (their held-out links, the same rows); ids int32, sorted per row."""

    structure: Structure
    train: RaggedRows
    test: RaggedRows
    held: RaggedRows

    @property
    def links(self) -> int:
        """Every link of the graph: training, fold-in and held out."""
        return self.train.nnz + self.test.nnz + self.held.nnz


def _host_block(s: Structure, block: int) -> tuple[np.ndarray, np.ndarray]:
    """One block of pages drawn, deduplicated and split on the host: (links per page and class
    [3, pages]: train, fold-in, held out; the targets of each class in turn, by page and id)."""
    p = s.params
    lo = block * BLOCK_PAGES
    hi = min(lo + BLOCK_PAGES, p.pages)
    rng = np.random.default_rng([p.seed, 1, block])
    local = np.repeat(np.arange(hi - lo, dtype=np.int64), s.draws[lo:hi])
    c = s.community[lo:hi][local]
    inside = rng.random(len(local)) < p.in_share
    n = np.where(inside, s.sizes[c], p.pages)
    t_in = tail_start(s.sizes.astype(np.float64), p.community_popularity)
    t = np.where(inside, t_in[c], tail_start(float(p.pages), p.global_popularity))
    w = t + rng.random(len(local)) * (1 - t)
    k = np.where(inside, 1 / (1 - p.community_popularity), 1 / (1 - p.global_popularity))
    rank = np.minimum(np.floor(np.exp(np.log(w) * k) - 1).astype(np.int64), n - 1)
    target = np.where(
        inside,
        s.page_of_slot[np.minimum(s.starts[c] + rank, p.pages - 1)],
        s.page_of_rank[rank],
    ).astype(np.int64)
    keys = (local * p.pages + target)[target != lo + local]
    keys.sort()
    keys = keys[np.concatenate([[True], keys[1:] != keys[:-1]])] if len(keys) else keys
    row, target = keys // p.pages, keys % p.pages
    lengths = np.bincount(row, minlength=hi - lo)
    test = holdout.is_test_row(lengths, s.test_u[lo:hi], p.test_fraction)
    h = np.where(test, holdout.held_counts(lengths, s.round_u[lo:hi], p.holdout_fraction), 0)
    # the test rows' links held out in a random order per row
    at = np.flatnonzero(test[row])
    held = np.zeros(len(row), bool)
    held[at] = holdout.held_links(row[at], rng.integers(0, 1 << 32, len(at)), h)
    cls = np.where(test[row], np.where(held, 2, 1), 0)
    counts = np.stack([np.where(test, 0, lengths), np.where(test, lengths - h, 0), h])
    ids = np.concatenate([target[cls == k] for k in range(3)]).astype(np.int32)
    return counts, ids


def _assemble(s: Structure, parts: Sequence[tuple[np.ndarray, np.ndarray]]) -> Graph:
    """The graph from blocks or chunks of consecutive pages, in order: ([3, pages], ids)."""
    counts = np.concatenate([c for c, _ in parts], axis=1).astype(np.int64)
    totals = [int(c.sum()) for c in counts]
    splits = []
    for k in range(3):
        pieces = []
        for part_counts, ids in parts:
            lo = int(part_counts[:k].sum())
            pieces.append(ids[lo : lo + int(part_counts[k].sum())])
        rows = np.flatnonzero(counts[k] > 0) if k == 0 else np.flatnonzero(counts[2] > 0)
        indptr = np.zeros(len(rows) + 1, np.int64)
        np.cumsum(counts[k][rows], out=indptr[1:])
        ids = np.concatenate(pieces) if pieces else np.zeros(0, np.int32)
        if len(ids) != totals[k]:
            raise AssertionError("planted: the parts' counts and ids disagree")
        splits.append(RaggedRows(rows.astype(np.int64), indptr, ids))
    return Graph(s, *splits)


def host_graph(params: Params | Structure, threads: int | None = None) -> Graph:
    """The graph drawn on the host, in blocks of `BLOCK_PAGES` pages over `threads` threads (None:
    the cores this process may use; NumPy's sorts and draws release the GIL)."""
    s = params if isinstance(params, Structure) else structure(params)
    blocks = range(-(-s.params.pages // BLOCK_PAGES))
    workers = threads or len(os.sched_getaffinity(0))
    with concurrent.futures.ThreadPoolExecutor(max(1, workers)) as pool:
        parts = list(pool.map(lambda b: _host_block(s, b), blocks))
    return _assemble(s, parts)


def device_graph(
    params: Params | Structure, chunk_draws: int = CHUNK_DRAWS
) -> tuple[Graph, dict[str, float]]:
    """The graph drawn on the default JAX device in chunks of at most `chunk_draws` draws (whole
    pages), each deduplicated and split there; the links come to the host chunk by chunk.
    Returns the graph and the seconds spent (`device_s`, `to_host_s`)."""
    # JAX is imported here, not at the top: the contract's other users never need it.
    import jax

    s = params if isinstance(params, Structure) else structure(params)
    p = s.params
    if int(s.draws.max()) > chunk_draws:
        raise ValueError(f"degree_cap: at most {chunk_draws} draws per page on the device")
    ptr = np.concatenate([[0], np.cumsum(s.draws, dtype=np.int64)])
    chunks = list(layout.row_blocks(ptr, 0, len(s.draws), chunk_draws))
    most = max(int(s.draws[a:b].sum()) for a, b in chunks)
    size = 1 << max(4, (most - 1).bit_length())
    pages = 1 << max(0, (max(b - a for a, b in chunks) - 1).bit_length())
    shared = jax.device_put(
        (
            s.page_of_slot,
            s.page_of_rank,
            s.starts.astype(np.int32),
            s.sizes.astype(np.int32),
            tail_start(s.sizes, p.community_popularity).astype(np.float32),
        )
    )
    program = _device_program(
        size, p.pages, p.in_share, p.community_popularity, p.global_popularity, p.holdout_fraction
    )
    key = jax.random.key(p.seed)
    parts, device_s, host_s = [], 0.0, 0.0
    for index, (lo, hi) in enumerate(chunks):
        t = time.perf_counter()
        local = np.zeros(pages + 1, np.int32)
        np.cumsum(s.draws[lo:hi], out=local[1 : hi - lo + 1])
        local[hi - lo + 1 :] = local[hi - lo]
        community = np.zeros(pages, np.int32)
        community[: hi - lo] = s.community[lo:hi]
        split = np.zeros((2, pages), np.float32)
        split[0, : hi - lo] = s.test_u[lo:hi] < p.test_fraction
        split[1, : hi - lo] = s.round_u[lo:hi]
        chunk_key = jax.random.fold_in(key, index)
        out, counts = program(chunk_key, np.int32(lo), local, community, split, shared)
        counts = np.asarray(counts)[:, : hi - lo]
        device_s += time.perf_counter() - t
        t = time.perf_counter()
        parts.append((counts, np.asarray(out[: int(counts.sum())])))
        host_s += time.perf_counter() - t
    return _assemble(s, parts), {"device_s": device_s, "to_host_s": host_s}


@functools.lru_cache(maxsize=4)
def _device_program(size: int, n: int, in_share: float, s_in: float, s_out: float, f: float):
    """The jitted chunk: draws [size] of the pages `lo + j` (page j's draws local[j]..local[j+1]),
    their targets by the rank laws in float32 (a rank's relative error about 1e-6), distinct
    non-self links by a sort of (page, target), the test rows' links ordered by random bits and
    the first h held out; returns every link's target by class (train, fold-in, held out), then
    page and id, and the counts [3, pages]."""
    # JAX is imported here, not at the top: the contract's other users never need it.
    import jax
    import jax.numpy as jnp

    threshold = np.uint32(min(int(in_share * 2**32), 2**32 - 1))
    k_in, k_out = np.float32(1 / (1 - s_in)), np.float32(1 / (1 - s_out))
    t_out = np.float32(tail_start(n, s_out))

    @jax.jit
    def run(key, lo, local, community, split, shared):
        page_of_slot, page_of_rank, starts, sizes, t_in = shared
        pages = community.shape[0]
        k_side, k_rank, k_order = jax.random.split(key, 3)
        pos = jnp.arange(size, dtype=jnp.int32)
        row = jnp.clip(jnp.searchsorted(local[1:], pos, side="right"), 0, pages - 1)
        valid = pos < local[-1]
        c = community[row]
        inside = jax.random.bits(k_side, (size,), jnp.uint32) < threshold
        # v: all 32 random bits, fine near 0 (where w is near t: the tail's ranks)
        v = (jax.random.bits(k_rank, (size,), jnp.uint32).astype(jnp.float32) + 0.5) * 2.0**-32
        t = jnp.where(inside, t_in[c], t_out)
        w = t + v * (1 - t)
        limit = jnp.where(inside, sizes[c], n)
        x = jnp.exp(jnp.log(w) * jnp.where(inside, k_in, k_out)) - 1
        rank = jnp.minimum(jnp.floor(x).astype(jnp.int32), limit - 1)
        target = jnp.where(
            inside, page_of_slot[jnp.minimum(starts[c] + rank, n - 1)], page_of_rank[rank]
        )
        keep = valid & (target != lo + row)
        srow, stgt = jax.lax.sort((jnp.where(keep, row, SENTINEL), target), num_keys=2)
        distinct = (srow != SENTINEL) & jnp.concatenate(
            [jnp.ones(1, bool), (srow[1:] != srow[:-1]) | (stgt[1:] != stgt[:-1])]
        )
        at = jnp.minimum(srow, pages - 1)
        lengths = jnp.zeros(pages, jnp.int32).at[at].add(distinct.astype(jnp.int32))
        test = (split[0] > 0) & (lengths >= 2)
        h = jnp.where(test, holdout.held_counts(lengths, split[1], f, jnp, jnp.float32), 0)
        in_test = distinct & test[at]
        order_row = jnp.where(in_test, srow, SENTINEL)
        test_starts = jnp.cumsum(jnp.where(test, lengths, 0)) - jnp.where(test, lengths, 0)
        _, _, order = jax.lax.sort(
            (order_row, jax.random.bits(k_order, (size,), jnp.uint32), pos), num_keys=2
        )
        ranked_row = order_row[order]
        rank_in_row = pos - test_starts[jnp.minimum(ranked_row, pages - 1)]
        held_sorted = (ranked_row != SENTINEL) & (
            rank_in_row < h[jnp.minimum(ranked_row, pages - 1)]
        )
        held = jnp.zeros(size, bool).at[order].set(held_sorted)
        cls = jnp.where(distinct, jnp.where(in_test, jnp.where(held, 2, 1), 0), 3)
        counts = jnp.stack([jnp.where(test, 0, lengths), jnp.where(test, lengths - h, 0), h])
        offsets = jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.cumsum(counts.sum(axis=1))])
        dest = jnp.full(size, size, jnp.int32)
        for cl in range(3):
            mine = cls == cl
            dest = jnp.where(mine, offsets[cl] + jnp.cumsum(mine, dtype=jnp.int32) - 1, dest)
        out = jnp.zeros(size, jnp.int32).at[dest].set(stgt, mode="drop")
        return out, counts

    return run


def validation_split(
    g: Graph, fraction: float, threads: int | None = None
) -> tuple[RaggedRows, RaggedRows]:
    """(kept, held): the validation rows of `g`'s training pages at `fraction` (see the module's
    docstring) with their kept and held-out links (ids sorted per row), the links' order keys
    drawn per block of pages over `threads` threads (None: the cores this process may use)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"validation_fraction: must be in (0, 1], got {fraction}")
    p = g.structure.params
    rng = np.random.default_rng([p.seed, 2])
    candidate, rounding = rng.random(p.pages), rng.random(p.pages)
    train = g.train
    chosen = train.select(holdout.is_test_row(train.lengths, candidate[train.row_ids], fraction))
    h = holdout.held_counts(chosen.lengths, rounding[chosen.row_ids], p.holdout_fraction)
    bounds = np.searchsorted(chosen.row_ids, np.arange(0, p.pages + BLOCK_PAGES, BLOCK_PAGES))

    def block(b: int) -> np.ndarray:
        lo, hi = int(bounds[b]), int(bounds[b + 1])
        links = chosen.indptr[lo : hi + 1]
        count = int(links[-1] - links[0])
        key = np.random.default_rng([p.seed, 3, b]).integers(0, 1 << 32, count)
        owner = np.repeat(np.arange(hi - lo), np.diff(links))
        return holdout.held_links(owner, key, h[lo:hi])

    blocks = [b for b in range(len(bounds) - 1) if bounds[b + 1] > bounds[b]]
    workers = threads or len(os.sched_getaffinity(0))
    with concurrent.futures.ThreadPoolExecutor(max(1, workers)) as pool:
        parts = list(pool.map(block, blocks))
    held = np.concatenate(parts) if parts else np.zeros(0, bool)
    ids = chosen.ids[chosen.indptr[0] : chosen.indptr[-1]]
    out = []
    for mask, counts in ((~held, chosen.lengths - h), (held, h)):
        indptr = np.zeros(len(chosen) + 1, np.int64)
        np.cumsum(counts, out=indptr[1:])
        out.append(RaggedRows(chosen.row_ids, indptr, ids[mask]))
    return out[0], out[1]


def _first_allowed(
    candidates: np.ndarray, excluded: RaggedRows, k: int, num_ids: int
) -> np.ndarray:
    """int64 [rows, k]: for each row of `excluded` (ids not to recommend), the first `k` of the
    shared ranked list `candidates` that are not among its ids (-1 where the list runs out).

    The j-th allowed position of a row is j + #{i : x_i - i <= j}, x its excluded positions
    sorted: one search over all rows' keys, no loop per row."""
    n = len(excluded)
    position = np.full(num_ids, len(candidates), np.int64)
    position[candidates] = np.arange(len(candidates))
    x = position[excluded.ids]
    row = np.repeat(np.arange(n, dtype=np.int64), excluded.lengths)
    listed = x < len(candidates)
    x, row = x[listed], row[listed]
    order = np.lexsort((x, row))
    x, row = x[order], row[order]
    counts = np.bincount(row, minlength=n)
    first = np.concatenate([[0], np.cumsum(counts)])[:-1]
    shifted = x - (np.arange(len(x)) - first[row])
    width = len(candidates) + k + 1
    keys = row * width + shifted
    j = np.arange(k, dtype=np.int64)
    query = np.arange(n, dtype=np.int64)[:, None] * width + j
    skipped = np.searchsorted(keys, query, "right") - first[:, None]
    at = j + skipped
    return np.where(at < len(candidates), candidates[np.minimum(at, len(candidates) - 1)], -1)


def _excluded(test: RaggedRows) -> RaggedRows:
    """Each test row's fold-in links and the row itself (what the evaluator excludes on a
    graph)."""
    return test.with_ids(test.row_ids)


def oracle_top_k(s: Structure, test: RaggedRows, k: int) -> np.ndarray:
    """int64 [rows, k]: each test row's top `k` columns by the true p(t | its community), its
    fold-in links (`test`'s ids) and itself excluded; ties by the lower id.

    Per community, the candidates are its members and the `k` + (longest exclusion list) pages
    of highest global popularity: any other page t scores (1 - in_share) q(rank(t)) at most, below
    each of those, of which at least `k` are not excluded."""
    p = s.params
    excluded = _excluded(test)
    out = np.full((len(test), k), -1, np.int64)
    c_of_row = s.community[test.row_ids]
    for c in np.unique(c_of_row):
        rows = np.flatnonzero(c_of_row == c)
        mine = excluded.select(rows)
        depth = min(p.pages, k + int(mine.lengths.max()))
        members = s.page_of_slot[s.starts[c] : s.starts[c + 1]]
        pages = np.union1d(members, s.page_of_rank[:depth]).astype(np.int64)
        score = s.probability(np.full(len(pages), members[0]), pages)
        ranked = pages[np.lexsort((pages, -score))]
        out[rows] = _first_allowed(ranked, mine, k, p.pages)
    return out


def popularity_top_k(in_degree: np.ndarray, test: RaggedRows, k: int) -> np.ndarray:
    """int64 [rows, k]: each test row's top `k` columns by training in-degree (ties by the lower
    id), its fold-in links and itself excluded."""
    depth = min(len(in_degree), k + int(test.lengths.max(initial=0)) + 1)
    top = np.argpartition(-in_degree, depth - 1)[:depth] if depth < len(in_degree) else None
    pages = np.arange(len(in_degree)) if top is None else top
    # the depth-th largest in-degree may be shared beyond `top`: take every page tied with it
    floor = in_degree[pages].min()
    pages = np.union1d(pages, np.flatnonzero(in_degree >= floor))
    ranked = pages[np.lexsort((pages, -in_degree[pages]))]
    return _first_allowed(ranked, _excluded(test), k, len(in_degree))


def in_degree(g: Graph) -> np.ndarray:
    """Training in-degree of every page (rows of `train` linking to it)."""
    return np.bincount(g.train.ids, minlength=g.structure.params.pages)


def config_of(params: Params, scale: float | None = None) -> dict[str, Any]:
    """The stats.json `config` of a planted dataset: the law and how to remake it."""
    config = {"generator": "planted", **dataclasses.asdict(params)}
    if scale is not None:
        config["scale"] = scale
    return config


def params_of(stats: dict[str, Any]) -> Params:
    """The `Params` a planted dataset's stats.json records (ValueError if it is not one)."""
    config = dict(stats.get("config", {}))
    if config.pop("generator", None) != "planted":
        raise ValueError("not a planted dataset (its stats.json config names no planted law)")
    config.pop("scale", None)
    fields = {f.name for f in dataclasses.fields(Params)}
    return Params(**{k: v for k, v in config.items() if k in fields})


def write(
    out: str,
    g: Graph,
    num_shards: int,
    workers: int | None = None,
    scale: float | None = None,
    validation_fraction: float = 0.0,
) -> dict[str, Any]:
    """The graph as a dataset directory (`dataset_writer.write_dataset`), with the validation
    splits of `validation_split` at `validation_fraction` when above 0 (stats.json's config
    records it); returns its stats."""
    config = config_of(g.structure.params, scale)
    validation = None
    if validation_fraction:
        validation = validation_split(g, validation_fraction, workers)
        config["validation_fraction"] = validation_fraction
    return dataset_writer.write_dataset(
        out,
        g.structure.params.pages,
        g.train,
        g.test,
        g.held,
        config,
        num_shards=num_shards,
        workers=workers,
        validation=validation,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m webgraph_contract.planted", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--out", required=True, help="Dataset directory (its shards replaced).")
    parser.add_argument("--scale", type=float, default=0.01, help="1: the de-sparse size.")
    parser.add_argument("--seed", type=int, default=0, help="The graph depends on scale and seed.")
    parser.add_argument(
        "--on",
        choices=("host", "device"),
        default="host",
        help="Draw the links with NumPy on the host's cores, or with JAX on the default device.",
    )
    parser.add_argument(
        "--shards",
        type=int,
        default=0,
        help="Shards per split (0: one per 16M links, at least one per writing process).",
    )
    parser.add_argument(
        "--workers", type=int, default=0, help="Writing processes (0: a core each)."
    )
    parser.add_argument(
        "--validation_fraction",
        type=float,
        default=0.0,
        help="Also write the validation splits for tuning (`sweep`): this share of the training "
        "pages held out whole by the test split's rule (0: none).",
    )
    parser.add_argument("--json", action="store_true", help="The figures as one JSON line.")
    args = parser.parse_args(argv)
    if args.scale <= 0 or args.shards < 0 or args.workers < 0:
        print("error: --scale must be positive, --shards and --workers >= 0", file=sys.stderr)
        return 2
    if not 0 <= args.validation_fraction <= 1:
        print("error: --validation_fraction must be in [0, 1]", file=sys.stderr)
        return 2
    params = Params.at_scale(args.scale, args.seed)
    t = time.perf_counter()
    s = structure(params)
    structure_s = time.perf_counter() - t
    t = time.perf_counter()
    g = device_graph(s)[0] if args.on == "device" else host_graph(s)
    links_s = time.perf_counter() - t
    t = time.perf_counter()
    workers = args.workers or len(os.sched_getaffinity(0))
    # a shard per 16M links, and at least one per worker
    shards = args.shards or min(256, max(workers, math.ceil(g.links / 2**24)))
    stats = write(args.out, g, shards, workers, args.scale, args.validation_fraction)
    figures = {
        "pages": params.pages,
        "links": stats["edges"],
        "training_links": stats["split_edges"]["train"],
        "test_rows": stats["splits"]["test"],
        **({"validation_rows": stats["splits"]["validation"]} if args.validation_fraction else {}),
        "shards": shards,
        "structure_s": structure_s,
        f"links_{args.on}_s": links_s,
        "write_s": time.perf_counter() - t,
    }
    if args.json:
        print(json.dumps(figures, sort_keys=True))
        return 0
    print(
        f"{args.out}: {params.pages:,} pages, {figures['links']:,} links "
        f"({figures['training_links']:,} training), {figures['test_rows']:,} test rows"
        + (f", {figures['validation_rows']:,} validation rows" if args.validation_fraction else "")
        + "; structure "
        f"{structure_s:.1f} s, links ({args.on}) {links_s:.1f} s, writing "
        f"{figures['write_s']:.1f} s ({shards} shards)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
