"""The epoch loop computes each table's gramian once per value (`alx_trainer.train`)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from alx_trainer.callbacks import Callback, LambdaCallback
from alx_trainer.config import TrainConfig
from alx_trainer.execution import make_mesh
from alx_trainer.ops.side_runner import SideRunner
from alx_trainer.train import TrainingCollapse, train

import reference_ials as ref


@pytest.mark.parametrize("tied", [False, True])
def test_an_epoch_computes_two_gramians_and_the_loss_reads_the_final_tables(
    tmp_path, monkeypatch, tied
):
    rows = ref.random_rows(4, 36, 36, max_len=9, long_rows=(5,))
    data_dir = ref.write_dataset(str(tmp_path / "data"), rows, 36, 36)
    config = TrainConfig(
        data=data_dir,
        model_dir=str(tmp_path / "m"),
        dim=8,
        epochs=3,
        piece_len=2,
        batch_pieces=4,
        steps_per_call=2,
        progress=False,
        eval_every=0,
        tied=tied,
        alpha=0.7,
    )
    computed = []
    original = SideRunner.gramian
    monkeypatch.setattr(
        SideRunner, "gramian", lambda self, table: computed.append(1) or original(self, table)
    )
    after_epoch = []
    model = train(
        config,
        [LambdaCallback(lambda epoch, m: after_epoch.append(len(computed)))],
        mesh=make_mesh(jax.devices()[:2]),
    )
    # the first epoch also needs the initial fixed table's; then only the two solved tables' (four
    # before)
    assert after_epoch == [3, 5, 7]
    # the loss read the gramians of the final tables, not stale ones (float64 reference)
    w, h = model.row_table.astype(np.float64), model.col_table.astype(np.float64)
    expected = config.alpha * np.sum((w.T @ w) * (h.T @ h))
    assert model.metrics[-1]["loss_unobserved"] == pytest.approx(expected, rel=1e-5)


class _Poison(Callback):
    """Makes the fixed table of one half-epoch non-finite just before it runs."""

    def __init__(self, epoch: int, side: str, value: float) -> None:
        self.epoch, self.side, self.value = epoch, side, value

    def on_half_epoch_begin(self, run, epoch, side, total_steps) -> None:
        if (epoch, side) == (self.epoch, self.side):
            fixed = "col" if side == "row" else "row"
            table = run.tables[fixed]
            run.tables[fixed] = jax.device_put(
                np.full(table.shape, self.value, table.dtype), table.sharding
            )


@pytest.mark.parametrize("epoch,side,value", [(1, "row", np.nan), (2, "col", np.inf)])
def test_a_non_finite_table_stops_training_naming_epoch_and_side(tmp_path, epoch, side, value):
    rows = ref.random_rows(5, 20, 20, max_len=6)
    data_dir = ref.write_dataset(str(tmp_path / "data"), rows, 20, 20)
    config = TrainConfig(
        data=data_dir, model_dir=str(tmp_path / "m"), dim=4, epochs=3, progress=False, eval_every=0
    )
    with pytest.raises(
        TrainingCollapse,
        match=f"epoch {epoch}, {side} half-epoch: the {side} table has NaN/Inf",
    ):
        train(config, mesh=make_mesh(jax.devices()[:2]), callbacks=[_Poison(epoch, side, value)])
