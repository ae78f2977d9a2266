"""`load_model` reads a model directory without orbax's notices about its read-only manager."""

from __future__ import annotations

import logging

from alx_trainer.config import TrainConfig
from alx_trainer.model import load_model
from alx_trainer.train import train

import reference_ials as ref


def test_load_model_logs_no_warnings(tmp_path, caplog):
    rows = ref.random_rows(1, 12, 9, max_len=4)
    data_dir = ref.write_dataset(str(tmp_path / "data"), rows, 12, 9)
    model_dir = str(tmp_path / "model")
    config = TrainConfig(data=data_dir, model_dir=model_dir, dim=3, epochs=1, eval_every=0)
    train(config, tables=False)
    caplog.clear()
    with caplog.at_level(logging.WARNING), caplog.at_level(logging.WARNING, logger="absl"):
        for _ in range(2):
            assert load_model(model_dir).epoch == 1
    assert [r.getMessage() for r in caplog.records] == []
