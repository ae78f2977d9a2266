"""The epoch loop's callbacks and the configuration sections (`alx_trainer.callbacks`, `config`)."""

from __future__ import annotations

import dataclasses
import json
import logging

import jax
import numpy as np
import pytest

from alx_trainer.callbacks import Callback, LambdaCallback, ProgressBar
from alx_trainer.cli.common import parse_dataclass_args
from alx_trainer.config import SECTIONS, TrainConfig
from alx_trainer.execution import make_mesh
from alx_trainer.model import load_model
from alx_trainer.train import train

import reference_ials as ref


class Recorder(Callback):
    """Every hook call in order; the steps and rows reported per half-epoch."""

    def __init__(self):
        self.calls: list[tuple] = []
        self.steps: dict[tuple[int, str], list[int]] = {}

    def on_train_begin(self, run):
        self.calls.append(("begin", run.start_epoch))

    def on_half_epoch_begin(self, run, epoch, side, total_steps):
        self.calls.append(("half", epoch, side))
        self.steps[(epoch, side)] = [total_steps, 0, 0]

    def on_steps(self, steps, rows):
        current = self.steps[next(reversed(self.steps))]
        current[1] += steps
        current[2] += rows

    def on_half_epoch_end(self, run, epoch, side):
        self.calls.append(("half_end", epoch, side))

    def on_epoch_end(self, run, epoch, record):
        self.calls.append(("epoch", epoch, sorted(record)))

    def on_train_end(self, run):
        self.calls.append(("end",))


def test_hooks_run_in_order_and_report_every_step(tmp_path, monkeypatch, caplog):
    rows = ref.random_rows(3, 40, 30, max_len=9, long_rows=(5,))
    data_dir = ref.write_dataset(str(tmp_path / "data"), rows, 40, 30)
    config = TrainConfig(
        data=data_dir,
        model_dir=str(tmp_path / "m"),
        dim=8,
        epochs=2,
        piece_len=2,
        batch_pieces=4,
        steps_per_call=2,
        progress=True,
        eval_every=0,
    )
    recorder, seen = Recorder(), []
    # a CLI test may have set it off
    monkeypatch.setattr(logging.getLogger("alx_trainer"), "propagate", True)
    with caplog.at_level(logging.INFO, logger="alx_trainer"):
        model = train(
            config,
            callbacks=[
                recorder,
                LambdaCallback(lambda epoch, m: seen.append((epoch, len(m.metrics)))),
            ],
            mesh=make_mesh(jax.devices()[:2]),
        )
    kinds = [c[0] for c in recorder.calls]
    assert kinds == ["begin"] + ["half", "half_end", "half", "half_end", "epoch"] * 2 + ["end"]
    assert [c[1:] for c in recorder.calls if c[0] == "half"] == [
        (1, "row"),
        (1, "col"),
        (2, "row"),
        (2, "col"),
    ]
    lengths = {
        "row": np.array([len(c) for c in rows.values()]),
        "col": np.bincount(np.concatenate(list(rows.values()))),
    }
    for (epoch, side), (total, steps, solved) in recorder.steps.items():
        assert steps == total > 0
        # rows longer than one batch (row 5: 8 pieces of 2 > 4) are solved apart, not in the steps
        long = int(np.sum(-(-lengths[side] // 2) > 4))
        assert (
            solved + long
            == model.metrics[epoch - 1][f"{side}s_solved"]
            == np.count_nonzero(lengths[side])
        )
    assert ("epoch", 1, sorted(model.metrics[0])) in recorder.calls
    assert seen == [(1, 1), (2, 2)]  # the user callback's model carries the metrics up to its epoch
    # One record can reach caplog's handler twice (a CLI test elsewhere may leave the handler on
    # this logger).
    records = list({id(r): r for r in caplog.records}.values())
    lines = [r.getMessage() for r in records if r.name == "alx_trainer.callbacks"]
    assert [line.split(" ")[:2] for line in lines] == [["epoch", "1/2"], ["epoch", "2/2"]]
    m = model.metrics[0]  # one short line: what was solved, by name, and the loss
    assert (
        f"{m['rows_solved']:,} rows + {m['cols_solved']:,} cols solved, loss {m['loss']:.5g}"
        in lines[0]
    )
    assert all(len(line) <= 80 for line in lines)
    saved = [json.loads(x) for x in open(tmp_path / "m" / "metrics.jsonl")]
    assert [r["epoch"] for r in saved] == [1, 2] and saved[1]["loss"] == pytest.approx(
        model.metrics[1]["loss"]
    )


def test_progress_bar_counts_steps(capsys):
    bar = ProgressBar()
    bar.on_half_epoch_begin(None, 3, "row", 10)
    bar.on_steps(4, 100)
    bar.on_steps(6, 50)
    assert bar.bar.n == 10 and bar.rows == 150
    bar.on_half_epoch_end(None, 3, "row")
    assert "epoch 3 rows" in capsys.readouterr().err


def test_sections_cover_every_field_once():
    names = [f.name for section in SECTIONS.values() for f in dataclasses.fields(section)]
    assert sorted(names) == sorted(f.name for f in dataclasses.fields(TrainConfig)) and len(
        set(names)
    ) == len(names)
    config = TrainConfig(dim=32, solver="lu", eval_k="10")
    assert config.section("model").dim == 32 and config.section("solver").solver == "lu"
    assert config.to_dict(nested=True)["evaluation"] == {
        "eval_every": 1,
        "eval_k": "10",
        "ndcg_k": 100,
        "eval_rows": 0,
        "train_loss_every": 1,
    }


def test_nested_config_file_equals_flat(tmp_path):
    nested = tmp_path / "nested.yaml"
    nested.write_text(
        "data: {data: d, chunk_rows: 64}\nmodel: {dim: 16, tied: true}\nsolver: {solver: lu}\n"
        "run: {model_dir: m, epochs: 3}\n"
    )
    flat = tmp_path / "flat.json"
    flat.write_text(
        json.dumps(
            {
                "data": "d",
                "chunk_rows": 64,
                "dim": 16,
                "tied": True,
                "solver": "lu",
                "model_dir": "m",
                "epochs": 3,
            }
        )
    )
    a = parse_dataclass_args(TrainConfig, ["--config", str(nested)])
    b = parse_dataclass_args(TrainConfig, ["--config", str(flat)])
    assert a == b and a.solver == "lu" and a.data == "d" and a.dim == 16
    dumped = tmp_path / "dumped.json"
    dumped.write_text(json.dumps(a.to_dict(nested=True)))
    assert parse_dataclass_args(
        TrainConfig, ["--config", str(dumped), "--dim", "8"]
    ) == dataclasses.replace(a, dim=8)
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: {dimm: 3}\n")
    with pytest.raises(ValueError, match=r"unknown config key model.'dimm'"):
        parse_dataclass_args(TrainConfig, ["--config", str(bad)])


def test_log_level_is_checked():
    with pytest.raises(ValueError, match="log_level"):
        TrainConfig(data="d", model_dir="m", log_level="loud").validate()


def test_metrics_file_only_grows_and_resume_cuts_it_back(tmp_path):
    rows = ref.random_rows(4, 30, 20, max_len=6)
    data_dir = ref.write_dataset(str(tmp_path / "data"), rows, 30, 20)
    path = tmp_path / "m" / "metrics.jsonl"
    config = TrainConfig(
        data=data_dir, model_dir=str(tmp_path / "m"), dim=4, epochs=3, eval_every=0, progress=False
    )
    seen = []

    def check(epoch, model):
        lines = path.read_text().splitlines()
        seen.append([json.loads(line)["epoch"] for line in lines])
        if epoch == 1:  # the same record written otherwise: a rewrite of the file would undo it
            path.write_text(json.dumps(json.loads(lines[0]), separators=(",", ":")) + "\n")
        else:
            assert '"epoch":1,' in lines[0], "an epoch's write rewrote an earlier record"

    train(config, [LambdaCallback(check)])
    assert seen == [[1], [1, 2], [1, 2, 3]]
    # a run killed after epoch 4's record, before its checkpoint, and in an append cut short
    with path.open("a") as f:
        f.write('{"epoch": 4, "seconds": 1.0}\n{"epoch": 5, "sec')
    assert [r["epoch"] for r in load_model(config.model_dir).metrics] == [1, 2, 3]
    resumed = train(dataclasses.replace(config, epochs=4))
    assert [r["epoch"] for r in resumed.metrics] == [1, 2, 3, 4]
    assert [json.loads(line)["epoch"] for line in path.read_text().splitlines()] == [1, 2, 3, 4]
    assert "seconds" in json.loads(path.read_text().splitlines()[-1])
