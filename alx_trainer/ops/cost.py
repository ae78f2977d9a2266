"""XLA's cost analysis of the programs an epoch launches: FLOPs and bytes accessed, per device.

`jit(...).lower(...).compile().cost_analysis()` counts a loop's body once, whatever its trip count,
so each program is analysed as compiled with its loops unrolled (`StepSpec.unroll`): one normal
batch (times the batches a half-epoch runs), each long-row call, the gramian and the replica.
Shapes come from the runner's plan and batch source; nothing runs. `epoch_cost` sums both sides
(`alx_trainer.callbacks.CostReport` logs it at debug level; `alx_trainer.train.epoch_cost(config,
dataset)` is where `python -m benchmarks.speed` and `python -m benchmarks.profile --sections
proxies` read it).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from alx_trainer.execution import AXIS, Fixed, replicated
from alx_trainer.ops import kernels, table_storage
from alx_trainer.ops.side_runner import one_call_epoch


@dataclasses.dataclass(frozen=True)
class ProgramCost:
    """One program of a half-epoch: its cost per launch (loops unrolled) and launches per
    half-epoch."""

    side: str
    name: str
    flops: float
    bytes_accessed: float
    times: int

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def compiled_cost(fn, *args) -> tuple[float, float]:
    """(FLOPs, bytes accessed) of `fn` (a jitted function) compiled for `args` (arrays or shape
    structs)."""
    analysis = fn.lower(*args).compile().cost_analysis()
    if isinstance(analysis, (list, tuple)):  # older JAX: one dict per program
        analysis = analysis[0] if analysis else {}
    return float(analysis.get("flops", 0.0)), float(analysis.get("bytes accessed", 0.0))


def _like(a: jax.Array | jax.ShapeDtypeStruct, dtype=None, sharding=None) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(a.shape, dtype or a.dtype, sharding=sharding or a.sharding)


def side_costs(runner, src: jax.Array, dst: jax.Array, side: str = "") -> list[ProgramCost]:
    """The programs of one `runner.run(src, dst)`, with their launches (the gramian of the fixed
    table counted once per half-epoch, as the training loop computes two per epoch)."""
    mesh, plan = runner.mesh, runner.plan
    spec = dataclasses.replace(runner.spec, unroll=True)
    d = dst.shape[1]
    fixed = Fixed(
        _like(jax.ShapeDtypeStruct((d, d), jnp.float32), sharding=replicated(mesh)),
        _like(jax.ShapeDtypeStruct((3,), jnp.float32), sharding=replicated(mesh)),
    )
    src_s = _like(
        src, table_storage.bits_dtype(src), replicated(mesh) if spec.replicated_src else None
    )
    dst_s = _like(dst, table_storage.bits_dtype(dst))
    L, B, R = plan.shape
    costs = []
    if plan.steps:
        k = mesh.size
        shapes = ((k, 1, B, L), (k, 1, B), (k, 1, R), (k, 1, R))
        if runner.per_device:  # one device's program on its own part of the table
            device = jax.sharding.SingleDeviceSharding(mesh.local_devices[0])
            one = [jax.ShapeDtypeStruct((1, *s[1:]), jnp.int32, sharding=device) for s in shapes]
            part = jax.ShapeDtypeStruct((dst.shape[0] // k, d), dst_s.dtype, sharding=device)
            whole = jax.ShapeDtypeStruct(src.shape, src_s.dtype, sharding=device)
            small = Fixed(*(jax.ShapeDtypeStruct(f.shape, f.dtype, sharding=device) for f in fixed))
            flops, moved = compiled_cost(kernels.make_device_step(spec), whole, part, small, *one)
            times = max(plan.device_steps, default=plan.steps)
        else:
            batch = NamedSharding(mesh, P(AXIS))
            one = [jax.ShapeDtypeStruct(s, jnp.int32, sharding=batch) for s in shapes]
            flops, moved = compiled_cost(kernels.make_step(mesh, spec), src_s, dst_s, fixed, *one)
            times = plan.steps
        costs.append(ProgramCost(side, "normal batch", flops, moved, times))
    if runner.exe.long_rows == "device":
        for i, call in enumerate(runner.source.long_calls()):
            args = [_like(a) for a in call]
            flops, moved = compiled_cost(
                kernels.make_long_solve(mesh, spec), src_s, dst_s, fixed, *args
            )
            costs.append(ProgramCost(side, f"long rows {i}", flops, moved, 1))
    elif plan.long_steps:
        costs.append(ProgramCost(side, "long rows (host-driven, not analysed)", 0.0, 0.0, 0))
    if not spec.owner:  # the 'owner' gramian and replica go through the host
        flops, moved = compiled_cost(
            kernels.make_gramian(mesh), _like(src, table_storage.bits_dtype(src))
        )
        costs.append(ProgramCost(side, "gramian", flops, moved, 1))
        if spec.layout == "replicated" and not runner.one_call:  # the one call gathers it inside
            flops, moved = compiled_cost(kernels.make_replicate(mesh), _like(src))
            costs.append(ProgramCost(side, "replicate", flops, moved, 1))
    return costs


def epoch_cost(
    runners: Mapping[str, Any], sides, tables: Mapping[str, jax.Array]
) -> dict[str, Any]:
    """Both half-epochs' programs (`sides`: the training loop's `train.sides`) and the epoch's
    totals per device: `flops_per_epoch`, `bytes_per_epoch`, `launches_per_epoch`, `programs`."""
    programs = [
        c
        for s in sides
        for c in side_costs(runners[s.name], tables[s.other], tables[s.table], s.name)
    ]
    if one_call_epoch(runners["row"], runners["col"]):
        # both half-epochs in one call (`side_runner.run_epoch`)
        launches = 1
    else:
        launches = sum(
            _launches(runners[s.name], [c for c in programs if c.side == s.name]) for s in sides
        )
    return {
        "flops_per_epoch": sum(c.flops * c.times for c in programs),
        "bytes_per_epoch": sum(c.bytes_accessed * c.times for c in programs),
        "launches_per_epoch": launches,
        "programs": [c.as_dict() for c in programs],
    }


def _launches(runner, costs: list[ProgramCost]) -> int:
    """Compiled calls of one half-epoch: one when it runs as one (`SideRunner.one_call`)."""
    if runner.one_call:
        return 1
    return sum(runner.plan.calls if c.name == "normal batch" else c.times for c in costs)
