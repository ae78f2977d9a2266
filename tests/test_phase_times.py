"""The run's phases in the log: each side's read, plan and pack as they end, then one line of
all."""

from __future__ import annotations

import logging
import re
import time

from alx_cli import run_cli

from alx_trainer import phase_times
from alx_trainer.config import TrainConfig
from alx_trainer.execution import make_mesh
from alx_trainer.train import train

import reference_ials as ref


def test_phases_add_up_in_order():
    phase_times.reset()
    phase_times.add("eval", 2.0, 1.0)
    phase_times.add("read", 1.0, 3.0)
    with phase_times.timed("read"):
        pass
    totals = phase_times.totals()
    assert list(totals) == ["read", "eval"] and totals["eval"] == (2.0, 1.0)
    assert 1.0 <= totals["read"][0] < 1.5 and totals["read"][1] >= 3.0
    assert phase_times.summary().startswith("phases: read 1.")
    phase_times.reset()
    assert phase_times.summary() == "phases: none timed"


def test_training_logs_every_phase(tmp_path, caplog):
    rows = ref.random_rows(3, 30, 40, max_len=8)
    test = {
        r: (c[: len(c) // 2], c[len(c) // 2 :]) for r, c in list(rows.items())[:6] if len(c) > 1
    }
    data = ref.write_dataset(str(tmp_path / "data"), rows, 30, 40, test=test)
    config = TrainConfig(
        data=data,
        model_dir=str(tmp_path / "m"),
        dim=4,
        epochs=2,
        progress=False,
        eval_every=1,
        piece_len=4,
        batch_pieces=4,
    )
    with caplog.at_level(logging.DEBUG, logger="alx_trainer"):  # each phase's own line: debug
        train(config, mesh=make_mesh())
    lines = [
        r.getMessage()
        for r in {id(r): r for r in caplog.records}.values()
        if r.name == "alx_trainer.phase_times"
    ]
    for side in ("row", "col"):
        for phase in ("read", "plan", "pack"):
            assert any(
                re.fullmatch(rf"{side} side {phase}: [\d.]+ s \([\d.]+ CPU s\)", line)
                for line in lines
            ), lines
    assert sum(line.startswith("epoch ") and " eval: " in line for line in lines) == 2
    # the last epoch's checkpoint: "epoch 2 checkpoint"
    for what in (
        "tables",
        "resume",
        "epoch 2",
    ):
        phase = "checkpoint" if what.startswith("epoch") else "init"
        assert any(re.fullmatch(rf"{what} {phase}: [\d.]+ s \([\d.]+ CPU s\)", x) for x in lines)
    (summary,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("phases: ")]
    assert re.fullmatch(
        r"phases: open [\d.]+ s \([\d.]+ CPU s\), init [\d.]+ s \([\d.]+ CPU s\), read .*, "
        r"plan .*, pack .*, compile .*, epochs .*, checkpoint .*, eval .*",
        summary,
    )


def test_a_phase_that_fails_is_not_counted(caplog):
    phase_times.reset()
    try:
        with phase_times.timed("read"):
            raise ValueError("corrupt")
    except ValueError:
        pass
    assert phase_times.totals() == {} and not [
        r for r in caplog.records if r.name == "alx_trainer.phase_times"
    ]


def test_timed_steps_counts_the_waits_for_items():
    phase_times.reset()

    def slow():
        for k in range(3):
            time.sleep(0.05)
            yield k

    got = []
    for item in phase_times.timed_steps("read", slow()):
        got.append(item)
        # the consumer's own time is not the reader's
        time.sleep(0.1)
    wall, cpu = phase_times.totals()["read"]
    assert got == [0, 1, 2] and 0.15 <= wall < 0.25 and cpu is not None
    phase_times.reset()


def test_compile_seconds_leave_the_phase_they_were_in():
    """`compile_cache.phase`: the block's wall time split into its phase and 'compile' (JAX's
    reported trace, lower and compile seconds), together the block's."""
    import jax
    import jax.numpy as jnp

    from alx_trainer import compile_cache

    phase_times.reset()
    # a program of its own: traced, lowered and compiled (or loaded) inside the block
    salt = float(time.perf_counter_ns() % 1000003)
    start = time.perf_counter()
    with compile_cache.phase("rank"):
        jax.jit(lambda x: jnp.sin(x) * salt)(jnp.ones(3)).block_until_ready()
    wall = time.perf_counter() - start
    totals = phase_times.totals()
    assert list(totals) == ["compile", "rank"]
    assert totals["compile"][0] > 0 and totals["compile"][1] is None
    assert abs(totals["compile"][0] + totals["rank"][0] - wall) < 0.01
    phase_times.reset()


def test_eval_and_export_log_their_phases(tmp_path):
    """The scoring commands end with a phases line: start-up, load, read, compile, rank (eval),
    and write (export)."""
    rows = ref.random_rows(5, 30, 40, max_len=8)
    test = {
        r: (c[: len(c) // 2], c[len(c) // 2 :]) for r, c in list(rows.items())[:6] if len(c) > 1
    }
    data = ref.write_dataset(str(tmp_path / "data"), rows, 30, 40, test=test)
    model = str(tmp_path / "m")
    flags = ["--data", data, "--model_dir", model]
    code, _, err = run_cli(["train", *flags, "--dim", "4", "--epochs", "1", "--no-progress"])
    assert code == 0, err
    startup = r"phases: start .*, imports .*, backend .*, load .*, "
    code, out, err = run_cli(["eval", *flags, "--no-progress"])
    assert code == 0 and "recall@20" in out, err
    assert re.search(startup + r"read .*, compile .*, rank .*, other [\d.]+ s$", err, re.M), err
    for extra, phases in (
        (["--top_k", "5"], r"read .*, compile .*, rank .*, write .*"),
        ([], "write .*"),
    ):
        out_dir = str(tmp_path / f"export{len(extra)}")
        code, out, err = run_cli(["export", *flags, "--out_dir", out_dir, *extra])
        assert code == 0, err
        assert re.search(startup + phases + r", other [\d.]+ s$", err, re.M), err
