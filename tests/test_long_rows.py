"""Long rows (more than one device batch) by grouped matrix-free CG (`long_rows.plan_groups`,
`long_rows.long_cg`)
against the independent float64 NumPy iALS (tests/reference_ials.py), in every form a group takes:
one cached chunk of several rows, a resident block read a chunk at a time, and a streamed row."""

from __future__ import annotations

import collections

import jax
import numpy as np
import pytest

from alx_trainer.config import TrainConfig
from alx_trainer.execution import make_mesh
from alx_trainer.model import init_tables
from alx_trainer.ops import long_rows
from alx_trainer.train import train

import reference_ials as ref

NUM_ROWS, NUM_COLS, DIM = 240, 300, 6
ALPHA, REG = 0.5, 0.8
BATCH = 32  # piece_len 4 x batch_pieces 8 ids per device batch
BATCH_BYTES = BATCH * DIM * 4  # one batch's float32 block


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """Rows of 1-10 columns, rows 3..10 of 40-280 (2 to 9 batches); columns 0-2 in 20%, 45%
    and 95% of the rows (long on the column side, where the observed loss is computed too)."""
    rng = np.random.default_rng(7)
    rows = {}
    for r in range(NUM_ROWS):
        n = {3: 40, 4: 50, 5: 60, 6: 70, 7: 100, 8: 120, 9: 150, 10: 280}.get(
            r, int(rng.integers(1, 11))
        )
        cols = set(rng.choice(np.arange(3, NUM_COLS), size=n, replace=False).tolist())
        cols |= {c for c, p in enumerate((0.2, 0.45, 0.95)) if rng.random() < p}
        rows[r] = sorted(cols)
    path = str(tmp_path_factory.mktemp("long") / "data")
    ref.write_dataset(path, rows, NUM_ROWS, NUM_COLS, shards=2)
    return path, rows


def _run(data_dir: str, model_dir: str, devices: int, calls: list):
    config = TrainConfig(
        data=data_dir,
        model_dir=model_dir,
        dim=DIM,
        epochs=2,
        alpha=ALPHA,
        reg=REG,
        solver="cg",
        cg_iters=12,
        cg_form="matvec",
        layout="owner",
        piece_len=4,
        batch_pieces=8,
        batch_rows=4,
        progress=False,
        eval_every=0,
        init_stddev=0.3,
    )
    mesh = make_mesh(jax.devices()[:devices])
    t = init_tables(config, NUM_ROWS, NUM_COLS, mesh)
    w0, h0 = (
        np.asarray(t["row"], np.float64)[:NUM_ROWS],
        np.asarray(t["col"], np.float64)[:NUM_COLS],
    )
    return train(config, mesh=mesh), w0, h0


@pytest.mark.parametrize("devices", [2, 8])
@pytest.mark.parametrize("cache_batches,budget_batches", [(2, 4), (64, 64)])
def test_grouped_long_rows_match_float64_reference(
    dataset, tmp_path, monkeypatch, devices, cache_batches, budget_batches
):
    data_dir, rows = dataset
    monkeypatch.setattr(long_rows, "LONG_CACHE_BYTES", cache_batches * BATCH_BYTES)
    monkeypatch.setattr(long_rows, "LONG_BLOCK_BYTES", budget_batches * BATCH_BYTES)
    calls = []
    long_cg = long_rows.long_cg

    def spy(src, ids, slot, x0, lam, gram, alpha, iters, chunk, resident, loss):
        calls.append((ids.shape[0], chunk, resident, loss))
        return long_cg(src, ids, slot, x0, lam, gram, alpha, iters, chunk, resident, loss)

    monkeypatch.setattr(long_rows, "long_cg", spy)
    model, w0, h0 = _run(data_dir, str(tmp_path / "m"), devices, calls)
    w, h = ref.ials(rows, w0, h0, 2, ALPHA, REG)
    assert np.linalg.norm(model.row_table - w) / np.linalg.norm(w) < 1e-4
    assert np.linalg.norm(model.col_table - h) / np.linalg.norm(h) < 1e-4
    expected = ref.loss(rows, model.row_table, model.col_table, ALPHA, REG)
    assert model.metrics[-1]["loss_observed"] == pytest.approx(expected["observed"], rel=1e-4)
    forms = collections.Counter((size == chunk, resident) for size, chunk, resident, _ in calls)
    if budget_batches == 4:  # all three forms ran: one chunk, a resident block of chunks, streamed
        assert forms[(True, True)] and forms[(False, True)] and forms[(False, False)], forms
        assert all(size <= budget_batches for size, _, resident, _ in calls if resident)
    else:
        assert set(forms) == {(True, True)}, forms  # everything fits one chunk
    assert {loss for *_, loss in calls} == {True, False}  # the loss pass on the column side only


def test_plan_places_every_row_once_within_its_bounds():
    rng = np.random.default_rng(3)
    batches = np.concatenate([rng.integers(2, 5, 300), rng.integers(5, 40, 40), [64, 65, 200, 245]])
    chunk, plan = long_rows.plan_groups(batches, cache=4, budget=32, workers=2)
    assert chunk == 4
    groups = [g for w in plan for g in w]
    placed = sorted(r for g in groups for r in g.rows)
    assert placed == list(range(len(batches)))
    for g in groups:
        used = int(batches[g.rows].sum())
        assert used <= g.size and g.size % chunk == 0 and g.size & (g.size - 1) == 0, g
        if g.resident:
            assert g.size <= 32
        else:
            assert g.rows == [g.rows[0]] and batches[g.rows[0]] > 32, g
    assert {r for g in groups if not g.resident for r in g.rows} == set(
        np.flatnonzero(batches > 32).tolist()
    )
    held = sum(g.size for g in groups if g.resident)  # streamed groups skip their padding chunks
    # best fit fills the padding of the longer rows' groups
    assert held < 1.1 * batches[batches <= 32].sum()
    loads = [sum(g.size for g in w) for w in plan]
    assert max(loads) - min(loads) <= max(g.size for g in groups)
