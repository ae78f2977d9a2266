"""The execution plan (`alx_trainer.execution`): its rules per machine, made once per command,
the same for two commands on one model and backend, and saved with the model."""

from __future__ import annotations

import dataclasses
import json

import pytest
from alx_cli import run_cli

from alx_trainer import execution
from alx_trainer.config import ExecutionConfig, TrainConfig
from alx_trainer.execution import ExecutionPlan, Machine
from alx_trainer.model import load_model

import reference_ials as ref

CPU = Machine("cpu", 1, 8, 8, 8)


def _plan(machine: Machine = CPU, **knobs) -> ExecutionPlan:
    config = TrainConfig(data="d", model_dir="m", dim=16, **knobs)
    return execution.plan_execution(config, machine, 100, 80)


def test_rules_by_machine():
    owner = _plan()
    assert (owner.layout, owner.batches, owner.per_device, owner.long_rows) == (
        "owner",
        "owner_resident",
        True,
        "matvec_cg",
    )
    assert (owner.table_dtype, owner.precision, owner.eval_devices) == (
        "float32",
        "float32",
        "first_local",
    )
    # more devices than cores: no thread each; two processes: sharded, not 'owner'
    assert not _plan(Machine("cpu", 1, 8, 8, 2)).per_device
    two = _plan(Machine("cpu", 2, 16, 8, 8))
    assert (two.layout, two.batches, two.long_rows) == ("sharded", "file_stream", "explicit")
    gpu = _plan(Machine("gpu", 1, 1, 1, 16))
    assert gpu.accelerator and gpu.batches == "device" and gpu.long_rows == "device"
    # 'sharded' on one device runs as a lookup
    assert (gpu.layout, gpu.table_dtype, gpu.precision) == ("replicated", "bfloat16", "tf32")
    assert gpu.eval_devices == "all_local" and gpu.topk_block == (1024, 1 << 16)
    assert gpu.batch_ids > _plan(Machine("gpu", 1, 1, 1, 16), cg_form="explicit").batch_ids
    assert _plan(stats="local", layout="sharded").cg_form == "explicit"
    with pytest.raises(ValueError, match="'owner' runs in one process"):
        _plan(Machine("cpu", 2, 16, 8, 8), layout="owner")
    with pytest.raises(ValueError, match="accelerator path takes"):
        _plan(Machine("gpu", 1, 1, 1, 16), layout="owner")


def test_a_small_problem_on_cpu_runs_one_program_an_epoch(monkeypatch):
    """At most SMALL_PROBLEM_LINKS links, with the path, layout and CPU split left to the plan: one
    CPU device and the accelerator path; otherwise (more links, links not counted, settings given,
    several devices) the per-core path as before."""
    small = execution.SMALL_PROBLEM_LINKS
    one = Machine("cpu", 1, 1, 1, 2)
    config = TrainConfig(data="d", model_dir="m", dim=16)

    def plan(config=config, machine=one, links=small):
        return execution.plan_execution(config, machine, 100, 80, links)

    assert plan().accelerator and plan().batches == "device" and plan().layout == "replicated"
    assert not plan(links=small + 1).accelerator and plan(links=small + 1).layout == "owner"
    assert not plan(links=0).accelerator
    assert not plan(machine=Machine("cpu", 1, 2, 2, 2)).accelerator
    for knob in ({"layout": "owner"}, {"accelerator": "off"}, {"cpu_devices": 1}):
        assert not plan(dataclasses.replace(config, **knob)).accelerator, knob
    # the CPU split before JAX starts agrees: one device for a small problem, one per core else
    monkeypatch.setattr(execution, "_cpu_split_settled", lambda: False)
    monkeypatch.setattr(execution, "cores", lambda: [0, 1])
    assert execution.cpu_device_count(config, small) == 1
    assert execution.cpu_device_count(config, small + 1) == execution.cpu_device_count(config) == 2


def test_links_come_from_stats_json(tmp_path):
    data = ref.write_dataset(str(tmp_path / "data"), ref.random_rows(1, 12, 9, max_len=4), 12, 9)
    stats = json.loads((tmp_path / "data" / "stats.json").read_text())
    assert execution.stats_links(data) == execution.dataset_links(stats) == stats["edges"] > 0
    assert execution.stats_links(str(tmp_path / "none")) == 0
    assert execution.stats_links("web_graph/de-dense") == 0


def test_fold_in_plan_runs_on_the_evaluation_devices():
    config = TrainConfig(data="d", model_dir="m", dim=16, cache_batches=True, layout="sharded")
    plan = execution.plan_execution(config, CPU, 100, 80)
    folding = plan.for_fold_in(config)
    assert (folding.devices, folding.local_devices, folding.num_rows) == (1, 1, 100)
    assert folding.batches == "file_stream" and folding.layout == "replicated"


def test_saved_plan_round_trips(tmp_path):
    plan = _plan(Machine("gpu", 2, 16, 8, 16))
    assert ExecutionPlan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan
    execution.save_plan(str(tmp_path), plan)
    assert execution.load_plan(str(tmp_path)) == plan
    assert execution.load_plan(str(tmp_path / "none")) is None


def test_one_plan_per_command_the_same_for_two_commands(tmp_path, monkeypatch):
    rows = ref.random_rows(4, 30, 25, max_len=6)
    # test rows: each epoch's evaluation folds them in, by the plan's fold-in derivation
    test = {r: ([1, 2, 3], [4, 5]) for r in range(20, 25)}
    data = ref.write_dataset(str(tmp_path / "data"), rows, 30, 25, test=test)
    # every plan made, with what it was made from: (config, machine, plan)
    made = []
    original = execution.plan_execution

    def counted(config, machine, num_rows, num_cols, num_links=0):
        plan = original(config, machine, num_rows, num_cols, num_links)
        made.append((config, machine, plan))
        return plan

    monkeypatch.setattr(execution, "plan_execution", counted)
    model_dir = str(tmp_path / "m")
    flags = ["--data", data, "--model_dir", model_dir, "--dim", "4", "--no-progress"]
    code, out, err = run_cli(["train", *flags, "--epochs", "1"])
    assert code == 0 and "recall@20" in out, err
    # the training plan, then its fold-in derivation (made once for the command's evaluations)
    assert len(made) == 2, [m[2] for m in made]
    first = (tmp_path / "m" / execution.PLAN_FILE).read_text()
    (config, _, training), (fold_config, fold_machine, folding) = made
    assert training == ExecutionPlan.from_dict(json.loads(first))
    assert fold_config == dataclasses.replace(config, progress=False, cache_batches=False)
    # on CPU the evaluation runs on the first local device
    assert (fold_machine.devices, fold_machine.local_devices) == (1, 1)
    assert (folding.devices, folding.num_rows, folding.num_cols) == (1, 30, 25)
    # a second command on the model (resumed for one more epoch): the same two plans
    code, out, err = run_cli(["train", *flags, "--epochs", "2"])
    assert code == 0, err
    assert [m[2] for m in made[2:]] == [training, folding]
    assert (tmp_path / "m" / execution.PLAN_FILE).read_text() == first
    model = load_model(model_dir)
    assert (
        model.plan == execution.load_plan(model_dir) == ExecutionPlan.from_dict(json.loads(first))
    )
    assert model.plan.num_rows == 30 and model.plan.num_cols == 25


def test_a_removed_kernel_is_a_one_line_usage_error(tmp_path):
    code, out, err = run_cli(
        ["train", "--data", str(tmp_path), "--model_dir", str(tmp_path / "m"), "--cg_kernel=pallas"]
    )
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "cg_kernel: 'pallas' was removed" in err


def test_execution_knobs_are_the_advanced_section():
    names = {f.name for f in dataclasses.fields(ExecutionConfig)}
    assert {"layout", "accelerator", "resident_batches", "cpu_devices", "cg_form"} <= names
    assert not names & {"dim", "alpha", "reg", "solver", "epochs", "data", "model_dir"}
