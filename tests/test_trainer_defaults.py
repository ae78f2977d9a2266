"""`cg_form` 'auto' picks, per backend and d, the form DESIGN.md's table documents."""

from __future__ import annotations

import re

import pytest

from alx_trainer import execution
from alx_trainer.config import TrainConfig

from conftest import REPO


def documented() -> list[tuple[str, int, str]]:
    """(backend, d, form 'auto' picks) of each row of DESIGN.md's cg_form table."""
    rows = []
    for line in (REPO / "DESIGN.md").read_text().splitlines():
        m = re.match(r"\s*\| (cpu|gpu|tpu) \| (\d+) \|.*\| (matvec|explicit) \|\s*$", line)
        if m:
            rows.append((m.group(1), int(m.group(2)), m.group(3)))
    return rows


def test_the_table_covers_the_measured_points():
    points = {(b, d) for b, d, _ in documented()}
    assert {("gpu", 64), ("gpu", 128), ("gpu", 1024), ("cpu", 64)} <= points


@pytest.mark.parametrize("backend,dim,form", documented())
def test_auto_picks_the_documented_form(backend, dim, form):
    machine = execution.Machine(backend, 1, 1, 1, 1)
    for cg_form, want in (("auto", form), ("explicit", "explicit")):
        config = TrainConfig(data="x", model_dir="y", dim=dim, cg_form=cg_form)
        plan = execution.plan_execution(config, machine, 100, 10)
        assert plan.cg_form == want
        assert plan.step_spec(config, 10, observed_loss=True).matvec == (want == "matvec")
