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

Besides the plan, what it decides over, in this order: the 1-D device mesh (`make_mesh`, axis
`AXIS`), the tables' row sharding and moving `[devices, ...]` arrays between host and mesh;
`StepSpec`, what the kernels see of a side, and its layouts ('sharded' is the paper's: both
tables sharded, a sharded gather and scatter every step; 'replicated' copies the fixed table
whole to every device once per half-epoch, so a step's gather is a local lookup; 'owner' adds
that each device solves only rows of its own shard, so a step needs no collective at all, its
loss terms come back per device, and the gramian and replication go through the host, one
process);

the CPU split into one device per core (`use_cpu_devices`) with one pinned thread per device
(`run_per_core`). XLA's runtime threads would otherwise take over any device's kernels and loop
bodies on any core, moving a device's work away from the blocks it keeps in its core's L2 cache.
So (1) asynchronous dispatch is off, a single-device program starts in the thread that calls
it, and `run_per_core` gives each device a thread pinned to its own core; (2) the CPU client is
created while the process may use one core only, so XLA's threads do not float, and the threads
it made are then pinned one per core: a thread keeps the cores it was created with, and XLA runs
the thunks of a large program (a scan over many batches) on its intra-op pool, not in the calling
thread; left on the first core, that pool would run every device's work on one core (figures:
docs/benchmarks.md, "Figures behind code choices");

and host-side work spread over the cores in threads (`thread_map`, `ordered`, `widened`).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import os
from concurrent.futures import Future, ThreadPoolExecutor, wait
from importlib import metadata
from typing import Any, Callable, Iterable, Iterator, Mapping, NamedTuple, Sequence, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from alx_trainer.config import (
    ACCELERATOR_BATCH_BYTES,
    ACCELERATOR_BATCH_IDS,
    BATCH_IDS,
    TrainConfig,
)
from alx_trainer.ops.table_storage import BF16_BITS
from webgraph_contract import fileio, stats_json

# The mesh, and what a compiled step sees of a side

AXIS = "d"


def make_mesh(devices=None) -> Mesh:
    """A 1-D mesh over all devices (of every process)."""
    return Mesh(np.asarray(devices if devices is not None else jax.devices()), (AXIS,))


def padded_rows(n: int, mesh: Mesh) -> int:
    """Rows of a table padded to a multiple of the device count."""
    d = mesh.size
    return max(d, -(-n // d) * d)


def row_sharding(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P(AXIS))


def device_parts(array: jax.Array) -> dict:
    """This process's shards of `array` by device (single-device arrays sharing its buffers)."""
    return {s.device: s.data for s in array.addressable_shards}


def host_batch(mesh: Mesh, local: np.ndarray) -> jax.Array:
    """A global [devices, ...] array sharded by its first axis from this process's [local devices,
    ...] part."""
    sharding = row_sharding(mesh)
    global_shape = (mesh.size,) + local.shape[1:]
    return jax.make_array_from_process_local_data(sharding, local, global_shape)


def local_rows(array: jax.Array) -> np.ndarray:
    """This process's rows of an array sharded by its first axis, in order."""
    shards = sorted(array.addressable_shards, key=lambda s: s.index[0].start or 0)
    return np.concatenate([np.asarray(s.data) for s in shards])


def replicated(mesh: Mesh) -> NamedSharding:
    """The whole array on every device of `mesh`."""
    return NamedSharding(mesh, P())


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


# The plan

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
    # one pinned thread per CPU device ('owner' layout on per-core devices; `run_per_core`)
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
    # ids per batch before `data.batching.make_plan` balances them (`batch_pieces` 0)
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
        machine = Machine(self.platform, self.processes, n, n, len(cores()))
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
        len(cores()),
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
        or accelerator_plugins()
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
    return config.cpu_devices or (len(cores()) if safe else 1)


def start_cpu_devices(config: TrainConfig, num_links: int = 0) -> int:
    """Split the CPU into `cpu_device_count(config, num_links)` JAX devices before JAX starts
    (`use_cpu_devices`); returns the count made (0: none, JAX had started or the split does not
    apply)."""
    count = cpu_device_count(config, num_links)
    return count if count and use_cpu_devices(count) else 0


def start_scoring_cpu_devices() -> int:
    """One JAX CPU device per core for scoring (`eval`, before JAX starts): its programs have no
    collective, so the per-core devices `cpu_device_count` keeps from other runs are safe here;
    returns the count made (0: none)."""
    if _cpu_split_settled():
        return 0
    count = len(cores())
    return count if use_cpu_devices(count) else 0


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


# CPU devices: one thread each, pinned to its core

T = TypeVar("T")


def use_cpu_devices(count: int) -> bool:
    """Split the CPU into `count` JAX devices; with more than one, set up as described above.

    Call before JAX starts (it starts it); returns False, changing nothing, if it had started.
    """
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:  # the backend exists already: its devices stay as they are
        return False
    if count > 1:
        jax.config.update("jax_cpu_enable_async_dispatch", False)
        _start_on_one_core(count)
    return True


def _start_on_one_core(count: int) -> None:
    """Create JAX's backends while this thread may only run on its first core, then pin the
    threads they started one per core of the `count` devices' cores (those `run` pins device
    threads to), in the order they were made (see above)."""
    allowed = cores()
    if not hasattr(os, "sched_setaffinity") or len(allowed) < 2:
        jax.devices()
        return
    before = process_threads()
    os.sched_setaffinity(0, allowed[:1])
    try:
        jax.devices()
    finally:
        os.sched_setaffinity(0, allowed)
    used = allowed[:count]
    for k, tid in enumerate(sorted(process_threads() - before)):
        try:
            os.sched_setaffinity(tid, {used[k % len(used)]})
        except ProcessLookupError:  # a short-lived thread that has ended
            pass


def process_threads() -> set[int]:
    """This process's thread ids (Linux; empty elsewhere)."""
    try:
        return {int(t) for t in os.listdir("/proc/self/task")}
    except FileNotFoundError:
        return set()


def accelerator_plugins() -> bool:
    """Whether a GPU or TPU backend may be installed (then the CPU is not split)."""
    return (
        bool(metadata.entry_points(group="jax_plugins"))
        or importlib.util.find_spec("libtpu") is not None
    )


def cores() -> list[int]:
    """The CPU cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def per_core_applies(devices: Sequence) -> bool:
    """Whether `devices` get a thread each: several CPU devices of this process, at most one per
    core."""
    local = all(d.process_index == jax.process_index() for d in devices)
    return local and all(d.platform == "cpu" for d in devices) and 1 < len(devices) <= len(cores())


@functools.cache
def _pinned_worker(j: int, cpu: int | None) -> ThreadPoolExecutor:
    """The long-lived thread of task slot j, pinned to core `cpu` (None: not pinned).

    Kept for the process: a long-row half-epoch runs a `run` per CG pass, each of which used to
    start, pin and join new threads.
    """
    pool = ThreadPoolExecutor(1, thread_name_prefix=f"alx-device{j}")
    if cpu is not None:
        pool.submit(os.sched_setaffinity, 0, {cpu}).result()  # pid 0: that thread only
    return pool


def run_per_core(tasks: Sequence[Callable[[], T]]) -> list[T]:
    """Run task j in thread j (pinned to core j when dispatch is synchronous); results in order.

    The first task to raise re-raises here, after every task has finished.
    """
    cpus = cores()
    pin = (
        hasattr(os, "sched_setaffinity")
        and not jax.config.read("jax_cpu_enable_async_dispatch")
        and len(tasks) <= len(cpus)
    )
    futures = [
        _pinned_worker(j, cpus[j] if pin else None).submit(task) for j, task in enumerate(tasks)
    ]
    wait(futures)
    return [f.result() for f in futures]


# Host-side work spread over the cores (NumPy's sorts, gathers, decoding and casts release
# the GIL for most of their work)

R = TypeVar("R")


def host_threads() -> int:
    """Threads for host-side work: one per core this process may run on."""
    return len(cores())


def thread_map(fn: Callable[[T], R], items: Iterable[T], threads: int | None = None) -> list[R]:
    """`[fn(x) for x in items]` in `threads` threads (None: `host_threads()`), in order."""
    items = list(items)
    workers = max(1, min(threads or host_threads(), len(items)))
    if workers == 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(workers, thread_name_prefix="alx-host") as pool:
        return list(pool.map(fn, items))


def ordered(fn: Callable[[T], R], items: Iterable[T], ahead: int) -> Iterator[R]:
    """`fn(x)` for each of `items`, in order, computed in `ahead` threads at most `ahead` + 1 items
    ahead of the consumer (so many results in memory at a time)."""
    if ahead <= 1:
        yield from map(fn, items)
        return
    with ThreadPoolExecutor(ahead, thread_name_prefix="alx-host") as pool:
        pending: list[Future] = []
        try:
            for x in items:
                pending.append(pool.submit(fn, x))
                if len(pending) > ahead:
                    yield pending.pop(0).result()
            while pending:
                yield pending.pop(0).result()
        finally:
            for f in pending:
                f.cancel()


def widened(host: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Table rows `host` as float32, copied into `out` when given (else float32 rows are returned
    as they are), in a thread per core (a bfloat16 table widens without a single-thread pass)."""
    if out is None:
        if host.dtype == np.float32:
            return host
        out = np.empty(host.shape, np.float32)
    step = max(1, -(-len(host) // host_threads()))

    def widen(lo: int) -> None:
        out[lo : lo + step] = host[lo : lo + step]

    thread_map(widen, range(0, len(host), step))
    return out


def aligned_empty(shape: tuple[int, ...], dtype, align: int = 64) -> np.ndarray:
    """An uninitialized host array starting on an `align`-byte boundary (XLA:CPU aliases only such
    buffers)."""
    dtype = np.dtype(dtype)
    size = int(np.prod(shape)) * dtype.itemsize
    raw = np.empty(size + align, np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start : start + size].view(dtype).reshape(shape)


def host_float32(rows: np.ndarray, scratch: np.ndarray | None = None) -> np.ndarray:
    """float32 `rows` of a table on the host; bfloat16 (or its `BF16_BITS` solving form) by shifting
    its bits, into `scratch` when given (faster than ml_dtypes' cast)."""
    if rows.dtype not in (jnp.bfloat16, BF16_BITS):
        return np.asarray(rows, np.float32)  # float32 rows as they are (no copy)
    out = np.empty(rows.shape, np.uint32) if scratch is None else scratch[: len(rows)]
    np.left_shift(rows.view(np.uint16), 16, out=out, dtype=np.uint32)
    return out.view(np.float32)
