"""2 processes x 4 CPU devices with evaluation on: both processes evaluate (each on one of its own
devices, no collective across processes) and the recall they log is a one-process run's."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from two_processes import N_COLS, N_ROWS, flag_args, train_in_two_processes

from alx_trainer.config import TrainConfig
from alx_trainer.execution import make_mesh
from alx_trainer.train import train

import reference_ials as ref

FLAGS = {
    "dim": 6,
    "epochs": 2,
    "solver": "cg",
    "cg_iters": 4,
    "eval_every": 1,
    "alpha": 0.5,
    "reg": 0.8,
}


def _dataset_with_test(tmp_path) -> str:
    """3 training shards and a test split: each row's training columns as its known columns and
    two other columns as held out."""
    rows = ref.random_rows(7, N_ROWS, N_COLS, max_len=12)
    rng = np.random.default_rng(3)
    test = {}
    for r, cols in rows.items():
        others = np.setdiff1d(np.arange(N_COLS), cols)
        test[r] = (cols, sorted(rng.choice(others, size=2, replace=False).tolist()))
    return ref.write_dataset(str(tmp_path / "data"), rows, N_ROWS, N_COLS, shards=3, test=test)


def test_two_processes_evaluate_as_one_process(tmp_path):
    data_dir = _dataset_with_test(tmp_path)
    multi_dir = str(tmp_path / "multi")
    outputs = train_in_two_processes(data_dir, multi_dir, flag_args(FLAGS), timeout=240)
    assert "recall@20" in outputs[0], outputs[0][-3000:]
    with open(os.path.join(multi_dir, "metrics.jsonl"), encoding="utf-8") as f:
        multi = [json.loads(line) for line in f]
    config = TrainConfig(data=data_dir, model_dir=str(tmp_path / "single"), progress=False, **FLAGS)
    single = train(config, mesh=make_mesh(), tables=False).metrics
    assert [r["epoch"] for r in multi] == [1, 2]
    for m, s in zip(multi, single):
        recalls = sorted(k for k in s if k.startswith(("recall@", "ndcg@")))
        assert recalls and recalls == sorted(k for k in m if k.startswith(("recall@", "ndcg@")))
        for k in recalls:
            assert m[k] == pytest.approx(s[k], abs=1e-6), (k, m, s)
