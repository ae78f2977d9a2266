"""Every command's flags are made one way: from its dataclass (`TrainConfig` for `train`, an options
dataclass for the others), with one name per thing across commands and the older spellings kept as
aliases; `--help` of every command works; an unknown flag still gets its did-you-mean; a command's
module imports no more than it uses (issue 43: `train` imports no matplotlib)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from alx_trainer.cli import commands
from alx_trainer.cli.common import build_parser, parse_options
from alx_trainer.config import TrainConfig

from conftest import REPO

OPTIONS = {
    "eval": (commands.EvalOptions, commands.main_eval),
    "sweep": (commands.SweepOptions, commands.main_sweep),
    "predict": (commands.PredictOptions, commands.main_predict),
    "export": (commands.ExportOptions, commands.main_export),
}
# the older spelling of a flag -> (command, the one name now)
ALIASES = {
    ("eval", "--k"): "eval_k",
    ("eval", "--max_rows"): "eval_rows",
    ("predict", "--k"): "top_k",
    ("export", "--topk"): "top_k",
    ("export", "--output"): "out_dir",
}


def _flags(parser) -> dict[str, str]:
    """Option string -> destination of every flag of `parser` but `--help` (and argparse's
    `--no-X` forms of switches)."""
    return {
        s: a.dest
        for a in parser._actions  # noqa: SLF001 - argparse keeps no public list of actions
        for s in a.option_strings
        if a.dest != "help" and not s.startswith("--no-")
    }


# every command's flags, written out (the aliases above come on top)
COMMON = ["compile_cache", "log_level"]
FLAGS = {
    "eval": COMMON
    + ["data", "tfds_data_dir", "model_dir", "eval_k", "ndcg_k", "approx", "recall_target"]
    + ["batch_size", "cols_per_block", "progress", "eval_rows", "split", "fold_in", "output"],
    "sweep": ["out_dir", "dims", "lambdas", "alphas", "nus", "metric", "keep_models", "no_final"],
    "predict": COMMON
    + ["data", "model_dir", "links", "name", "rows", "json", "top_k", "batch_size", "neighbors"]
    + ["table"],
    "export": COMMON + ["model_dir", "out_dir", "data", "top_k", "num_shards", "batch_size"],
}
# arguments given by position, not by a flag
POSITIONAL = {"predict": ["node"]}


@pytest.mark.parametrize("command", sorted(OPTIONS))
def test_a_commands_flags_are_its_dataclass_fields(command):
    cls, _ = OPTIONS[command]
    parser = build_parser(cls, config_file=False)
    expected = {f"--{name}": name for name in FLAGS[command]}
    expected.update({alias: dest for (c, alias), dest in ALIASES.items() if c == command})
    assert _flags(parser) == expected
    dests = {a.dest for a in parser._actions if a.dest != "help"}  # noqa: SLF001
    assert dests == set(FLAGS[command]) | set(POSITIONAL.get(command, []))
    for field in dataclasses.fields(cls):
        assert field.metadata["help"], f"{command} --{field.name} has no help"


# a sample of `train`'s flags, one of each group of TrainConfig, and how many it has in all
TRAIN_SAMPLE = [
    "data",
    "tfds_data_dir",
    "dim",
    "alpha",
    "reg",
    "reg_exponent",
    "solver",
    "cg_iters",
    "eval_every",
    "eval_k",
    "ndcg_k",
    "eval_rows",
    "model_dir",
    "epochs",
    "checkpoint_every",
    "progress",
    "log_level",
    "compile_cache",
    "distributed",
    "num_processes",
    "table_dtype",
    "steps_per_call",
    "cpu_devices",
]
TRAIN_FLAG_COUNT = 47


def test_trains_flags_are_trainconfigs_fields():
    flags = _flags(build_parser(TrainConfig))
    assert flags.pop("--config") == "config"
    assert len(flags) == TRAIN_FLAG_COUNT
    assert all(flag == f"--{dest}" for flag, dest in flags.items())
    for name in TRAIN_SAMPLE:
        assert flags[f"--{name}"] == name


def test_the_same_thing_has_the_same_flag_in_train_and_eval():
    """The evaluation's cut-offs and row sample are named as `train` names them."""
    train_flags = {f.name for f in dataclasses.fields(TrainConfig)}
    eval_flags = {f.name for f in dataclasses.fields(commands.EvalOptions)}
    for name in ("eval_k", "ndcg_k", "eval_rows", "data", "model_dir", "tfds_data_dir"):
        assert name in train_flags and name in eval_flags, name
    for name in ("compile_cache", "log_level"):
        for cls, _ in OPTIONS.values():
            if cls is not commands.SweepOptions:  # sweep takes train's flags for these
                assert name in {f.name for f in dataclasses.fields(cls)}, (cls, name)
    predict = {f.name for f in dataclasses.fields(commands.PredictOptions)}
    export = {f.name for f in dataclasses.fields(commands.ExportOptions)}
    sweep = {f.name for f in dataclasses.fields(commands.SweepOptions)}
    assert "top_k" in predict and "top_k" in export
    assert "out_dir" in export and "out_dir" in sweep


def test_the_older_spellings_are_aliases_of_the_one_name():
    _, opts = parse_options(
        commands.EvalOptions, ["--data", "D", "--model_dir", "M", "--k", "5,10"], "eval"
    )
    assert opts.eval_k == [5, 10]
    _, opts = parse_options(
        commands.EvalOptions,
        ["--data", "D", "--model_dir", "M", "--eval_k", "7", "--max_rows", "3"],
        "eval",
    )
    assert (opts.eval_k, opts.eval_rows) == ([7], 3)
    _, opts = parse_options(
        commands.PredictOptions, ["--data", "D", "--model_dir", "M", "--k", "4", "u"], "predict"
    )
    assert (opts.top_k, opts.node) == (4, ["u"])
    _, opts = parse_options(
        commands.ExportOptions, ["--model_dir", "M", "--output", "O", "--topk", "6"], "export"
    )
    assert (opts.out_dir, opts.top_k) == ("O", 6)
    _, opts = parse_options(
        commands.ExportOptions, ["--model_dir", "M", "--out_dir", "O"], "export"
    )
    assert (opts.out_dir, opts.top_k, opts.data) == ("O", 0, "")


def test_defaults_are_the_dataclasses():
    _, opts = parse_options(commands.EvalOptions, ["--data", "D", "--model_dir", "M"], "eval")
    assert opts == commands.EvalOptions(data="D", model_dir="M")
    assert (opts.eval_k, opts.ndcg_k, opts.progress, opts.split) == ([20, 50], 100, None, "test")


@pytest.mark.parametrize("command", ["train", *sorted(OPTIONS)])
def test_help_of_every_command(command, capsys):
    main = commands.main_train if command == "train" else OPTIONS[command][1]
    with pytest.raises(SystemExit) as stop:
        main(["--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: alx_trainer {command}")
    cls = TrainConfig if command == "train" else OPTIONS[command][0]
    for field in dataclasses.fields(cls):
        if not field.metadata.get("positional"):
            assert f"--{field.name}" in out, field.name


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["eval", "--data", "d", "--model_dir", "m", "--kk", "5"],
            "alx_trainer eval: error: unknown flag --kk (did you mean --k?)",
        ),
        (
            ["eval", "--data", "d", "--model_dir", "m", "--eval_kk", "5"],
            "alx_trainer eval: error: unknown flag --eval_kk (did you mean --eval_k?)",
        ),
        (
            ["export", "--model_dir", "m", "--out_dir", "o", "--top_kk", "5"],
            "alx_trainer export: error: unknown flag --top_kk (did you mean --top_k?)",
        ),
        (
            ["sweep", "--out_dir", "o", "--dimss", "8"],
            "alx_trainer sweep: error: unknown flag --dimss (did you mean --dims?)",
        ),
        (
            ["train", "--dimm", "8"],
            "alx_trainer train: error: unknown flag --dimm (did you mean --dim?)",
        ),
        (
            ["eval", "--data", "d", "--model_dir", "m", "--eval_k", "0"],
            "alx_trainer eval: error: argument --eval_k/--k: expected positive integers, got '0'",
        ),
        (
            ["export", "--model_dir", "m", "--out_dir", "o", "--top_k", "3"],
            "alx_trainer export: error: --top_k needs --data: the dataset whose rows and known "
            "links are ranked",
        ),
    ],
)
def test_a_bad_flag_is_one_line_and_exit_2(argv, message):
    run = subprocess.run(
        [sys.executable, "-m", "alx_trainer", *argv], cwd=REPO, capture_output=True, text=True
    )
    assert (run.returncode, run.stderr.strip(), run.stdout) == (2, message, "")


def _imported(code: str) -> list[str]:
    """The heavy top-level packages imported by `code` in a new process."""
    heavy = {"jax", "orbax", "matplotlib", "tensorflow", "numpy"}
    probe = (
        f"{code}\nimport json, sys\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & {heavy!r})))"
    )
    run = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    )
    return json.loads(run.stdout.splitlines()[-1])


def test_train_imports_no_matplotlib():
    """`train` (its command line and the training stack it imports to run) imports no matplotlib;
    the commands' module imports nothing heavy until a command runs."""
    imported = _imported(
        "import alx_trainer.cli.commands, alx_trainer.train, alx_trainer.callbacks\n"
        "from alx_trainer.config import TrainConfig\n"
        "from alx_trainer.cli.common import parse_dataclass_args\n"
        "parse_dataclass_args(TrainConfig, ['--data', 'd', '--model_dir', 'm'])"
    )
    assert "jax" in imported and "matplotlib" not in imported
    assert _imported("import alx_trainer.cli.commands, alx_trainer.__main__") == []
