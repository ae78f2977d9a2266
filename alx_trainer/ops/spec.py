"""What the kernels see of a side: the static `StepSpec` (made by `ExecutionPlan.step_spec`) and
the fixed side's `Fixed` values.

Layouts (`StepSpec.layout`): 'sharded' is the paper's (both tables sharded, a sharded gather and
scatter every step); 'replicated' copies the fixed table whole to every device once per
half-epoch, so a step's gather is a local lookup; 'owner' adds that each device solves only rows
of its own shard (the trainer routes them there), so a step needs no collective at all, its loss
terms come back per device, and the per-half-epoch gramian and replication go through the host
(one process).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import numpy as np


@dataclasses.dataclass(frozen=True)
class StepSpec:
    """Static parameters of a step kernel (one compiled program per distinct spec and shape).

    The objective's weights (alpha, lambda, nu) are not static: they reach the kernels as an array
    `hyper` beside the gramian (`Fixed`), so a sweep over them reuses the compiled programs.
    """

    # real rows of the fixed table (the "number of columns" of frequency scaling)
    num_other: int
    solver: str
    cg_iters: int
    # CG without building the d x d matrices (gather mode only)
    matvec: bool
    local_stats: bool
    # compute sum (1 - h.x)^2 (one more pass over the gathered ids)
    observed_loss: bool = True
    # 'sharded', 'replicated' or 'owner' (see above)
    layout: str = "sharded"
    # coordinates per block of the 'block' solver (iALS++)
    block_size: int = 0
    # of the explicit h h^T products: 'float32', 'tf32' or 'bfloat16'
    precision: str = "float32"
    # loops over batches and CG steps unrolled (XLA's cost analysis counts a loop once)
    unroll: bool = False

    @property
    def replicated_src(self) -> bool:
        """The fixed table arrives whole on every device (`replicate`)."""
        return self.layout != "sharded"

    @property
    def owner(self) -> bool:
        return self.layout == "owner"

    @property
    def cg_matvec(self) -> bool:
        """The matrix-free CG runs (no d x d matrix built per row)."""
        return self.matvec and self.solver == "cg"

    @property
    def row_stats(self) -> bool:
        """Each row slot of a batch holds d x d statistics (the explicit forms, local stats)."""
        return self.local_stats or not (self.cg_matvec or self.solver == "block")


class Fixed(NamedTuple):
    """What a step sees of the fixed side besides its rows."""

    gramian: jax.Array  # [d, d], replicated
    hyper: jax.Array  # [3] = alpha, lambda, nu (`hyper_params`), replicated


def hyper_params(alpha: float, reg: float, reg_exponent: float) -> np.ndarray:
    """The `hyper` array of the kernels: float32 [alpha, lambda, nu]."""
    return np.array([alpha, reg, reg_exponent], np.float32)
