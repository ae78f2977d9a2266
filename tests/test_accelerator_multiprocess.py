"""The accelerator path (`--accelerator on`, forced on CPU devices) in 2 processes x 4 devices
(jax.distributed on 127.0.0.1, gloo) gives the tables of 1 process x 8, and both the float64
reference's (`reference_ials`)."""

from __future__ import annotations

import numpy as np
import pytest
from two_processes import (
    N_COLS,
    N_ROWS,
    assert_same_tables,
    flag_args,
    long_row_dataset,
    train_in_two_processes,
)

from alx_trainer.config import TrainConfig
from alx_trainer.execution import make_mesh
from alx_trainer.model import init_tables, load_model
from alx_trainer.train import train

import reference_ials as ref

FLAGS = {
    "dim": 6,
    "epochs": 2,
    "solver": "cholesky",
    "init_stddev": 0.3,
    "piece_len": 4,
    "batch_pieces": 8,
    "batch_rows": 4,
    "eval_every": 0,
    "alpha": 0.5,
    "reg": 0.8,
    "accelerator": "on",
    "calls_per_half_epoch": 2,
}


@pytest.mark.parametrize("resident", ["on", "off"])
def test_two_processes_equal_one_process_on_the_accelerator_path(tmp_path, resident):
    rows, data_dir = long_row_dataset(tmp_path)
    multi_dir = str(tmp_path / "multi")
    flags = {**FLAGS, "resident_batches": resident}
    train_in_two_processes(data_dir, multi_dir, flag_args(flags), timeout=300)
    config = TrainConfig(data=data_dir, model_dir=str(tmp_path / "single"), progress=False, **flags)
    mesh = make_mesh()
    assert_same_tables(multi_dir, train(config, mesh=mesh), epochs=2)
    start = init_tables(config, N_ROWS, N_COLS, mesh)
    w0, h0 = (np.asarray(start[k], np.float64)[:n] for k, n in (("row", N_ROWS), ("col", N_COLS)))
    w, h = ref.ials(rows, w0, h0, config.epochs, config.alpha, config.reg)
    multi = load_model(multi_dir)
    for got, want in ((multi.row_table, w), (multi.col_table, h)):
        assert np.linalg.norm(got - want) < 1e-4 * np.linalg.norm(want)
