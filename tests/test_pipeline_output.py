"""Nothing lost: the previous dataset survives every failed run; foreign, unwritable and empty
outputs are refused."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from webgraph_contract import fileio
from webgraph_pipeline.cli import main
from webgraph_pipeline.output_dir import STAGING_TAG, is_dataset_file

EDGES = "".join(f"{s} {d}\n" for s in range(30) for d in range(30) if s != d and (s * 7 + d) % 3)


def run_cli(args, capsys):
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err.strip().splitlines()


def snapshot(directory) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


@pytest.fixture
def dataset(tmp_path, capsys):
    """A finished dataset in tmp_path/out (from a small hand-made graph) and its input file."""
    edges = tmp_path / "edges.txt"
    edges.write_text(EDGES)
    out = tmp_path / "out"
    code, _, err = run_cli(
        [
            "--input_format",
            "edges",
            "--input",
            edges,
            "--output",
            out,
            "--num_shards",
            "2",
            "--test_fraction",
            "0.3",
        ],
        capsys,
    )
    assert code == 0, err
    files = snapshot(out)
    assert "stats.json" in files and all(is_dataset_file(n) for n in files)
    return edges, out, files


def no_staging_left(tmp_path) -> bool:
    return not [p for p in tmp_path.iterdir() if STAGING_TAG in p.name]


def test_rerun_replaces_the_dataset_whole(dataset, tmp_path, capsys):
    edges, out, before = dataset
    code, _, err = run_cli(
        [
            "--input_format",
            "edges",
            "--input",
            edges,
            "--output",
            out,
            "--num_shards",
            "3",
            "--test_fraction",
            "0.3",
        ],
        capsys,
    )
    assert code == 0, err
    after = snapshot(out)
    assert not any("-of-00002" in n for n in after) and any("-of-00003" in n for n in after)
    assert no_staging_left(tmp_path)


def test_failing_job_keeps_the_previous_dataset(dataset, tmp_path, capsys):
    edges, out, before = dataset
    listing = tmp_path / "wat.paths"
    listing.write_text("missing/0.warc.wat.gz\n")  # found missing only when the job opens it
    code, _, err = run_cli(
        [
            "--input_listing",
            listing,
            "--listing_prefix",
            f"{tmp_path}/",
            "--output",
            out,
            "--fail_on_unreadable",
        ],
        capsys,
    )
    assert code == 1 and len(err) == 1
    assert (
        err[0].startswith("webgraph_pipeline: error: the job failed: ") and "is unchanged" in err[0]
    )
    assert snapshot(out) == before and no_staging_left(tmp_path)


def test_writer_failing_after_half_its_shards_keeps_the_previous_dataset(
    dataset, tmp_path, capsys, monkeypatch
):
    edges, out, before = dataset
    real, calls = fileio.write_records, []

    def fail_after_three(path, records):
        calls.append(path)
        if len(calls) > 3:
            raise OSError("injected: disk full")
        real(path, records)

    monkeypatch.setattr(fileio, "write_records", fail_after_three)
    code, _, err = run_cli(
        ["--input_format", "edges", "--input", edges, "--output", out, "--num_shards", "2"], capsys
    )
    assert len(calls) > 3, "the injected fault never fired"
    assert code == 1 and "injected: disk full" in err[-1]
    assert snapshot(out) == before and no_staging_left(tmp_path)


def test_kill_9_mid_run_keeps_the_previous_dataset(dataset, tmp_path, data_dir):
    edges, out, before = dataset
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")])),
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "webgraph_pipeline",
            "--input_format",
            "edges",
            "--input",
            str(data_dir / "hollins" / "edges.txt"),
            "--urls",
            str(data_dir / "hollins" / "urls.txt"),
            "--output",
            str(out),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 120
    while time.time() < deadline and no_staging_left(tmp_path) and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, "the job ended before it could be killed"
    time.sleep(1.0)  # well inside the job: reading and the graph stage take several seconds
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert snapshot(out) == before


def test_foreign_output_refused_unless_overwrite(tmp_path, capsys):
    edges = tmp_path / "edges.txt"
    edges.write_text(EDGES)
    home = tmp_path / "home"
    home.mkdir()
    (home / "thesis.tex").write_text("precious")
    args = ["--input_format", "edges", "--input", edges, "--output", home]
    code, _, err = run_cli(args, capsys)
    assert (
        code == 2
        and len(err) == 1
        and "not a WebGraph dataset (thesis.tex)" in err[0]
        and "--overwrite" in err[0]
    )
    assert [p.name for p in home.iterdir()] == ["thesis.tex"]
    code, _, err = run_cli(args + ["--overwrite"], capsys)
    assert code == 0, err
    assert (home / "thesis.tex").read_text() == "precious" and (home / "stats.json").exists()
    assert no_staging_left(tmp_path)


def test_unwritable_output_refused_before_reading(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    code, _, err = run_cli(
        [
            "--input_format",
            "edges",
            "--input",
            "/nonexistent/never-read.txt",
            "--output",
            blocker / "out",
        ],
        capsys,
    )
    assert code == 2 and len(err) == 1 and "cannot write" in err[0]
    code, _, err = run_cli(
        ["--input_format", "edges", "--input", "/nonexistent/x.txt", "--output", blocker], capsys
    )
    assert code == 2 and "is a file" in err[0]


def test_empty_result_fails_and_keeps_the_previous_dataset(dataset, tmp_path, capsys):
    edges, out, before = dataset
    args = ["--input_format", "edges", "--input", edges, "--output", out, "--min_links", "1000"]
    code, _, err = run_cli(args, capsys)
    assert code == 1 and len(err) == 1
    # the filter that emptied it, named with its K; an empty graph is no dataset one would keep: no
    # --allow_empty hint
    assert (
        "has no node: no node has >= 1000 in- and out-links" in err[0]
        and "lower --min_links" in err[0]
    )
    assert "--allow_empty" not in err[0]
    assert snapshot(out) == before
    code, _, err = run_cli(args + ["--allow_empty"], capsys)
    assert code == 0, err
    assert snapshot(out) != before and no_staging_left(tmp_path)


def test_an_output_that_is_a_symlink_is_written_through(dataset, tmp_path, capsys):
    """The new dataset goes into the directory the link points to; the link stays a link, and no
    staging directory is left beside either."""
    edges, out, before = dataset
    link = tmp_path / "links" / "latest"
    link.parent.mkdir()
    link.symlink_to(out)
    args = ["--input_format", "edges", "--input", edges, "--output", link, "--num_shards", "3"]
    code, _, err = run_cli([*args, "--test_fraction", "0.3"], capsys)
    assert code == 0, err
    assert link.is_symlink() and link.resolve() == out.resolve()
    after = snapshot(out)
    assert after != before and any("-of-00003" in n for n in after)
    assert no_staging_left(tmp_path) and no_staging_left(link.parent)
