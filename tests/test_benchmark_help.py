"""The benchmarks' entry points: four, each under 400 lines (and each core module), each answering
`--help` with whole sentences, the ones the issue names with `--device`."""

import subprocess
import sys

import pytest

from benchmarks.core.paths import REPO

ENTRIES = ("speed", "quality", "profile", "pipeline")
LIMIT = 400


def help_text(module: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{module}", *args, "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return " ".join(done.stdout.split())


def test_four_entries_and_no_file_over_the_limit():
    package = REPO / "benchmarks"
    entries = sorted(p.stem for p in package.glob("*.py") if p.stem != "__init__")
    assert entries == sorted(ENTRIES)
    long = [
        f"{p.relative_to(REPO)}: {n}"
        for p in sorted(package.rglob("*.py"))
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > LIMIT
    ]
    assert not long, "over 400 lines: " + ", ".join(long)


@pytest.mark.parametrize("module", ["speed", "quality", "profile"])
def test_help_offers_the_device(module):
    assert "--device {auto,cpu,gpu}" in help_text(module)


def test_profile_description_is_whole():
    assert "one warm epoch and one batch of top K by device kernel" in help_text("profile")


@pytest.mark.parametrize("sub", ["ml1m", "hollins", "gowalla"])
def test_quality_names_each_subcommand_and_it_answers(sub):
    assert f"python -m benchmarks.quality {sub} [" in help_text("quality")
    assert "--epochs" in help_text("quality", sub) or "--grid_epochs" in help_text("quality", sub)
