"""2 processes x 4 CPU devices (jax.distributed on 127.0.0.1, gloo) give the tables of 1 process x
8."""

from __future__ import annotations

from two_processes import assert_same_tables, flag_args, long_row_dataset, train_in_two_processes

from alx_trainer.config import TrainConfig
from alx_trainer.execution import make_mesh
from alx_trainer.train import train

FLAGS = {
    "dim": 6,
    "epochs": 2,
    "solver": "cg",
    "cg_iters": 4,
    "piece_len": 4,
    "batch_pieces": 8,
    "batch_rows": 4,
    "eval_every": 0,
    "alpha": 0.5,
    "reg": 0.8,
}


def test_two_processes_equal_one_process(tmp_path):
    _, data_dir = long_row_dataset(tmp_path)
    multi_dir = str(tmp_path / "multi")
    train_in_two_processes(data_dir, multi_dir, flag_args(FLAGS), timeout=240)
    config = TrainConfig(data=data_dir, model_dir=str(tmp_path / "single"), progress=False, **FLAGS)
    assert_same_tables(multi_dir, train(config, mesh=make_mesh()), epochs=2)
