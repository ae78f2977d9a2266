"""The execution plan: how a command runs on this backend, decided in one place, once.

`plan_execution(config, machine, num_rows, num_cols)` is the one function from a `TrainConfig`
(its advanced `ExecutionConfig` knobs), the machine (`Machine`: backend, processes, devices,
cores) and the dataset's shape to a frozen `ExecutionPlan`: the devices, the step layout, the
accelerator path, where the packed batches live, one thread per device or not, how long rows are
solved, the CG form, the table dtype, and the devices and top-K block of the evaluation. `train`
computes it once per command (`current`), logs it in one line (`describe`), saves it beside the
checkpoints (`PLAN_FILE`) and hands it to the side runners, fold-in and the evaluation.

A small problem on CPU (`small_on_cpu`: at most `SMALL_PROBLEM_LINKS` links, the dataset's
stats.json count) takes the accelerator path on one CPU device: one compiled program an epoch,
where per-core threads buy nothing and four programs (one per device and side) cost more to
trace and load than the epochs take.

Two decisions fall outside the one function by when they can be made: the CPU split
(`start_cpu_devices`, before JAX starts: JAX then reports the devices it made) and, on the
accelerator path with `resident_batches` 'auto', whether a side's packed batches stay on the
devices (`keeps_resident`: it needs the side's packed size, known once the side is planned).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from alx_trainer.config import (
    ACCELERATOR_BATCH_BYTES,
    ACCELERATOR_BATCH_IDS,
    BATCH_IDS,
    TrainConfig,
)
from alx_trainer.ops import per_core
from alx_trainer.ops.spec import StepSpec
from webgraph_contract import fileio, stats_json

PLAN_FILE = "plan.json"
# The batch sources (`ops.batch_sources`) by name: where a half-epoch's packed batches come from.
BATCH_SOURCES = ("file_stream", "host_cache", "owner_resident", "owner_stream", "device")
# How rows longer than one batch are solved: on the devices (accelerator path), by the
# matrix-free CG of `ops.long_rows.solve_cg` ('owner' layout), or from explicit statistics.
LONG_ROWS = ("device", "matvec_cg", "explicit")
# `cg_form` 'auto': the form measured fastest per backend (DESIGN.md's trainer section has the
# table, `python -m benchmarks.speed --forms` measures it): matrix-free CG on CPU and, from one
# H100's figures, on GPU at every measured d (64-1024); no TPU figures, so TPU follows the GPU.
# A backend or d that ever measures otherwise gets a row here.
AUTO_CG_FORM: dict[str, str] = {"cpu": "matvec", "gpu": "matvec", "tpu": "matvec"}
# Links (stats.json's `edges`, every split) up to which a CPU run with `accelerator` and `layout`
# 'auto' takes the accelerator path on one CPU device (`small_on_cpu`). Seconds per epoch after the
# first, d=32, 2-core host at load 4-7 (per-core path on 2 devices / one program on 1 device):
# ML-100k (100k) 0.020-0.022 / 0.012-0.018; 200k 0.039-0.066 / 0.042-0.043; 400k 0.12-0.14 /
# 0.10-0.15; Gowalla's shape (810k, d=64) 0.24-0.31 / 0.44-0.58. The first (warm) epoch: one
# program to trace and load instead of four.
SMALL_PROBLEM_LINKS = 200_000
# Accelerator path: a side's batches stay on the devices when they take at most this share of the
# free memory (each side decides in turn, the other side's already counted).
RESIDENT_SHARE = 0.5


class Machine(NamedTuple):
    """What a plan depends on besides the config and the data: the backend ('cpu', 'gpu', 'tpu'),
    the processes, the mesh's devices (of every process) and this process's, and its cores."""

    platform: str
    processes: int
    devices: int
    local_devices: int
    cores: int


@dataclasses.dataclass(frozen=True)
class ExecutionPlan:
    """How a command executes (see the module docstring); every field a JSON value."""

    platform: str
    processes: int
    devices: int
    local_devices: int
    num_rows: int
    num_cols: int
    # the accelerator path (`TrainConfig.accelerator`)
    accelerator: bool
    # 'sharded', 'replicated' or 'owner': `TrainConfig.layout` resolved ('sharded' on one device
    # runs as 'replicated', a plain lookup, except with local statistics)
    layout: str
    # one pinned thread per CPU device ('owner' layout on per-core devices; `ops.per_core`)
    per_device: bool
    # where the packed batches come from (`BATCH_SOURCES`)
    batches: str
    # 'on', 'off' or 'auto' (`keeps_resident`): the accelerator path's batches on the devices
    resident_batches: str
    # how rows longer than one batch are solved (`LONG_ROWS`)
    long_rows: str
    # 'matvec' (matrix-free CG, needs stats 'gather') or 'explicit' (d x d matrices)
    cg_form: str
    # of the explicit h h^T products: 'float32', 'tf32' or 'bfloat16'
    precision: str
    # 'float32' or 'bfloat16'
    table_dtype: str
    # ids per batch before `ops.plan.make_plan` balances them (`batch_pieces` 0)
    batch_ids: int
    # the devices of evaluation and fold-in: 'first_local' (this process's first device, the
    # others' being unsafe or another process's) or 'all_local'
    eval_devices: str
    # the top-K score buffer of one device: rows per batch and columns per block
    topk_block: tuple[int, int]

    def describe(self) -> str:
        """The plan in one log line."""
        where = (
            f"{self.devices} {self.platform} device(s) in {self.processes} process(es)"
            f" ({self.local_devices} here{', a thread each' if self.per_device else ''})"
        )
        path = "accelerator path" if self.accelerator else "per-core path"
        resident = f" (resident {self.resident_batches})" if self.batches == "device" else ""
        return (
            f"execution: {where}, {path}, layout {self.layout}, batches {self.batches}{resident}, "
            f"long rows {self.long_rows}, cg_form {self.cg_form}, precision {self.precision}, "
            f"tables {self.table_dtype}, {self.batch_ids} ids a batch, eval on "
            f"{self.eval_devices.replace('_', ' ')} device(s), top-K block "
            f"{self.topk_block[0]}x{self.topk_block[1]}"
        )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ExecutionPlan:
        values = dict(values)
        values["topk_block"] = tuple(values["topk_block"])
        return cls(**values)

    def step_spec(self, config: TrainConfig, num_other: int, observed_loss: bool) -> StepSpec:
        """The kernels' `StepSpec` of a side whose fixed table has `num_other` real rows."""
        return StepSpec(
            num_other=num_other,
            solver=config.solver,
            cg_iters=config.cg_iters,
            matvec=self.cg_form == "matvec",
            local_stats=config.stats == "local",
            observed_loss=observed_loss,
            layout=self.layout,
            block_size=config.block_size if config.solver == "block" else 0,
            precision=self.precision,
        )

    def eval_device_list(self) -> list:
        """This process's devices of evaluation and fold-in (`eval_devices`)."""
        local = jax.local_devices()
        return local[:1] if self.eval_devices == "first_local" else local

    def for_fold_in(self, config: TrainConfig) -> ExecutionPlan:
        """The plan of folding rows in against this plan's column table, on its evaluation
        devices (a mesh of this process's devices only), with no cache of batches between calls.

        A derivation of this plan on the machine it was made for (`plan_execution` for the
        evaluation devices of that machine, not of the machine it is called on): a command on
        another backend makes its own plan first."""
        n = 1 if self.eval_devices == "first_local" else self.local_devices
        machine = Machine(self.platform, self.processes, n, n, len(per_core.cores()))
        config = dataclasses.replace(config, progress=False, cache_batches=False)
        return plan_execution(config, machine, self.num_rows, self.num_cols)


def plan_execution(
    config: TrainConfig, machine: Machine, num_rows: int, num_cols: int, num_links: int = 0
) -> ExecutionPlan:
    """The execution plan of `config` on `machine` for a `num_rows` x `num_cols` matrix of
    `num_links` links (0: not counted); a ValueError names a layout the machine cannot run."""
    platform, processes, devices, local, cores = machine
    cpu = platform == "cpu"
    accelerator = (
        config.accelerator == "on"
        or (config.accelerator == "auto" and not cpu)
        or (small_on_cpu(config, num_links) and local == 1 and processes == 1)
    )
    layout = _layout(config, cpu, accelerator, processes)
    local_stats = config.stats == "local"
    if layout == "sharded" and devices == 1 and not local_stats:
        layout = "replicated"
    owner = layout == "owner"
    per_device = owner and cpu and 1 < local <= cores
    form = AUTO_CG_FORM.get(platform, "matvec") if config.cg_form == "auto" else config.cg_form
    matvec = form == "matvec" and not local_stats
    cg_matvec = matvec and config.solver == "cg"
    streamed = owner and config.stream_batches and (per_device or local == 1)
    if accelerator:
        batches = "device"
    elif streamed:
        batches = "owner_stream"
    elif owner:
        batches = "owner_resident"
    else:
        batches = "host_cache" if config.cache_batches else "file_stream"
    row_stats = local_stats or not (cg_matvec or config.solver == "block")
    precision = config.matmul_precision
    if precision == "auto":
        precision = "float32" if cpu else "tf32"
    return ExecutionPlan(
        platform=platform,
        processes=processes,
        devices=devices,
        local_devices=local,
        num_rows=num_rows,
        num_cols=num_cols,
        accelerator=accelerator,
        layout=layout,
        per_device=per_device,
        batches=batches,
        resident_batches=config.resident_batches,
        long_rows="device" if accelerator else "matvec_cg" if owner and cg_matvec else "explicit",
        cg_form="matvec" if matvec else "explicit",
        precision=precision,
        table_dtype=resolve_table_dtype(config.table_dtype, platform),
        batch_ids=accelerator_batch_ids(config.dim, row_stats, platform)
        if accelerator
        else BATCH_IDS,
        eval_devices="first_local" if cpu else "all_local",
        topk_block=topk_block_shape(platform),
    )


def small_on_cpu(config: TrainConfig, num_links: int) -> bool:
    """Whether a CPU run of `config` on `num_links` links (0: not counted) is a small problem,
    run on the accelerator path on one CPU device (see `SMALL_PROBLEM_LINKS`): with `accelerator`,
    `layout` and `cpu_devices` left to the plan, in one process."""
    return (
        0 < num_links <= SMALL_PROBLEM_LINKS
        and config.accelerator == "auto"
        and config.layout == "auto"
        and config.cpu_devices == 0
        and not config.distributed
    )


def dataset_links(stats: Mapping[str, Any]) -> int:
    """The links a dataset's stats.json counts (`edges`, every split; 0 when it has no count)."""
    return int(stats.get("edges", 0) or 0)


def stats_links(data: str) -> int:
    """`dataset_links` of a dataset directory before it is opened (before JAX starts); 0 for a
    TFDS name or a directory without a readable stats.json (opening it reports that)."""
    try:
        return dataset_links(stats_json.read_stats(data)) if fileio.isdir(data) else 0
    except (OSError, ValueError):
        return 0


def _layout(config: TrainConfig, cpu: bool, accelerator: bool, processes: int) -> str:
    """`TrainConfig.layout` resolved for the backend and process count."""
    layout = config.layout
    if layout == "auto":
        per_core_path = cpu and not accelerator and processes == 1
        layout = "owner" if per_core_path and config.stats == "gather" else "sharded"
    if layout == "owner" and accelerator:
        raise ValueError(
            "layout: 'owner' is the per-core CPU layout; the accelerator path takes 'sharded' or "
            "'replicated'"
        )
    if layout == "owner" and processes > 1:
        raise ValueError(
            f"layout: 'owner' runs in one process, this run has {processes}; use 'replicated'"
        )
    return layout


def accelerator_batch_ids(dim: int, per_row_stats: bool, platform: str) -> int:
    """Ids per batch on the accelerator path (before `make_plan` balances them): on a GPU a
    batch's fixed cost (its kernels' launches) is about the same whatever its size, so the forms
    without d x d statistics per row slot take batches of `ACCELERATOR_BATCH_BYTES` of gathered
    float32 rows (a power of two of ids, never fewer than `ACCELERATOR_BATCH_IDS`); the others,
    and CPU devices (where a batch that stays in cache is worth more: 0.80 s an epoch against 1.50
    on the proxies of `python -m benchmarks.profile --sections proxies`),
    `ACCELERATOR_BATCH_IDS`."""
    if per_row_stats or platform == "cpu":
        return ACCELERATOR_BATCH_IDS
    most = 1 << max(0, (ACCELERATOR_BATCH_BYTES // (4 * dim)).bit_length() - 1)
    return max(ACCELERATOR_BATCH_IDS, most)


def resolve_table_dtype(setting: str, platform: str) -> str:
    """`TrainConfig.table_dtype` on `platform`: 'auto' is float32 on CPU, bfloat16 elsewhere."""
    if setting == "auto":
        return "float32" if platform == "cpu" else "bfloat16"
    return setting


def topk_block_shape(platform: str) -> tuple[int, int]:
    """Rows per batch and columns per block of top K by backend: 4 MiB of scores on CPU, in
    batches of many rows (the threshold scan's host work is per batch), accelerator blocks large
    enough to keep the chip busy (256 MiB of scores)."""
    return (1024, 1024) if platform == "cpu" else (1024, 1 << 16)


def machine(mesh) -> Machine:
    """The machine a `mesh` of this process runs on."""
    return Machine(
        jax.default_backend(),
        jax.process_count(),
        mesh.size,
        len(mesh.local_devices),
        len(per_core.cores()),
    )


def current(
    config: TrainConfig, num_rows: int, num_cols: int, mesh, num_links: int = 0
) -> ExecutionPlan:
    """The plan of `config` on `mesh` (this process's JAX backend and processes)."""
    return plan_execution(config, machine(mesh), num_rows, num_cols, num_links)


def keeps_resident(plan: ExecutionPlan, need: int, free: int) -> bool:
    """Whether the accelerator path keeps a side's packed batches (`need` bytes per device) on the
    devices, which have `free` bytes free."""
    choice = plan.resident_batches
    return choice == "on" or (choice == "auto" and need <= RESIDENT_SHARE * free)


def _cpu_split_settled() -> bool:
    """Whether the CPU's JAX devices are not this module's to split: XLA_FLAGS's
    --xla_force_host_platform_device_count (tests) sets them, or a GPU or TPU plugin is there."""
    return (
        "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", "")
        or per_core.accelerator_plugins()
    )


def cpu_device_count(config: TrainConfig, num_links: int = 0) -> int:
    """The JAX CPU devices a command line splits the host into (0: leave JAX's default) for
    `num_links` links (0: not counted).

    Auto (`cpu_devices` 0) gives one device per core only to runs whose CPU programs have no
    collective and no LAPACK call (CG with the matrix-free product in the 'owner' layout) on a
    host without GPU or TPU plugins: XLA's CPU runtime can deadlock when per-core devices run such
    programs at once (seen with batched Cholesky and with in-process all-gathers on a 2-core
    machine), so other runs keep one CPU device, and so does a small problem (`small_on_cpu`: the
    accelerator path's one program an epoch). XLA_FLAGS's --xla_force_host_platform_device_count
    (tests) wins.
    """
    if _cpu_split_settled():
        return 0
    if small_on_cpu(config, num_links):
        return 1
    safe = (
        config.solver == "cg"
        and config.cg_form in ("auto", "matvec")
        and config.layout in ("auto", "owner")
        and config.stats == "gather"
        # the accelerator path's layouts have collectives
        and config.accelerator != "on"
        and not config.distributed
    )
    return config.cpu_devices or (len(per_core.cores()) if safe else 1)


def start_cpu_devices(config: TrainConfig, num_links: int = 0) -> int:
    """Split the CPU into `cpu_device_count(config, num_links)` JAX devices before JAX starts
    (`per_core`); returns the count made (0: none, JAX had started or the split does not apply)."""
    count = cpu_device_count(config, num_links)
    return count if count and per_core.use_cpu_devices(count) else 0


def start_scoring_cpu_devices() -> int:
    """One JAX CPU device per core for scoring (`eval`, before JAX starts): its programs have no
    collective, so the per-core devices `cpu_device_count` keeps from other runs are safe here;
    returns the count made (0: none)."""
    if _cpu_split_settled():
        return 0
    count = len(per_core.cores())
    return count if per_core.use_cpu_devices(count) else 0


def save_plan(model_dir: str, plan: ExecutionPlan) -> None:
    """Write `plan` as the model directory's `PLAN_FILE` (atomically)."""
    text = json.dumps(plan.to_dict(), indent=2, sort_keys=True) + "\n"
    fileio.write_atomic(os.path.join(model_dir, PLAN_FILE), text)


def load_plan(model_dir: str) -> ExecutionPlan | None:
    """The plan saved in a model directory (None: a model trained before plans were saved)."""
    path = os.path.join(model_dir, PLAN_FILE)
    if not fileio.exists(path):
        return None
    with fileio.open_file(path, "r") as f:
        return ExecutionPlan.from_dict(json.load(f))


def free_bytes(device) -> int:
    """Free memory of `device`: its allocator's limit less what is in use, or the host's available
    memory."""
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    if stats and "bytes_limit" in stats:
        return int(stats["bytes_limit"] - stats.get("bytes_in_use", 0))
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def table_dtype(plan: ExecutionPlan) -> np.dtype:
    """The plan's table dtype as a NumPy/JAX dtype."""
    return jnp.dtype(plan.table_dtype)
