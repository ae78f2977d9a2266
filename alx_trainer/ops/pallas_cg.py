"""The matrix-free CG of one dense batch as one Pallas kernel over tiles of row slots (`cg_kernel`
'pallas'): each program gathers its rows' fixed-table rows and runs r0, every CG step and the
observed loss on chip, writing only x and the loss per row.

A program solves a tile of consecutive row slots (`tile_shape`). The dense batches lay a row's
pieces out consecutively in slot order (`data.batching`; padding pieces, segment R, come last),
so a tile's pieces are one range of the batch, read in windows of `chunk` pieces. The first
window is loaded once and every pass runs on it, so a tile whose pieces fit one window reads its
rows once; the windows after it are streamed again by every pass (r0, each CG step, the loss), a
CG step still reading them once (h.p and the weighted sum of h from the same window). The fixed
rows are gathered inside the kernel from the table by id ('replicated' and 'owner' layouts), or
read from the block the sharded gather already made ('sharded').

Lowered by Triton on GPU (`jax.experimental.pallas` with Triton compiler parameters), in
interpret mode on CPU (tests); TPU keeps the XLA path. Pallas is imported only when the kernel
is traced, so the default path never loads it. Products with the tile's one-hot piece-to-row
matrix and with alpha G are float32 dots at HIGHEST precision (IEEE on Triton).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from alx_trainer.ops import solvers
from alx_trainer.ops.table_storage import as_float32

MAX_TILE_ROWS = 16  # row slots per program at most
MIN_TILE_ROWS = 4  # and at least: every program reads alpha G [d, d] (through the cache)
# A window of fixed rows (stored dtype) takes at most this. A program keeps its first window in
# registers from r0 to the loss: at 128 KiB (sm_90, d=128, bfloat16) it needed 255 registers a
# thread and spilled 6.7 KB; at 32 KiB it takes 240 and spills nothing
# (`python -m benchmarks.pallas_sm90`).
TILE_BYTES = 32 * 1024
NUM_WARPS = 8  # Triton warps per program (4 spilled at 32 KiB windows)
# No software pipelining: it double-buffers each streamed window in shared memory (at 128 KiB
# windows 2 x 128 KiB, 352 KiB in all against sm_90's 227 KiB a block).
NUM_STAGES = 1
MAX_GPU_DIM = 128  # alpha G [d, d] float32 goes through shared memory: 64 KiB at 128, 256 at 256
HIGHEST = jax.lax.Precision.HIGHEST


def chunk_pieces(piece_len: int, dim: int, itemsize: int) -> int:
    """Pieces per window: the largest power of two whose rows fit `TILE_BYTES` (at least one)."""
    per_piece = piece_len * dim * itemsize
    chunk = 1
    while 2 * chunk * per_piece <= TILE_BYTES:
        chunk *= 2
    return chunk


def tile_shape(pieces: int, slots: int, piece_len: int, dim: int, itemsize: int) -> tuple[int, int]:
    """(row slots per tile, pieces per window) for batches of `pieces` pieces and `slots` row slots:
    the most rows (a power of two in [`MIN_TILE_ROWS`, `MAX_TILE_ROWS`]) whose pieces, at the
    batch's mean per slot, fit one window, so most tiles read their rows once."""
    chunk = chunk_pieces(piece_len, dim, itemsize)
    rows = MAX_TILE_ROWS
    while rows > MIN_TILE_ROWS and rows * pieces > chunk * slots:
        rows //= 2
    return rows, chunk


def gpu_support(dim: int, piece_len: int, table_rows: int = 0) -> str:
    """Why the Triton lowering cannot take this shape ('' when it can): Triton's tensors have
    power-of-two sizes, a program holds alpha G [d, d] in shared memory, and the in-kernel gather
    addresses the fixed table (`table_rows` x `dim` values) with 32-bit offsets."""
    if dim & (dim - 1) or not 16 <= dim <= MAX_GPU_DIM:
        return (
            f"dim must be a power of two in [16, {MAX_GPU_DIM}] (alpha G [d, d] in shared "
            f"memory), got {dim}"
        )
    if piece_len & (piece_len - 1):
        return f"piece_len must be a power of two (Triton tensor sizes), got {piece_len}"
    if table_rows * dim >= 2**31:
        return (
            f"the fixed table has {table_rows:,} x {dim} values, over the 2^31 a 32-bit offset "
            "reaches"
        )
    return ""


def check_backend(dim: int, piece_len: int, table_rows: int = 0) -> None:
    """Raise ValueError (one line) when this backend cannot run the kernel at these shapes."""
    backend = jax.default_backend()
    if backend == "cpu":
        return
    if backend != "gpu":
        raise ValueError(
            f"cg_kernel: 'pallas' runs on GPU (Triton) or CPU (interpret mode), "
            f"not {backend}; use 'xla'"
        )
    # automatic piece lengths (16, 8) are powers of two
    reason = gpu_support(dim, piece_len or 16, table_rows)
    if reason:
        raise ValueError(f"cg_kernel: 'pallas' on GPU: {reason}; use 'xla'")


def _mode() -> bool:
    """Interpret mode on CPU, else the Triton lowering (`check_backend` has vetted the backend)."""
    return jax.default_backend() == "cpu"


def _dot(a, b, contract=((1,), (0,))):
    dims = (contract, ((), ()))
    return jax.lax.dot_general(a, b, dims, precision=HIGHEST, preferred_element_type=jnp.float32)


def _kernel(
    bounds_ref,
    ids_ref,
    seg_ref,
    src_ref,
    x0_ref,
    lam_ref,
    ag_ref,
    x_ref,
    obs_ref,
    *,
    chunk: int,
    iters: int,
    gathered: bool,
    observed_loss: bool,
):
    from jax.experimental import pallas as pl  # imported by the kernel's callers only (`batch_cg`)

    per_tile, (pieces, piece_len) = x0_ref.shape[0], ids_ref.shape
    tile = pl.program_id(0)
    first = bounds_ref[tile]
    count = bounds_ref[tile + 1] - first
    slots = tile * per_tile + jax.lax.broadcasted_iota(jnp.int32, (1, per_tile), 1)
    x0, lam, ag = x0_ref[...], lam_ref[...], ag_ref[...]

    def load(j):  # window j: fixed rows [C, L, d] (stored dtype), one-hot [C, T], entry mask [C, L]
        lo = first + j * chunk
        start = jnp.minimum(lo, pieces - chunk)  # in bounds; pieces before `lo` are masked out
        piece = start + jax.lax.broadcasted_iota(jnp.int32, (chunk, 1), 0)
        ids = ids_ref[pl.ds(start, chunk), :]
        in_window = (piece >= lo) & (piece < lo + chunk)
        mine = (seg_ref[pl.ds(start, chunk)][:, None] == slots) & in_window
        onehot = mine.astype(jnp.float32)
        mask = (ids >= 0).astype(jnp.float32) * jnp.sum(onehot, axis=1, keepdims=True)
        if gathered:  # positions in the gathered block
            ids = piece * piece_len + jax.lax.broadcasted_iota(jnp.int32, (1, piece_len), 1)
        # entries not this window's read one row over and over (a cache hit, not memory traffic)
        return src_ref[jnp.where(mask > 0, ids, 0), :], onehot, mask

    def dots(h, onehot, mask, v):  # h_l . v of each entry's row: [C, L]
        return mask * jnp.sum(as_float32(h) * _dot(onehot, v)[:, None, :], axis=-1)

    def sums(h, onehot, w):  # sum over a row's entries of w_l h_l: [T, d]
        return _dot(onehot, jnp.sum(w[..., None] * as_float32(h), axis=1), ((0,), (0,)))

    def rest(v):  # (alpha G + lambda) v
        return _dot(v, ag) + lam[:, None] * v

    first_window = load(0)  # on chip for every pass: the whole tile when its pieces fit
    windows = pl.cdiv(count, chunk)

    def total(fn, zero):  # sum over the tile's windows, the first one already loaded
        more = lambda j, acc: acc + fn(*load(j))
        return jax.lax.fori_loop(1, windows, more, zero + fn(*first_window))

    b_ax0 = total(lambda h, o, m: sums(h, o, m - dots(h, o, m, x0)), jnp.zeros_like(x0))

    def step(_, state):
        ap = total(lambda h, o, m: sums(h, o, dots(h, o, m, state.p)), jnp.zeros_like(x0))
        return solvers.cg_update(state, ap + rest(state.p))[0]

    x = jax.lax.fori_loop(0, iters, step, solvers.cg_start(x0, b_ax0 - rest(x0))).x
    observed = jnp.zeros_like(lam)
    if observed_loss:

        def loss(h, o, m):
            per_piece = jnp.sum(m * (1 - dots(h, o, m, x)) ** 2, axis=1, keepdims=True)
            return jnp.sum(o * per_piece, axis=0)

        observed = total(loss, observed)
    x_ref[...] = x
    obs_ref[...] = observed


def tile_bounds(seg, rows: int, per_tile: int, xp=jnp):
    """First piece of each tile of `per_tile` slots and the real pieces' end: int32 [tiles + 1]
    (`seg` [B] is in slot order, padding pieces, segment >= `rows`, last)."""
    tiles = -(-rows // per_tile)
    edges = xp.arange(tiles + 1, dtype=xp.int32) * per_tile
    real = xp.where(seg < rows, seg, tiles * per_tile)
    return xp.searchsorted(real, edges).astype(xp.int32)


def batch_cg(
    rows: jax.Array,
    ids: jax.Array,
    seg: jax.Array,
    x0: jax.Array,
    alpha_gram: jax.Array,
    lam: jax.Array,
    iters: int,
    gathered: bool,
    observed_loss: bool,
    shape: tuple[int, int] | None = None,
    gpu: bool | None = None,
) -> tuple[jax.Array, jax.Array]:
    """`iters` CG steps from x0 [R, d] on (alpha G + lam I + sum_i h_i h_i^T) x = sum_i h_i for
    every row slot of one dense batch (ids [B, L], seg [B]); (x [R, d], observed loss [R]),
    float32.

    `rows` is the fixed table whole (its rows gathered by id inside the kernel) or, `gathered`,
    the batch's rows already gathered [B, L, d] (the 'sharded' layout's gather). Padding slots
    come back as CG from x0 on alpha G + lam I; the caller masks them. `shape`: (row slots per
    tile, pieces per window), by default `tile_shape`. `gpu`: lowered for Triton (True) or
    interpreted (False) whatever the backend; None: by the backend.
    """
    from jax.experimental import pallas as pl  # not imported by the default ('xla') path

    (num_slots, d), (B, L) = x0.shape, ids.shape
    per_tile, chunk = shape or tile_shape(B, num_slots, L, d, rows.dtype.itemsize)
    tiles = pl.cdiv(num_slots, per_tile)
    padded = tiles * per_tile
    bounds = tile_bounds(seg, num_slots, per_tile)
    if gathered:
        rows = rows.reshape(B * L, d)
    if B < chunk:  # a window must fit the batch (tests' small batches)
        ids = jnp.pad(ids, ((0, chunk - B), (0, 0)), constant_values=-1)
        seg = jnp.pad(seg, (0, chunk - B), constant_values=num_slots)
    x0 = jnp.pad(x0, ((0, padded - num_slots), (0, 0)))
    lam = jnp.pad(lam.astype(jnp.float32), (0, padded - num_slots))
    whole = lambda a: pl.BlockSpec(a.shape, lambda t: (0,) * a.ndim)
    tiled = lambda *dims: pl.BlockSpec((per_tile, *dims), lambda t: (t, *(0,) * len(dims)))
    interpret = _mode() if gpu is None else not gpu
    params = {} if interpret else {"compiler_params": _triton_params()}
    kernel = functools.partial(
        _kernel, chunk=chunk, iters=iters, gathered=gathered, observed_loss=observed_loss
    )
    x, observed = pl.pallas_call(
        kernel,
        out_shape=(
            jax.ShapeDtypeStruct((padded, d), jnp.float32),
            jax.ShapeDtypeStruct((padded,), jnp.float32),
        ),
        grid=(tiles,),
        in_specs=[
            whole(bounds),
            whole(ids),
            whole(seg),
            whole(rows),
            tiled(d),
            tiled(),
            whole(alpha_gram),
        ],
        out_specs=(tiled(d), tiled()),
        interpret=interpret,
        **params,
    )(bounds, ids, seg, rows, x0, lam, alpha_gram.astype(jnp.float32))
    return x[:num_slots], observed[:num_slots]


def kernel_bytes(
    ids: np.ndarray,
    seg: np.ndarray,
    num_slots: int,
    dim: int,
    itemsize: int,
    iters: int,
    observed_loss: bool = True,
    shape: tuple[int, int] | None = None,
) -> dict[str, int]:
    """Bytes `batch_cg` moves to and from device memory for one batch (ids [B, L], seg [B]):
    `rows`, the fixed rows of its entries (those of a tile's first window once, the others once
    per pass: r0, each step and the loss); `ids` (ids and segments of every window read);
    `row_state` (x0 and tile bounds read, x and the loss written, float32). Padding entries and
    entries outside a window re-read one row (cache hits, not counted); alpha G, read by every
    program, is shared through the cache and not counted either."""
    B, L = ids.shape
    per_tile, chunk = shape or tile_shape(B, num_slots, L, dim, itemsize)
    passes = 1 + iters + int(observed_loss)
    bounds = tile_bounds(seg, num_slots, per_tile, np)
    entries = np.concatenate([[0], np.cumsum((ids >= 0).sum(axis=1))])
    out = {"rows": 0, "ids": 0, "row_state": 0}
    for first, end in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        split = min(end, first + chunk)
        once, again = entries[split] - entries[first], entries[end] - entries[split]
        out["rows"] += int(once + passes * again) * dim * itemsize
        out["ids"] += (1 + passes * max(0, -(-(end - first) // chunk) - 1)) * chunk * (L + 1) * 4
        out["row_state"] += per_tile * (2 * dim + 2) * 4 + 8
    return out


def _triton_params():
    from jax.experimental.pallas import triton as pl_triton  # the GPU backend, imported only for it

    return pl_triton.CompilerParams(num_warps=NUM_WARPS, num_stages=NUM_STAGES)
