"""Large tables: initialization and an orbax checkpoint save each hold about one table, not
several."""

from __future__ import annotations

import json
import os
import subprocess
import sys

# Peak-memory helpers for the subprocess scripts (XLA's buffers are invisible to tracemalloc).
MEMORY_HELPERS = """
def rss():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) * 1024

def peak():
    return int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) * 1024

def reset_peak():  # the peak from here on, not an earlier transient (imports, compilation)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")

# (call's (array, ...) result once ready, the memory it held above what was resident)
def held_by(call):
    before = rss()
    reset_peak()
    result = call()
    result.table.block_until_ready()
    return result, peak() - before

"""

SCRIPT = (
    MEMORY_HELPERS
    + """
import json, sys
import jax, jax.numpy as jnp, numpy as np
from alx_trainer import checkpoint
from alx_trainer.execution import make_mesh
from alx_trainer.model import init_table

mesh = make_mesh(jax.devices()[:2])
jnp.zeros(1).block_until_ready()
before_init = rss()
reset_peak()
table = init_table(mesh, 0, 1_000_003, 64, 0.1, jnp.float32)
table.block_until_ready()
after_init = peak()
mgr = checkpoint.manager(sys.argv[1], keep=1)
meta = {"epoch": 1, "table_dtype": "float32", "table_shapes": {"row": list(table.shape)}}
checkpoint.save(mgr, 1, {"row": table}, meta)
mgr.close()
after_save = peak()
restored, meta, epoch = checkpoint.restore_numpy(sys.argv[2])
same = bool(np.array_equal(restored["row"], np.asarray(table)))
print(json.dumps({"table": table.nbytes, "init": after_init - before_init,
                  "save": after_save - after_init,
                  "same": same, "epoch": epoch, "std": float(np.asarray(table)[:1_000_003].std()),
                  "pad_zero": bool((np.asarray(table)[1_000_003:] == 0).all())}))
"""
)


def test_init_and_checkpoint_peak_memory(tmp_path):
    model_dir = tmp_path / "m"
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(model_dir), str(model_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["same"] and got["epoch"] == 1  # the checkpoint reads back exactly
    assert abs(got["std"] - 0.1) < 0.001 and got["pad_zero"]  # N(0, 0.1) rows, zero padding
    # A whole-table jax.random.normal held ~4 tables at once; chunked generation about one.
    assert got["init"] < 1.5 * got["table"]
    # The save adds well under a table (a compressed save held a second, encoded copy).
    assert got["save"] < 0.5 * got["table"]


REPLICA_SCRIPT = (
    MEMORY_HELPERS
    + """
import json
import jax, jax.numpy as jnp, numpy as np
from alx_trainer.ops import side_runner
from alx_trainer.execution import make_mesh
from alx_trainer.model import init_table

side_runner.GRAM_CHUNK = 30_000  # several chunks per shard, the last one overlapping
mesh = make_mesh(jax.devices()[:2])
table = init_table(mesh, 0, 1_000_003, 64, 0.1, jnp.bfloat16)
table.block_until_ready()
# once before the peak is reset (first-use buffers)
gram = side_runner.gramian_via_host(mesh, table)
before = rss()
reset_peak()
gram = np.asarray(side_runner.gramian_via_host(mesh, table))
after_gram = peak()
replica = side_runner.replicate_via_host(mesh, table)
replica.block_until_ready()
after_replica = peak()
host = np.asarray(table).astype(np.float64)
print(json.dumps({
    "table": table.nbytes, "gram": after_gram - before, "replica": after_replica - before,
    "gram_err": float(np.abs(gram - host.T @ host).max() / np.abs(host.T @ host).max()),
    "buffers": len({s.data.unsafe_buffer_pointer() for s in replica.addressable_shards}),
    "devices": len(replica.addressable_shards),
    "dtype": str(replica.dtype),  # its bits (`gather_form`), read here as bfloat16
    "same": all(np.array_equal(np.asarray(s.data).view(jnp.bfloat16), np.asarray(table))
                for s in replica.addressable_shards),
}))
"""
)


def test_fixed_table_replica_is_one_shared_copy_and_gramian_casts_by_chunks():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    run = subprocess.run(
        [sys.executable, "-c", REPLICA_SCRIPT], env=env, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["gram_err"] < 1e-5  # float32 sums of the bfloat16 rows against float64
    # float32 copies of both bfloat16 shards would be two tables; chunks of 30k rows are 0.06 of one
    # each
    assert got["gram"] < 0.5 * got["table"], got
    # every device sees the same host buffer: one table more, not one per device
    assert got["devices"] == 2 and got["buffers"] == 1 and got["same"] and got["dtype"] == "uint16"
    assert got["replica"] < 1.4 * got["table"], got


SOLVE_SCRIPT = (
    MEMORY_HELPERS
    + """
import json
import jax, jax.numpy as jnp, numpy as np
from alx_trainer.config import TrainConfig
from webgraph_contract.ragged import RaggedRows
from alx_trainer import execution
from alx_trainer.execution import make_mesh
from alx_trainer.model import init_table, table_from_numpy
from alx_trainer.ops.side_runner import plan_side

n, n_other, d = 2_000_000, 5_000, 64
rng = np.random.default_rng(0)
row_ids = np.sort(rng.choice(n, 300, replace=False))
rows = [rng.choice(n_other, rng.integers(1, 40), replace=False) for _ in row_ids]
config = TrainConfig(data="unused", model_dir="unused", dim=d, table_dtype="bfloat16",
                     progress=False)
mesh = make_mesh(jax.devices()[:2])
exe = execution.current(config, n, n_other, mesh)
spec = exe.step_spec(config, n_other, observed_loss=True)
chunk = RaggedRows.from_lists(rows, row_ids)
runner = plan_side(config, exe, mesh, spec, lambda: iter([chunk]), n)
src = table_from_numpy(mesh, rng.normal(0, 0.1, (n_other, d)), jnp.bfloat16)
start = np.asarray(init_table(mesh, 0, n, d, 0.1, jnp.float32)).astype(jnp.bfloat16)

def solve(dtype):
    dst = table_from_numpy(mesh, start.astype(np.float32), dtype)
    return runner.run(src, dst).table

solve(jnp.bfloat16).block_until_ready()  # compiled; first-use buffers
dst = table_from_numpy(mesh, start.astype(np.float32), jnp.bfloat16)
dst.block_until_ready()
result, held = held_by(lambda: runner.run(src, dst))
out, terms = result.table, result.terms
got = np.asarray(out).astype(np.float32)
# the float32 table's solve, rounded
want = np.asarray(solve(jnp.float32)).astype(jnp.bfloat16).astype(np.float32)
untouched = np.setdiff1d(np.arange(n), row_ids)
print(json.dumps({
    "table": out.nbytes, "held": held, "dtype": str(out.dtype), "solved": float(terms.rows),
    "untouched_same": bool(np.array_equal(got[untouched[::97]],
                                          start[untouched[::97]].astype(np.float32))),
    "max_err": float(np.abs(got[row_ids] - want[row_ids]).max()),
    "scale": float(np.abs(want[row_ids]).max()),
    "changed": bool((got[row_ids] != start[row_ids].astype(np.float32)).any()),
}))
"""
)


def test_bfloat16_half_epoch_solves_in_place():
    """A half-epoch on a bfloat16 table holds no second table (XLA:CPU once scattered through
    float32 copies)."""
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    run = subprocess.run(
        [sys.executable, "-c", SOLVE_SCRIPT], env=env, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["dtype"] == "bfloat16" and got["solved"] == 300 and got["changed"], got
    assert got["untouched_same"], got  # rows without data keep their values, bit for bit
    # the float32 solve, within bfloat16 rounding
    assert got["max_err"] <= 2**-7 * got["scale"], got
    # float32 scatter copies held two tables (both shards, two float32 temporaries each); in
    # place, the reinterpretation before and after holds one shard at a time
    assert got["held"] < 0.75 * got["table"], got


LONG_SCRIPT = (
    MEMORY_HELPERS
    + """
import json
import jax, jax.numpy as jnp, numpy as np
from alx_trainer.config import TrainConfig
from webgraph_contract.ragged import RaggedRows
from alx_trainer import execution
from alx_trainer.ops import long_rows
from alx_trainer.execution import make_mesh
from alx_trainer.model import table_from_numpy
from alx_trainer.ops.side_runner import plan_side

n, n_other, d = 20_000, 2_000_000, 64
rng = np.random.default_rng(0)
row_ids = np.sort(rng.choice(n, 200, replace=False))
# 16 x 64 ids per device batch: every 20th row (3000 ids) is a long row, solved matrix-free
rows = [rng.choice(n_other, 3000 if i % 20 == 0 else rng.integers(1, 40), replace=False)
        for i in range(len(row_ids))]
long = row_ids[::20]
config = TrainConfig(data="unused", model_dir="unused", dim=d, table_dtype="bfloat16",
                     progress=False,
                     piece_len=16, batch_pieces=64, cg_iters=3)
mesh = make_mesh(jax.devices()[:2])
exe = execution.current(config, n, n_other, mesh)
spec = exe.step_spec(config, n_other, observed_loss=True)
chunk = RaggedRows.from_lists(rows, row_ids)
runner = plan_side(config, exe, mesh, spec, lambda: iter([chunk]), n)
other = rng.normal(0, 0.1, (n_other, d)).astype(jnp.bfloat16).astype(np.float32)
start = rng.normal(0, 0.1, (n, d)).astype(jnp.bfloat16).astype(np.float32)
passes = []
long_cg = long_rows.long_cg
long_rows.long_cg = lambda src, *a: passes.append(src.dtype) or long_cg(src, *a)

def solve(dtype):
    src = table_from_numpy(mesh, other, dtype)
    return runner.run(src, table_from_numpy(mesh, start, dtype)).table

solve(jnp.bfloat16).block_until_ready()  # compiled; first-use buffers
src = table_from_numpy(mesh, other, jnp.bfloat16)
dst = table_from_numpy(mesh, start, jnp.bfloat16)
dst.block_until_ready()
passes.clear()
result, held = held_by(lambda: runner.run(src, dst))
out, terms = result.table, result.terms
got = np.asarray(out).astype(np.float32)
kinds = sorted({str(k) for k in passes})
del src, dst
want = np.asarray(solve(jnp.float32))  # the float32 tables' solve (matrix-free too)
print(json.dumps({
    "fixed": n_other * d * 2, "held": held, "long_steps": runner.plan.long_steps,
    "passes": len(passes),
    "pass_dtypes": kinds, "solved": float(terms.rows), "dtype": str(out.dtype),
    "long_err": float(np.abs(got[long] - want[long]).max()),
    "scale": float(np.abs(want[long]).max()),
    "changed": bool((got[long] != start[long]).all(axis=1).any()),
}))
"""
)


def test_bfloat16_long_rows_gather_the_fixed_table_without_a_float32_copy():
    """Matrix-free long rows on a bfloat16 fixed table hold its one shared replica, nothing per
    device.

    XLA:CPU hoisted the float32 convert of a bfloat16 gather operand out of `long_pass`'s loop: each
    device held a float32 copy of the whole fixed table (2x its bytes, 4x for two devices; +6 GiB
    and a stopped run at the de-sparse shape). The kernels now gather its uint16 bits.
    """
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    run = subprocess.run(
        [sys.executable, "-c", LONG_SCRIPT], env=env, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["long_steps"] > 0 and got["passes"] > 0 and got["pass_dtypes"] == ["uint16"], got
    assert got["dtype"] == "bfloat16" and got["solved"] == 200 and got["changed"], got
    # the float32 solve, within bfloat16 rounding
    assert got["long_err"] <= 2**-7 * got["scale"], got
    # the replica (one host copy shared by both devices) is one fixed table; float32 copies were 4
    # more
    assert got["held"] < 1.5 * got["fixed"], got


def test_replicas_of_successive_half_epochs_reuse_one_host_buffer():
    import jax
    import numpy as np

    from alx_trainer.execution import make_mesh
    from alx_trainer.model import table_from_numpy
    from alx_trainer.ops import side_runner

    mesh = make_mesh(jax.devices()[:2])
    rng = np.random.default_rng(0)
    big = rng.normal(size=(1000, 16)).astype(np.float32)
    small = rng.normal(size=(300, 16)).astype(np.float32)
    buffer = side_runner.ReplicaBuffer()
    pointers = []
    for values in (big, small, big):  # row side, column side, row side
        replica = side_runner.replicate_via_host(
            mesh, table_from_numpy(mesh, values, np.float32), buffer
        )
        for shard in replica.addressable_shards:  # every device: the whole table, exactly
            np.testing.assert_array_equal(np.asarray(shard.data)[: len(values)], values)
        pointers.append({s.data.unsafe_buffer_pointer() for s in replica.addressable_shards})
        del replica
    # one buffer for all: each replica aliases the memory the first one was copied into
    assert pointers[0] == pointers[1] == pointers[2] and len(pointers[0]) == 1
    fresh = side_runner.replicate_via_host(mesh, table_from_numpy(mesh, small, np.float32))
    assert {s.data.unsafe_buffer_pointer() for s in fresh.addressable_shards} != pointers[0]
