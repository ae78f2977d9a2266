"""The Pallas CG kernel compiled for an H100/H200 (sm_90) on a host without a GPU (issue 32).

Each shape's kernel is exported for CUDA (`jax.export`, Pallas' Triton lowering), its Triton IR is
taken from the export, and Triton's own compiler (`pip install triton`, run in a child process)
compiles it for sm_90 with the kernel's warps and stages; its `ptxas -v` gives registers and
spills. A kernel whose shared memory is over a block's 227 KiB does not run on the chip (the first
GPU run of this kernel failed, and at its old 128 KiB windows Triton asks for 352 KiB). The
compiler is the Triton release on PyPI, not the one inside jaxlib's XLA: a proxy, close but not
the same.

    python -m benchmarks.pallas_sm90                     # the benchmark shapes, a table
    python -m benchmarks.pallas_sm90 --json FILE

Exit status 1 when a shape is over the shared-memory limit or spills, 2 without `triton`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from typing import Any

SHARED_LIMIT = 232_448  # bytes of shared memory a block may take on sm_90 (227 KiB, opt-in)
TRITON_CALL = "__gpu$xla.gpu.triton"


@dataclasses.dataclass(frozen=True)
class Shape:
    """One batch of the kernel: `pieces` x `piece_len` ids, `slots` row slots."""

    name: str
    dim: int
    dtype: str  # the fixed table's: 'bfloat16' or 'float32'
    gathered: bool  # rows gathered before the kernel (the 'sharded' layout)
    pieces: int
    piece_len: int
    slots: int
    table_rows: int = 100_000


# The GPU benchmarks' points: 65,536-id batches and the accelerator path's large ones (1M ids at
# d=128, a multiple of 64 pieces), both piece lengths, both dtypes, both kinds of source.
SHAPES = (
    Shape("d=128 bf16, 65,536 ids", 128, "bfloat16", False, 4096, 16, 5120),
    Shape("d=128 bf16, 983,040 ids", 128, "bfloat16", False, 61440, 16, 76800),
    Shape("d=128 bf16, gathered block", 128, "bfloat16", True, 4096, 16, 5120),
    Shape("d=128 bf16, pieces of 8", 128, "bfloat16", False, 8192, 8, 5120),
    Shape("d=128 f32", 128, "float32", False, 4096, 16, 5120),
    Shape("d=64 f32", 64, "float32", False, 4096, 16, 5120),
    Shape("d=64 bf16", 64, "bfloat16", False, 4096, 16, 5120),
)


def triton_ir(shape: Shape, iters: int = 3) -> dict[str, Any]:
    """The kernel's Triton IR (text) at `shape`, with the warps, stages and grid the export asks
    for."""
    import jax
    import jax.numpy as jnp
    from jax import export
    from jax._src.interpreters import mlir as jax_mlir
    from jax._src.lib.mlir import ir
    from jax._src.lib.triton import dialect as tt_dialect

    from alx_trainer.ops import pallas_cg

    dtype = jnp.dtype(shape.dtype)
    B, L, R, d = shape.pieces, shape.piece_len, shape.slots, shape.dim
    rows = (B, L, d) if shape.gathered else (shape.table_rows, d)
    f32 = lambda *s: jax.ShapeDtypeStruct(s, jnp.float32)
    i32 = lambda *s: jax.ShapeDtypeStruct(s, jnp.int32)
    args = (jax.ShapeDtypeStruct(rows, dtype), i32(B, L), i32(B), f32(R, d), f32(d, d), f32(R))
    solve = jax.jit(lambda *a: pallas_cg.batch_cg(*a, iters, shape.gathered, True, gpu=True))
    unchecked = [export.DisabledSafetyCheck.custom_call(TRITON_CALL)]
    module = export.export(solve, platforms=["cuda"], disabled_checks=unchecked)(*args)
    with jax_mlir.make_ir_context() as ctx:
        tt_dialect.register_dialect(ctx)
        configs = [
            op.attributes["mhlo.backend_config"]
            for op in _operations(ir.Module.parse(module.mlir_module()).operation)
            if op.name == "stablehlo.custom_call"
            and ir.StringAttr(op.attributes["call_target_name"]).value == TRITON_CALL
        ]
        if len(configs) != 1:
            raise RuntimeError(f"{shape.name}: {len(configs)} Triton calls in the export, not 1")
        config = configs[0]
        kernel = ir.Module.parse(ir.StringAttr(config["ir"]).value_bytes)
        text = kernel.operation.get_asm(enable_debug_info=False)
        number = lambda key: ir.IntegerAttr(config[key]).value
        return {
            "ir": text,
            "num_warps": number("num_warps"),
            "num_stages": number("num_stages"),
            "grid": number("grid_x"),
            "tile": list(pallas_cg.tile_shape(B, R, L, d, dtype.itemsize)),
        }


def _operations(op):
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                yield child.operation
                yield from _operations(child.operation)


# Run by the child (the Triton compiler in its own process, away from jaxlib's MLIR).
_COMPILE = r"""
import json, re, subprocess, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import get_ptxas
path, warps, stages = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
kernel = triton.compile(path, target=GPUTarget("cuda", 90, 32),
                        options={"num_warps": warps, "num_stages": stages})
with open(path + ".ptx", "w") as f:
    f.write(kernel.asm["ptx"])
log = subprocess.run([get_ptxas(90).path, "-arch=sm_90a", "-v", path + ".ptx", "-o",
                      path + ".cubin"], capture_output=True, text=True, check=True).stderr
regs = re.search(r"Used (\d+) registers", log)
spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
print(json.dumps({"shared": kernel.metadata.shared, "registers": int(regs.group(1)),
                  "spill_stores": int(spill.group(1)), "spill_loads": int(spill.group(2)),
                  "triton": triton.__version__}))
"""


def compile_sm90(kernel: dict[str, Any], python: str = sys.executable) -> dict[str, Any]:
    """Triton's compile of `kernel` (from `triton_ir`) for sm_90: shared memory bytes, registers a
    thread, spill bytes; raises RuntimeError with Triton's last line when it fails."""
    with tempfile.TemporaryDirectory(prefix="alx_sm90_") as work:
        path = os.path.join(work, "kernel.ttir")
        with open(path, "w") as f:
            f.write(kernel["ir"])
        env = dict(os.environ, TRITON_DEFAULT_FP_FUSION="1")  # Triton's own default, said aloud
        done = subprocess.run(
            [python, "-c", _COMPILE, path, str(kernel["num_warps"]), str(kernel["num_stages"])],
            capture_output=True,
            text=True,
            env=env,
        )
    if done.returncode:
        lines = [x for x in done.stderr.strip().splitlines() if x.strip()]
        raise RuntimeError(lines[-1] if lines else f"exit {done.returncode}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def has_triton(python: str = sys.executable) -> bool:
    return subprocess.run([python, "-c", "import triton"], capture_output=True).returncode == 0


def check(shape: Shape) -> dict[str, Any]:
    """One shape's figures, `ok` False when it would not run well on the chip."""
    kernel = triton_ir(shape)
    out = {"shape": shape.name, "tile": kernel["tile"], "grid": kernel["grid"]}
    out.update(num_warps=kernel["num_warps"], num_stages=kernel["num_stages"])
    try:
        out.update(compile_sm90(kernel))
    except RuntimeError as e:
        return dict(out, ok=False, error=str(e))
    out["ok"] = out["shared"] <= SHARED_LIMIT and out["spill_stores"] == 0
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", help="every figure to this file")
    args = parser.parse_args(argv)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the export needs no accelerator
    if not has_triton():
        print("pallas_sm90: needs Triton's compiler: pip install triton", file=sys.stderr)
        return 2
    rows = []
    print(f"{'shape':<30} {'tile':>8} {'shared B':>9} {'regs':>5} {'spill B':>8}  ok")
    for shape in SHAPES:
        r = check(shape)
        rows.append(r)
        if "error" in r:
            print(f"{r['shape']:<30} {str(r['tile']):>8}  failed: {r['error']}", flush=True)
            continue
        print(
            f"{r['shape']:<30} {'x'.join(map(str, r['tile'])):>8} {r['shared']:>9,} "
            f"{r['registers']:>5} {r['spill_stores']:>8,}  {'yes' if r['ok'] else 'NO'}",
            flush=True,
        )
    print(f"shared memory limit {SHARED_LIMIT:,} bytes a block (sm_90); tile: rows x pieces")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"shapes": rows, "shared_limit": SHARED_LIMIT}, f, indent=1)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
