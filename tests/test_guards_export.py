"""`export` is all or nothing: a failure or Ctrl-C after any shard leaves the previous export
readable and whole; readers refuse a directory without a valid manifest (issue 44)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

import numpy as np
import pytest
from alx_cli import run_cli

from alx_trainer.model import load_model
from alx_trainer.tools import output_swap, predict, topk_export
from tests.guard_data import small_dataset, small_model
from webgraph_contract import fileio


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A dataset and two models of it (1 and 2 epochs)."""
    base = tmp_path_factory.mktemp("guard_export")
    data = small_dataset(base)
    small_model(data, base / "m1", epochs=1)
    small_model(data, base / "m2", epochs=2)
    return base


def files_of(path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


def topk(work, out, model: str, *flags: str) -> tuple[int, str, str]:
    return run_cli(
        [
            "export",
            "--model_dir",
            str(work / model),
            "--data",
            str(work / "data"),
            "--out_dir",
            str(out),
            "--top_k",
            "5",
            *flags,
        ]
    )


def fail_at_second(monkeypatch, module, name: str, how) -> list[str]:
    """Make `module.name` (a writer of one file) run `how()` at its second call; the paths it was
    called with."""
    real, calls = getattr(module, name), []

    def writer(path, *args, **kwargs):
        calls.append(path)
        if len(calls) == 2:
            how()
        return real(path, *args, **kwargs)

    monkeypatch.setattr(module, name, writer)
    return calls


def boom():
    raise OSError("disk full (injected)")


def sigint():
    os.kill(os.getpid(), signal.SIGINT)


@pytest.mark.parametrize("how", [boom, sigint], ids=["error", "sigint"])
def test_topk_export_cut_after_a_shard_leaves_the_previous_one(work, tmp_path, monkeypatch, how):
    out = tmp_path / "topk"
    rc, _, err = topk(work, out, "m2", "--num_shards", "3")
    assert rc == 0, err
    before = files_of(out)
    want = topk_export.read_export(str(out))
    assert json.loads(before["topk.json"])["epoch"] == 2
    calls = fail_at_second(monkeypatch, fileio, "record_writer", how)
    rc, printed, err = topk(work, out, "m1", "--num_shards", "2")
    assert len(calls) == 2 and printed == ""
    assert rc == (130 if how is sigint else 1), err
    assert err.strip().splitlines()[-1].startswith("alx_trainer export: ")
    # nothing of the cut export: the directory as it was, and no staging directory beside it
    assert files_of(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["topk"]
    got = topk_export.read_export(str(out))
    np.testing.assert_array_equal(got.ids, want.ids)


def test_table_export_cut_after_a_file_leaves_the_previous_one(work, tmp_path, monkeypatch):
    out = tmp_path / "tables"
    export = ["export", "--model_dir", str(work / "m2"), "--out_dir", str(out)]
    rc, _, err = run_cli([*export, "--num_shards", "3"])
    assert rc == 0, err
    before = files_of(out)
    calls = fail_at_second(monkeypatch, fileio, "write_records", boom)
    rc, _, err = run_cli([*export, "--num_shards", "2"])
    assert rc == 1 and len(calls) == 2 and "disk full (injected)" in err
    assert files_of(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tables"]
    manifest = json.loads(before["tables.json"])
    assert manifest["epoch"] == 2 and manifest["model_dir"] == str(work / "m2")
    got = predict.read_tables(str(out))
    np.testing.assert_array_equal(got["col_table"], load_model(str(work / "m2")).col_table)


def test_a_new_export_replaces_the_old_one_whole(work, tmp_path):
    out = tmp_path / "topk"
    assert topk(work, out, "m2", "--num_shards", "3")[0] == 0
    rc, _, err = topk(work, out, "m1", "--num_shards", "2")
    assert rc == 0, err
    assert sorted(p.name for p in out.iterdir()) == [
        "topk.json",
        "topk.tfr-00000-of-00002",
        "topk.tfr-00001-of-00002",
    ]
    manifest = json.loads((out / "topk.json").read_text())
    # the model exported from, not the one it was trained into (the same here) or another
    assert manifest["epoch"] == 1 and manifest["model_dir"] == str(work / "m1")


def test_readers_refuse_an_incomplete_or_mixed_directory(work, tmp_path):
    out = tmp_path / "topk"
    assert topk(work, out, "m2", "--num_shards", "3")[0] == 0
    (out / "topk.tfr-00000-of-00002").write_bytes(b"")
    with pytest.raises(ValueError, match="not listed topk.tfr-00000-of-00002"):
        topk_export.read_export(str(out))
    os.remove(out / "topk.tfr-00000-of-00002")
    os.remove(out / "topk.tfr-00001-of-00003")
    with pytest.raises(ValueError, match="missing topk.tfr-00001-of-00003"):
        topk_export.read_export(str(out))
    os.remove(out / "topk.json")
    with pytest.raises(FileNotFoundError, match="holds no complete"):
        topk_export.read_export(str(out))
    with pytest.raises(FileNotFoundError, match="holds no complete table export"):
        predict.read_tables(str(out))


def test_bad_out_dir_and_top_k_0_are_one_line(work, tmp_path):
    afile = tmp_path / "file"
    afile.write_text("mine")
    base = ["export", "--model_dir", str(work / "m1")]
    rc, _, err = run_cli([*base, "--out_dir", str(afile / "sub")])
    assert rc == 1 and err.strip() == (
        f"alx_trainer export: error: --out_dir {afile / 'sub'}: {afile} is a file, not a "
        "directory; give a directory"
    )
    rc, _, err = run_cli([*base, "--out_dir", str(afile)])
    assert rc == 1 and len(err.strip().splitlines()) == 1 and "is a file" in err
    with pytest.raises(SystemExit) as e:
        run_cli([*base, "--out_dir", str(tmp_path / "x"), "--top_k", "0"])
    assert e.value.code == 2 and not (tmp_path / "x").exists()
    assert afile.read_text() == "mine"


def test_staging_of_a_killed_export_is_removed_and_a_live_one_refuses(work, tmp_path):
    out = tmp_path / "topk"
    assert topk(work, out, "m2")[0] == 0
    before = files_of(out)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    left = tmp_path / f"topk{output_swap.STAGING_TAG}0123456789ab"
    left.mkdir()
    (left / "topk.tfr-00000-of-00001").write_bytes(b"half")
    owner = {"host": socket.gethostname(), "pid": int(dead.stdout)}
    (left / output_swap.OWNER_FILE).write_text(json.dumps(owner))
    rc, _, err = topk(work, out, "m1")
    assert rc == 0, err
    assert f"removed {left}, left by export process {owner['pid']}" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["topk"]
    # a live owner (this process): another export into the same directory is refused
    left.mkdir()
    owner["pid"] = os.getpid()
    (left / output_swap.OWNER_FILE).write_text(json.dumps(owner))
    now = files_of(out)
    rc, _, err = topk(work, out, "m2")
    assert rc == 1 and f"is being written by process {os.getpid()}" in err
    assert files_of(out) == now != before
