"""Dense batching: every id of every row lands exactly once, in fixed shapes, any row length."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from alx_trainer.data import batching
from webgraph_contract.ragged import RaggedRows


def _rows(seed: int, n: int, max_len: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 1000, size=int(rng.integers(0, max_len + 1))) for _ in range(n)]


def _split(rows, row_ids, parts: int):
    """The same rows as several CSR chunks (as a stream delivers them)."""
    bounds = np.linspace(0, len(rows), parts + 1).astype(int)
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        yield RaggedRows.from_lists(rows[lo:hi], row_ids[lo:hi])


def _unpack(batches, long_batches, piece_len):
    """Rebuild row -> ids from packed batches, independently of the packing code."""
    got: dict[int, list[int]] = {}
    for b in batches:
        for k in range(len(b)):
            for p in range(b.ids.shape[1]):
                slot = b.seg[k, p]
                if slot == b.row_ids.shape[1]:
                    assert (b.ids[k, p] == batching.PAD_ID).all()
                    continue
                row = int(b.row_ids[k, slot])
                got.setdefault(row, []).extend(int(i) for i in b.ids[k, p] if i != batching.PAD_ID)
            for slot in range(b.row_ids.shape[1]):
                if b.row_ids[k, slot] != batching.PAD_ID:
                    got.setdefault(int(b.row_ids[k, slot]), [])
    for b in long_batches:
        for k in range(len(b)):
            got.setdefault(int(b.owner[k]), []).extend(
                int(i) for i in b.ids[k].reshape(-1) if i != batching.PAD_ID
            )
    return got


@pytest.mark.parametrize(
    "piece_len,batch_pieces,batch_rows,parts",
    [(4, 8, 8, 1), (4, 8, 3, 5), (8, 16, 16, 3), (2, 3, 2, 7)],
)
def test_packing_keeps_every_id_once(piece_len, batch_pieces, batch_rows, parts):
    # some rows longer than a whole batch
    rows = _rows(0, 300, max_len=3 * piece_len * batch_pieces)
    row_ids = np.arange(300) * 7 + 3
    normal = list(
        batching.pack_normal(_split(rows, row_ids, parts), piece_len, batch_pieces, batch_rows)
    )
    long = list(batching.pack_long(_split(rows, row_ids, parts), piece_len, batch_pieces))
    for b in normal:
        assert b.ids.shape[1:] == (batch_pieces, piece_len) and b.ids.dtype == np.int32
        assert b.seg.shape[1:] == (batch_pieces,) and b.row_ids.shape[1:] == (batch_rows,)
    for b in long:
        assert b.ids.shape[1:] == (batch_pieces, piece_len)
    got = _unpack(normal, long, piece_len)
    assert sorted(got) == sorted(row_ids.tolist())
    for rid, ids in zip(row_ids, rows):
        assert got[int(rid)] == ids.tolist()  # order within a row is kept, nothing lost or doubled
    long_rows = {int(r) for r, ids in zip(row_ids, rows) if len(ids) > piece_len * batch_pieces}
    assert long_rows and {int(o) for b in long for o in b.owner} == long_rows
    for b in normal:  # row_len is the true length of each row
        for k in range(len(b)):
            for slot, rid in enumerate(b.row_ids[k]):
                if rid != batching.PAD_ID:
                    assert b.row_len[k, slot] == len(rows[(rid - 3) // 7])


def test_streamed_chunks_pack_like_one_chunk_and_plan_counts_match():
    rows = _rows(1, 200, max_len=40)
    ids = np.arange(200)
    one = list(batching.pack_normal(_split(rows, ids, 1), 4, 8, 5))
    many = list(batching.pack_normal(_split(rows, ids, 9), 4, 8, 5))
    cat = lambda bs, f: np.concatenate([getattr(b, f) for b in bs])  # noqa: E731
    for f in ("ids", "seg", "row_ids", "row_len"):
        np.testing.assert_array_equal(cat(one, f), cat(many, f))
    pieces = batching.num_pieces(np.array([len(r) for r in rows]), 4)
    starts, _ = batching.batch_starts(pieces[pieces <= 8], 8, 5, final=True)
    assert len(starts) == len(cat(one, "ids"))


def test_group_steps_pads_to_the_planned_count():
    rows = _rows(2, 30, max_len=10)
    batches = list(batching.pack_normal([RaggedRows.from_lists(rows, np.arange(30))], 4, 4, 4))
    total = sum(len(b) for b in batches)
    steps = list(
        batching.group_steps(
            iter(batches), 4, -(-total // 4) + 2, lambda k: batching.empty_batch(k, 4, 4, 4)
        )
    )
    assert len(steps) == -(-total // 4) + 2
    assert all(s.ids.shape == (4, 4, 4) for s in steps)
    assert (steps[-1].row_ids == batching.PAD_ID).all() and (steps[-1].seg == 4).all()
    with pytest.raises(RuntimeError, match="plan allows"):
        list(batching.group_steps(iter(batches), 4, 1, lambda k: batching.empty_batch(k, 4, 4, 4)))


def test_pack_normal_into_fills_in_place_like_pack_normal():
    rows, row_ids = _rows(5, 60, 20), np.arange(60)
    want = batching.merge(list(batching.pack_normal(_split(rows, row_ids, 3), 4, 4, 3)))
    out = batching.empty_batch(len(want) + 2, 4, 4, 3)
    assert batching.pack_normal_into(_split(rows, row_ids, 3), out, 4) == len(want)
    for f in ("ids", "seg", "row_ids", "row_len"):
        assert np.array_equal(getattr(out, f)[: len(want)], getattr(want, f))
    assert (out.row_ids[len(want) :] == batching.PAD_ID).all()
    with pytest.raises(RuntimeError, match="batches planned"):
        batching.pack_normal_into(_split(rows, row_ids, 3), batching.empty_batch(2, 4, 4, 3), 4)


def test_empty_row_gets_a_slot():
    chunk = RaggedRows(np.array([5, 6]), np.array([0, 0, 2]), np.array([1, 2]))
    (b,) = batching.pack_normal([chunk], 4, 4, 4)
    assert b.row_ids[0, :2].tolist() == [5, 6] and b.row_len[0, :2].tolist() == [0, 2]


def test_owner_steps_and_stack_calls():
    """Slot j of every step holds device j's batches in order (empties once it runs out); K steps
    stack per call."""
    a, b = batching.empty_batch(3, 2, 2, 2), batching.empty_batch(1, 2, 2, 2)
    a.row_ids[:, 0] = [10, 11, 12]
    b.row_ids[:, 0] = [20]
    steps = list(batching.owner_steps([a, b], batching.empty_batch(1, 2, 2, 2)))
    assert [s.row_ids[:, 0].tolist() for s in steps] == [[10, 20], [11, -1], [12, -1]]
    steps = list(
        batching.group_steps(iter(steps), 2, 4, lambda k: batching.empty_batch(k, 2, 2, 2))
    )
    (first, second) = batching.stack_calls(steps, 2)
    assert first.ids.shape == (2, 2, 2, 2) and first.row_ids.shape == (2, 2, 2)
    assert first.row_ids[:, :, 0].tolist() == [[10, 11], [20, -1]]
    assert second.row_ids[:, :, 0].tolist() == [[12, -1], [-1, -1]]
    with pytest.raises(ValueError, match="multiple of 3"):
        list(batching.stack_calls(steps, 3))


@pytest.mark.parametrize(
    "per_step,per_call,spare,parts,threads",
    [(1, 1, 0, 1, 1), (1, 4, 2, 5, 3), (2, 3, 1, 7, 2), (3, 2, 4, 4, 0), (1, 1000, 0, 3, 2)],
)
def test_calls_packed_in_place_equal_the_grouped_and_stacked_ones(
    per_step, per_call, spare, parts, threads
):
    """`pack_calls` (batches filled in threads straight into their call's arrays) gives the calls
    of `pack_normal`, `group_steps` and `stack_calls`, padding and all: calls split a chunk's
    batches, steps span chunks, the last call is part padding, `spare` calls are all padding."""
    rows = _rows(3, 400, max_len=40)
    row_ids = np.arange(400) * 3 + 1
    shape = (4, 6, 5)  # piece_len, batch_pieces, batch_rows: rows over 24 ids are long, left out
    batches = sum(len(b) for b in batching.pack_normal(_split(rows, row_ids, 1), *shape))
    steps = (-(-batches // (per_step * per_call)) + spare) * per_call
    empty = lambda k: batching.empty_batch(k, *shape)
    want = list(
        batching.stack_calls(
            batching.group_steps(
                batching.pack_normal(_split(rows, row_ids, parts), *shape), per_step, steps, empty
            ),
            per_call,
        )
    )
    got = list(
        batching.pack_calls(
            _split(rows, row_ids, parts), *shape, per_step, per_call, steps, threads
        )
    )
    assert len(got) == len(want) == steps // per_call
    for g, w in zip(got, want):
        for f in dataclasses.fields(w):
            assert getattr(g, f.name).shape == getattr(w, f.name).shape, f.name
            np.testing.assert_array_equal(getattr(g, f.name), getattr(w, f.name), err_msg=f.name)
    with pytest.raises(RuntimeError, match="more than the"):
        list(batching.pack_calls(_split(rows, row_ids, parts), *shape, per_step, 1, 1, threads))
    with pytest.raises(ValueError, match="multiple of 3"):
        list(batching.pack_calls(_split(rows, row_ids, parts), *shape, 1, 3, 4, threads))


@pytest.mark.parametrize(
    "length,expected", [(16, 16), (32, 16), (5, 8), (8, 8), (9, 16), (30, 16), (20, 8)]
)
def test_automatic_piece_length_from_padding(length, expected):
    # Rows of one length n: L=16 takes 16*ceil(n/16) slots, L=8 takes 8*ceil(n/8). Worked out by
    # hand: n=16, 32, 30 (32 slots: 1.07) stay at 16; n=5 (3.2x at 16, 1.6x at 8) and n=8 (2x, 1x)
    # and n=20 (1.6x, 1.2x) go to 8; n=9 pads 16/9 at both, and 16 comes first.
    lengths = np.full(50, length)
    counts = {
        L: batching.padded_slots(lengths, *batching.batch_shape(L, 0)) for L in batching.PIECE_LENS
    }
    assert counts[16] == (50 * 16 * -(-length // 16), 50 * length)
    assert batching.choose_piece_len(counts) == expected


def test_automatic_batch_keeps_4096_ids_and_leaves_out_longer_rows():
    assert batching.batch_shape(8, 0) == (8, 512) and batching.batch_shape(16, 0) == (16, 256)
    assert batching.batch_shape(8, 100) == (8, 100)
    # a row of 4097 ids fits no 4096-id batch: it is a long row, left out of the slot counts
    assert batching.padded_slots(np.array([4097, 3]), 8, 512) == (8, 3)


def _slot_j_calls(chunks, side_plan, shard: int, devices: int) -> list[list[batching.DeviceBatch]]:
    """Device j's calls as the global construction makes them: slot j of each call of the steps
    whose slot j holds device j's batches, less its padding-only calls (a reference apart from
    `batch_sources.owner_device_calls`)."""
    shape, packed = side_plan.shape, []
    for j in range(devices):
        mine = [c.select(c.row_ids // shard == j) for c in chunks]
        mine = [dataclasses.replace(c, row_ids=c.row_ids - j * shard) for c in mine]
        packed.append(batching.merge(list(batching.pack_normal(mine, *shape))))
    steps = batching.owner_steps(packed, batching.empty_batch(1, *shape))
    steps = batching.group_steps(
        steps, devices, side_plan.steps, lambda n: batching.empty_batch(n, *shape)
    )
    calls = list(batching.stack_calls(steps, side_plan.per_call))
    return [
        [
            batching.DeviceBatch(
                c.ids[j : j + 1], c.seg[j : j + 1], c.row_ids[j : j + 1], c.row_len[j : j + 1]
            )
            for c in calls
            if (c.row_ids[j] >= 0).any()
        ]
        for j in range(devices)
    ]


def test_per_device_owner_calls_hold_the_global_calls_slots():
    """'owner' with `per_device`: each device's calls, packed in place and put at once, hold
    exactly what slot j of the global calls holds (ids, segments, row ids, lengths, rows)."""
    import jax

    from alx_trainer.config import TrainConfig
    from alx_trainer.data import batching
    from alx_trainer.execution import make_mesh
    from alx_trainer.ops import batch_sources

    n, devices = 300, 3
    rows = _rows(7, n, 40)  # rows over 32 ids are long: left to `pack_long`
    order = np.random.default_rng(8).permutation(n)
    # shuffled ids (chunks mixing every shard), then chunks wholly of the first shard
    chunks = list(_split(rows[:200], order[:200], 5)) + list(
        _split(rows[200:], np.sort(order[200:]), 2)
    )
    shard = -(-n // devices)
    row_ids = np.concatenate([c.row_ids for c in chunks])
    lengths = np.concatenate([c.lengths for c in chunks])
    config = TrainConfig(data="unused", piece_len=4, batch_pieces=8, steps_per_call=3)
    side_plan = batching.make_plan(
        config, True, lengths, row_ids, devices, shard, batching.one_host
    )
    mesh = make_mesh(jax.devices()[:devices])
    # `pack` empties the list it is given (its chunks go as they are packed)
    given = list(chunks)
    got = batch_sources.OwnerResident.pack(mesh, side_plan, given, shard, per_device=True).calls
    assert given == []
    want = _slot_j_calls(chunks, side_plan, shard, devices)
    assert len({len(w) for w in want}) > 1  # the devices run different numbers of calls
    for j, device in enumerate(mesh.local_devices):
        assert len(got[j]) == len(want[j])
        for (arrays, solved), call in zip(got[j], want[j]):
            assert all(a.devices() == {device} for a in arrays)
            for a, b in zip(arrays, (call.ids, call.seg, call.row_ids, call.row_len)):
                assert a.dtype == b.dtype and np.array_equal(np.asarray(a), b)
            assert solved == int((call.row_ids >= 0).sum())
