"""The interface of the two exact top-K engines, and what they share.

An engine holds a column table laid out on its devices (`place`) and answers `top_k(queries,
exclude, k)`: the `k` best columns of each query row, its excluded column ids left out. Two engines
implement it, over the same layout rule (`norm_order`: columns dealt over the devices in blocks of
descending norm, so a search stops once no row can reach its K-th best):
- `block_loop.BlockLoop`, for accelerators: each device scores blocks and keeps a running top K in
  one compiled loop; the host merges the devices' answers;
- `threshold_scan.ThresholdScan`, for CPU devices: the devices only flag the groups of columns
  that can enter, the host re-scores them in float64 and keeps the running top K.
`make_engine` picks one by the devices' platform (approximate top K: the block loop).

One order everywhere (`merge` on the host, the block loop's sort on the device): best score first,
equal scores by the lower column id, as a stable sort of the exact scores ranks them; a query of
zeros scores 0 everywhere, so its top K is the lowest admissible ids (`Engine.top_k` answers it).
"""

from __future__ import annotations

import abc
from typing import Any, Callable, NamedTuple, Sequence

import jax
import numpy as np
from jax.sharding import Mesh

from alx_trainer import execution
from webgraph_contract.ragged import RaggedRows


class TopK(NamedTuple):
    """Best columns per row, best first: ids (int64, -1 where fewer columns are admissible) and
    scores (float32, -inf there)."""

    ids: np.ndarray
    scores: np.ndarray


class BlockShape(NamedTuple):
    """Rows scored per batch and columns per block: one device's score buffer is rows x cols."""

    rows: int
    cols: int

    def score_bytes(self) -> int:
        return 4 * self.rows * self.cols


def default_block_shape(platform: str) -> BlockShape:
    """Rows per batch and columns per block by backend: the execution plan's rule."""
    return BlockShape(*execution.topk_block_shape(platform))


def default_devices() -> list:
    """The devices a top K runs on unless told: every device of this process."""
    return list(jax.local_devices())


def devices_of(mesh: Mesh | Sequence[Any] | None) -> list:
    """This process's devices of a Mesh, or the devices given, or `default_devices()`."""
    if mesh is None:
        return default_devices()
    if isinstance(mesh, Mesh):
        return [d for d in mesh.devices.flat if d.process_index == jax.process_index()]
    return list(mesh)


def merge(vals: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The `k` best (score, id) of each row of candidates `[n, m]`: best first, equal finite
    scores by the lower id (-inf entries last, in any order: they are not answers). A column must
    appear at most once per row."""
    order = np.argsort(-vals, axis=1)
    ranked = np.take_along_axis(vals, order, axis=1)
    same = (ranked[:, 1:] == ranked[:, :-1]) & np.isfinite(ranked[:, 1:])
    tied = np.flatnonzero(same.any(axis=1))
    if len(tied):
        order[tied] = np.lexsort((ids[tied], -vals[tied]), axis=1)
    order = order[:, :k]
    return np.take_along_axis(vals, order, axis=1), np.take_along_axis(ids, order, axis=1)


def lowest_admissible(excluded: np.ndarray, k: int, num_cols: int) -> np.ndarray:
    """The `k` lowest column ids not in `excluded` (fewer when fewer are admissible): a zero
    query's top K, every score being 0."""
    first = np.arange(min(num_cols, k + len(excluded)))
    return first[~np.isin(first, excluded)][:k]


Progress = Callable[[int], None]


class Engine(abc.ABC):
    """A column table `[columns, d]` on `devices`, answering exact top-K queries in batches of
    `shape.rows` rows and blocks of `shape.cols` columns (an engine may round the block width)."""

    def __init__(
        self, col_table: np.ndarray, devices: Sequence[Any] | None, shape: BlockShape | None
    ):
        table = np.asarray(col_table, np.float32)
        if table.ndim != 2:
            raise ValueError(f"col_table must be [columns, d], got shape {table.shape}")
        self.devices = list(devices) if devices else default_devices()
        self.num_cols, self.dim = table.shape
        shape = shape or default_block_shape(self.devices[0].platform)
        if shape.rows <= 0 or shape.cols <= 0:
            raise ValueError(
                f"block shape must be positive: {shape.rows} rows x {shape.cols} columns"
            )
        self.shape = shape
        self._table = table
        # column blocks scored, and blocks in the devices' shares, over the batches so far
        self.blocks = [0, 0]

    @abc.abstractmethod
    def place(self) -> None:
        """Lay the columns out on the devices now (else the first query does)."""

    @abc.abstractmethod
    def _search(
        self,
        queries: np.ndarray,
        exclude: RaggedRows,
        k: int,
        ids: np.ndarray,
        scores: np.ndarray,
        progress: Progress | None,
    ) -> None:
        """Fill `ids`/`scores` `[n, k]` of every row whose query is not zero."""

    def describe(self, k: int) -> str:
        """The memory bound of a query, for the log."""
        return (
            f"{self.num_cols} columns on {len(self.devices)} device(s) in blocks of "
            f"{self.shape.rows} rows x {self.shape.cols} columns: "
            f"{self.shape.score_bytes() / 2**20:.1f} MiB of scores per device, top {k} "
            f"({type(self).__name__})"
        )

    def top_k(
        self,
        queries: np.ndarray,
        exclude: RaggedRows,
        k: int,
        progress: Progress | None = None,
    ) -> TopK:
        """The `k` best columns of each query (`[n, d]`), row i without the ids `exclude.row(i)`
        (ids in the table's range: checked where they enter, `ranking.Ranker`); `progress(rows)`
        is called after each batch."""
        queries = np.asarray(queries, np.float32)
        n = len(queries)
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise ValueError(f"queries must be [n, {self.dim}], got {queries.shape}")
        if len(exclude) != n:
            raise ValueError(f"need one exclusion list per query: {len(exclude)} for {n} queries")
        if k <= 0:
            raise ValueError(f"k must be positive, got {k}")
        exclude = exclude.take(0, n) if n else exclude
        ids = np.full((n, k), -1, np.int64)
        scores = np.full((n, k), -np.inf, np.float32)
        self._search(queries, exclude, k, ids, scores, progress)
        ids[~np.isfinite(scores)] = -1
        for row in np.flatnonzero(~queries.any(axis=1)):
            lowest = lowest_admissible(exclude.row(row), k, self.num_cols)
            ids[row, : len(lowest)], scores[row, : len(lowest)] = lowest, 0.0
        return TopK(ids, scores)
