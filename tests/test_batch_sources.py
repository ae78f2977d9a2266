"""Every batch source (`ops.batch_sources`) keeps the one protocol: made by the planning step
(`side_runner.plan_side`) for the mode the execution plan names, its calls and long rows hold
every row of the side with its ids, each row once, and `total_steps` counts what a half-epoch
reports.

The rows are read back from the packed arrays as the kernels see them (a piece's row slot, the
slot's row id, shard-local in the 'owner' layout) and compared with the input lists.
"""

from __future__ import annotations

import collections
from concurrent.futures import ThreadPoolExecutor

import jax
import numpy as np
import pytest

from alx_trainer import execution
from alx_trainer.config import TrainConfig
from alx_trainer.data import batching
from alx_trainer.execution import make_mesh
from alx_trainer.ops import batch_sources
from alx_trainer.ops.side_runner import plan_side
from webgraph_contract.ragged import RaggedRows

NUM_ROWS, NUM_COLS = 60, 90
# 4 x 8 = 32 ids a batch: rows of 45 ids are long
SHAPE = {"piece_len": 4, "batch_pieces": 8, "batch_rows": 4}

# (mode the plan must pick, devices, cores of the machine, config knobs): a thread per device
# where the devices are at most the cores
MODES = {
    "file_stream": ("file_stream", 2, 2, {"layout": "sharded"}),
    "host_cache": ("host_cache", 2, 2, {"layout": "sharded", "cache_batches": True}),
    "owner_resident, a thread per device": ("owner_resident", 2, 2, {"layout": "owner"}),
    "owner_resident, global calls": ("owner_resident", 4, 1, {"layout": "owner"}),
    "owner_stream": ("owner_stream", 2, 2, {"layout": "owner", "stream_batches": True}),
    "device, resident": ("device", 2, 2, {"accelerator": "on", "resident_batches": "on"}),
    "device, streamed": ("device", 2, 2, {"accelerator": "on", "resident_batches": "off"}),
}


def _rows() -> dict[int, list[int]]:
    rng = np.random.default_rng(3)
    rows = {
        r: sorted(rng.choice(NUM_COLS, int(rng.integers(0, 14)), replace=False).tolist())
        for r in range(NUM_ROWS)
        if r % 11
    }
    for r in (4, 21, 50):
        rows[r] = sorted(rng.choice(NUM_COLS, 45, replace=False).tolist())
    return rows


def _chunks(rows: dict[int, list[int]]) -> list[RaggedRows]:
    ids = sorted(rows)
    whole = RaggedRows.from_lists([rows[r] for r in ids], ids)
    return [whole.take(lo, min(lo + 7, len(ids))) for lo in range(0, len(ids), 7)]


def _read_normal(source, shard: int, owner: bool) -> list[tuple[int, list[int]]]:
    """(row id, ids) of every row slot of every call of `source.streams()` (each stream consumed
    in its own thread, as the per-device streams must be)."""

    def consume(j: int, stream) -> list[tuple[int, list[int]]]:
        found = []
        for arrays, rows in stream:
            ids, seg, row_ids, _ = (np.asarray(a) for a in arrays)
            assert rows == int((row_ids >= 0).sum())
            for d in range(ids.shape[0]):
                device = j if source.per_device else d
                for s in range(ids.shape[1]):
                    per_slot = collections.defaultdict(list)
                    for b in range(ids.shape[2]):
                        if seg[d, s, b] < row_ids.shape[2]:
                            per_slot[int(seg[d, s, b])] += [int(i) for i in ids[d, s, b] if i >= 0]
                    for slot, r in enumerate(row_ids[d, s].tolist()):
                        if r >= 0:
                            found.append((r + device * shard if owner else r, per_slot[slot]))
        return found

    streams = source.streams()
    with ThreadPoolExecutor(len(streams)) as pool:
        parts = list(pool.map(consume, range(len(streams)), streams))
    return [row for part in parts for row in part]


def _read_long(source, device_calls: bool) -> dict[int, list[int]]:
    """Every long row's ids from `source.long_calls()` (host batches or device calls)."""
    found: dict[int, list[int]] = collections.defaultdict(list)
    for item in source.long_calls():
        if device_calls:
            ids, slot, row_ids, _ = (np.asarray(a) for a in item)
            for d in range(ids.shape[0]):
                for k in range(ids.shape[1]):
                    if slot[d, k] < row_ids.shape[1]:
                        owner = int(row_ids[d, slot[d, k]])
                        found[owner] += [int(i) for i in ids[d, k].ravel() if i >= 0]
        else:
            assert isinstance(item, batching.LongBatch)
            for k, owner in enumerate(item.owner.tolist()):
                if owner != batching.PAD_ID:
                    found[owner] += [int(i) for i in item.ids[k].ravel() if i >= 0]
    return found


@pytest.mark.parametrize("mode", list(MODES))
def test_every_source_holds_every_row_once(mode):
    kind, devices, cores, knobs = MODES[mode]
    config = TrainConfig(data="mem", model_dir="unused", dim=4, progress=False, **SHAPE, **knobs)
    mesh = make_mesh(jax.devices()[:devices])
    machine = execution.Machine("cpu", 1, devices, devices, cores)
    plan = execution.plan_execution(config, machine, NUM_ROWS, NUM_COLS)
    assert plan.batches == kind and plan.per_device == ("thread" in mode or kind == "owner_stream")
    rows = _rows()
    chunks = _chunks(rows)
    spec = plan.step_spec(config, NUM_COLS, observed_loss=True)
    runner = plan_side(config, plan, mesh, spec, lambda: iter(chunks), NUM_ROWS)
    source = runner.source
    assert isinstance(source, batch_sources.BatchSource)
    if mode == "device, resident":
        assert isinstance(source, batch_sources.DeviceResident) and runner.one_call
    if mode == "device, streamed":
        assert isinstance(source, batch_sources.DeviceStream) and not runner.one_call
    normal = _read_normal(source, runner.shard, plan.layout == "owner")
    long = _read_long(source, plan.long_rows == "device")
    seen = collections.Counter(r for r, _ in normal)
    assert max(seen.values()) == 1
    # every row in exactly one place, with its ids (a row's pieces keep its ids' order)
    assert not set(seen) & set(long) and set(seen) | set(long) == set(rows)
    got = {**dict(normal), **long}
    assert {r: sorted(ids) for r, ids in got.items()} == rows
    assert set(long) == {r for r, ids in rows.items() if len(ids) > 32}
    # the steps a half-epoch reports: the plan's (with a thread per device its devices' own)
    if not source.per_device:
        assert source.total_steps == runner.plan.steps
    # a second half-epoch reads the same rows again
    assert sorted(_read_normal(source, runner.shard, plan.layout == "owner")) == sorted(normal)


def test_the_planning_pass_keeps_int32_ids_in_shared_slabs(monkeypatch):
    """`scan` keeps every chunk's rows with its ids as int32 (views of a few slabs, not an
    allocation per chunk); ids past int32 stay as they are."""
    monkeypatch.setattr(batch_sources.Slabs, "SLAB_IDS", 100)
    rng = np.random.default_rng(4)
    rows = [rng.integers(0, NUM_COLS, rng.integers(0, 30)).tolist() for _ in range(40)]
    chunks = [
        RaggedRows.from_lists(rows[i : i + 3], np.arange(i, i + 3)[: len(rows[i : i + 3])])
        for i in range(0, 40, 3)
    ]
    read = batch_sources.scan(iter(chunks), keep_chunks=True, long_above=None)
    assert [r.tolist() for c in read.chunks for r in c.lists()] == rows
    assert [int(r) for c in read.chunks for r in c.row_ids] == list(range(40))
    assert all(c.ids.dtype == np.int32 for c in read.chunks)
    bases = {id(c.ids.base) for c in read.chunks if len(c.ids)}
    assert 1 < len(bases) < len(read.chunks)
    huge = RaggedRows.from_lists([[2**31, 1]])
    kept = batch_sources.scan(iter([huge]), keep_chunks=True, long_above=None).chunks[0]
    assert kept.ids.dtype == np.int64 and kept.ids.tolist() == [2**31, 1]
