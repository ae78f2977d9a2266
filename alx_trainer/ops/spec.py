"""A `TrainConfig` as the kernels see it: the step layout and the static `StepSpec` of one side.

Layouts (`StepSpec.layout`): 'sharded' is the paper's (both tables sharded, a sharded gather and
scatter every step); 'replicated' copies the fixed table whole to every device once per
half-epoch, so a step's gather is a local lookup; 'owner' adds that each device solves only rows
of its own shard (the trainer routes them there), so a step needs no collective at all, its loss
terms come back per device, and the per-half-epoch gramian and replication go through the host
(one process).
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from alx_trainer.config import TrainConfig
from alx_trainer.ops import pallas_cg


@dataclasses.dataclass(frozen=True)
class StepSpec:
    """Static parameters of a step kernel (one compiled program per distinct spec and shape).

    The objective's weights (alpha, lambda, nu) are not static: they reach the kernels as an array
    `hyper` beside the gramian (`Fixed`), so a sweep over them reuses the compiled programs.
    """

    num_other: int  # real rows of the fixed table (the "number of columns" of frequency scaling)
    solver: str
    cg_iters: int
    matvec: bool  # CG without building the d x d matrices (gather mode only)
    local_stats: bool
    observed_loss: bool = True  # compute sum (1 - h.x)^2 (one more pass over the gathered ids)
    layout: str = "sharded"  # 'sharded', 'replicated' or 'owner' (see above)
    block_size: int = 0  # coordinates per block of the 'block' solver (iALS++)
    precision: str = "float32"  # of the explicit h h^T products: 'float32', 'tf32' or 'bfloat16'
    cg_kernel: str = "xla"  # the matrix-free CG by XLA's fusions or the Pallas kernel (`pallas_cg`)
    unroll: bool = (
        False  # loops over batches and CG steps unrolled (XLA's cost analysis counts a loop once)
    )

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


# What a step sees of the fixed side besides its rows: (gramian [d, d], hyper [3] = alpha, lambda,
# nu).
Fixed = tuple[jax.Array, jax.Array]


def hyper_params(alpha: float, reg: float, reg_exponent: float) -> np.ndarray:
    """The `hyper` array of the kernels: float32 [alpha, lambda, nu]."""
    return np.array([alpha, reg, reg_exponent], np.float32)


# `cg_form` 'auto': the form measured fastest per backend (DESIGN.md's trainer section has the
# table, `python -m benchmarks.gpu_vs_implicit` measures it): matrix-free CG on CPU and, from one
# H100's figures, on GPU at every measured d (64-1024); no TPU figures, so TPU follows the GPU.
# A backend or d that ever measures otherwise gets a row here.
AUTO_CG_FORM: dict[str, str] = {"cpu": "matvec", "gpu": "matvec", "tpu": "matvec"}


def auto_cg_form(platform: str, dim: int) -> str:
    """The CG form 'auto' picks on `platform` ('cpu', 'gpu', 'tpu', ...) at embedding dimension
    `dim`."""
    del dim  # matvec won at every measured d on every measured backend
    return AUTO_CG_FORM.get(platform, "matvec")


def on_cpu() -> bool:
    return jax.default_backend() == "cpu"


def accelerator(config: TrainConfig) -> bool:
    """Whether `config` runs the accelerator path (see `TrainConfig.accelerator`)."""
    return config.accelerator == "on" or (config.accelerator == "auto" and not on_cpu())


def resolve_layout(config: TrainConfig) -> str:
    """The step layout of `config` on this backend and process count (see `TrainConfig.layout`)."""
    layout = config.layout
    if layout == "auto":
        per_core = on_cpu() and not accelerator(config) and jax.process_count() == 1
        layout = "owner" if per_core and config.stats == "gather" else "sharded"
    if layout == "owner" and accelerator(config):
        raise ValueError(
            "layout: 'owner' is the per-core CPU layout; the accelerator path takes 'sharded' or "
            "'replicated'"
        )
    if layout == "owner" and jax.process_count() > 1:
        raise ValueError(
            f"layout: 'owner' runs in one process, this run has {jax.process_count()}; use "
            "'replicated'"
        )
    return layout


def device_layout(layout: str, local_stats: bool, devices: int) -> str:
    """The layout a step runs on a mesh of `devices`: 'sharded' on one device runs as
    'replicated' (a plain lookup, no collective), except with local statistics."""
    if layout == "sharded" and devices == 1 and not local_stats:
        return "replicated"
    return layout


def step_spec(config: TrainConfig, num_other: int, observed_loss: bool = True) -> StepSpec:
    """The kernels' `StepSpec` of a side whose fixed table has `num_other` real rows."""
    layout = resolve_layout(config)
    form = (
        auto_cg_form(jax.default_backend(), config.dim)
        if config.cg_form == "auto"
        else config.cg_form
    )
    matvec = form == "matvec"
    kernel = (
        config.cg_kernel if matvec and config.solver == "cg" and config.stats == "gather" else "xla"
    )
    if kernel == "pallas":
        # the kernel gathers by id from the whole fixed table unless the layout shards it (the
        # mesh `make_mesh` builds: every device)
        runs = device_layout(layout, config.stats == "local", jax.device_count())
        pallas_cg.check_backend(config.dim, config.piece_len, num_other if runs != "sharded" else 0)
    precision = config.matmul_precision
    if precision == "auto":
        precision = "float32" if on_cpu() else "tf32"
    return StepSpec(
        num_other=num_other,
        solver=config.solver,
        cg_iters=config.cg_iters,
        matvec=matvec and config.stats == "gather",
        cg_kernel=kernel,
        local_stats=config.stats == "local",
        observed_loss=observed_loss,
        layout=layout,
        block_size=config.block_size if config.solver == "block" else 0,
        precision=precision,
    )
