"""Nothing lost, nothing mixed, on the trainer's side: each case through the real
`python -m alx_trainer` in a subprocess, asserting the exit status, the one-line message and that
the user's model directory and data are as they were."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.pipeline_data import make_dataset
from webgraph_contract import dataset_reader, layout, stats_json

from conftest import REPO

# A small graph with URL names (4 outlinks and 4 inlinks per node), so predict can be asked in
# unnormalized forms.
NODES = 40
EDGES = "".join(
    f"http://n{s}.example/p http://n{(s + step) % NODES}.example/p\n"
    for s in range(NODES)
    for step in (1, 2, 5, 11)
)
NOISE = ("I0000", "W0000", "E0000", "WARNING: All log", "WARNING:absl:")


def alx(*args, env=None, check_rc=None):
    """Run `python -m alx_trainer ARGS` as a user would (one CPU device per core); (rc, stdout,
    stderr lines)."""
    run_env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    run_env.update(PYTHONPATH=os.getcwd(), TF_CPP_MIN_LOG_LEVEL="3", **(env or {}))
    proc = subprocess.run(
        [sys.executable, "-m", "alx_trainer", *map(str, args)],
        env=run_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    err = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith(NOISE)]
    if check_rc is not None:
        assert proc.returncode == check_rc, proc.stderr[-3000:]
    return proc.returncode, proc.stdout, err


def errors(err: list[str]) -> list[str]:
    return [line for line in err if "error" in line]


def tree(path) -> dict[str, bytes]:
    """Every file under `path` with its bytes (what "nothing lost" compares)."""
    out = {}
    for root, _, files in os.walk(path):
        for name in files:
            full = os.path.join(root, name)
            with open(full, "rb") as f:
                out[os.path.relpath(full, path)] = f.read()
    return out


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """Two datasets of the same graph split with different seeds, and a model trained on the
    first."""
    base = tmp_path_factory.mktemp("guards")
    edges = base / "edges.txt"
    edges.write_text(EDGES)
    flags = [
        "--edge_format",
        "pairs",
        "--input",
        edges,
        "--min_links",
        "1",
        "--num_shards",
        "2",
        "--test_fraction",
        "0.3",
    ]
    make_dataset(base / "A", *flags)
    make_dataset(base / "B", *flags, "--seed", "7")
    alx(
        "train",
        "--data",
        base / "A",
        "--model_dir",
        base / "model",
        "--dim",
        "4",
        "--epochs",
        "1",
        "--no-progress",
        check_rc=0,
    )
    return base


def test_fingerprint_is_the_sha256_of_the_data_files(work, tmp_path):
    stats = stats_json.read_stats(str(work / "A"))
    names = sorted(n for n in os.listdir(work / "A") if ".tfr-" in n or n.startswith("vocab"))
    assert names and sorted(stats["file_sha256"]) == names
    lines = ""
    for name in names:  # independent of contract: hashlib over the bytes on disk
        digest = hashlib.sha256((work / "A" / name).read_bytes()).hexdigest()
        assert stats["file_sha256"][name] == digest
        lines += f"{name}\t{digest}\n"
    assert stats["dataset_fingerprint"] == hashlib.sha256(lines.encode()).hexdigest()
    assert (
        stats_json.read_stats(str(work / "B"))["dataset_fingerprint"]
        != stats["dataset_fingerprint"]
    )
    # the same job on the same input: the same identity
    edges = work / "edges.txt"
    again = make_dataset(
        tmp_path / "again",
        "--edge_format",
        "pairs",
        "--input",
        edges,
        "--min_links",
        "1",
        "--num_shards",
        "2",
        "--test_fraction",
        "0.3",
    )
    assert again["dataset_fingerprint"] == stats["dataset_fingerprint"]


@pytest.mark.parametrize("command", ["eval", "predict", "export"])
def test_tools_refuse_another_dataset(work, command):
    model, other = work / "model", work / "B"
    before = tree(model)
    args = {
        "eval": ["eval", "--data", other, "--model_dir", model],
        "predict": ["predict", "--data", other, "--model_dir", model, "http://n1.example/p"],
        "export": ["export", "--data", other, "--model_dir", model, "--output", work / "export"],
    }[command]
    rc, out, err = alx(*args)
    assert rc == 1 and out == ""
    fp_a = stats_json.read_stats(str(work / "A"))["dataset_fingerprint"][:12]
    fp_b = stats_json.read_stats(str(work / "B"))["dataset_fingerprint"][:12]
    assert len(err) == 1 and err[0].startswith(
        f"alx_trainer {command}: error: --data {other} (dataset {fp_b})"
    )
    assert f"trained on ({work / 'A'}, dataset {fp_a})" in err[0] and str(model) in err[0]
    assert tree(model) == before and not (work / "export").exists()


def test_resume_on_another_dataset_is_refused_and_the_model_kept(work, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(work / "model", model)
    before = tree(model)
    rc, _, err = alx(
        "train",
        "--data",
        work / "B",
        "--model_dir",
        model,
        "--dim",
        "4",
        "--epochs",
        "2",
        "--no-progress",
    )
    assert rc == 1 and len(errors(err)) == 1 and "is not the dataset the model in" in errors(err)[0]
    assert tree(model) == before  # config.json, metrics and checkpoints untouched, no lock left


def test_dataset_without_fingerprint_warns_and_runs(work, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(work / "A", old)
    stats = stats_json.read_stats(str(old))
    del stats["dataset_fingerprint"], stats["file_sha256"]
    stats_json.write_stats(str(old), stats)
    rc, out, err = alx(
        "eval", "--data", old, "--model_dir", work / "model", "--k", "5", "--ndcg_k", "0"
    )
    assert rc == 0 and "recall@5" in out
    assert [line for line in err if "WARNING" in line and "records no dataset fingerprint" in line]


def test_missing_shard_and_wrong_row_count_stop_before_epoch_1(work, tmp_path):
    gone = tmp_path / "gone"
    shutil.copytree(work / "A", gone)
    os.remove(gone / "train.transpose.tfr-00001-of-00002")
    rc, _, err = alx(
        "train", "--data", gone, "--model_dir", tmp_path / "m1", "--dim", "4", "--no-progress"
    )
    assert rc == 1 and len(errors(err)) == 1
    assert (
        "incomplete: 'train_t' shard(s) train.transpose.tfr-00001-of-00002 missing (1 of 2 present)"
        in err[-1]
    )
    assert not (tmp_path / "m1" / "metrics.jsonl").exists()

    short = tmp_path / "short"
    shutil.copytree(work / "A", short)
    stats = stats_json.read_stats(str(short))
    kept = dataset_reader.read_records([str(short / "train.tfr-00000-of-00002")])
    open(short / "train.tfr-00001-of-00002", "wb").close()  # a valid, empty TFRecord file
    rc, _, err = alx(
        "train", "--data", short, "--model_dir", tmp_path / "m2", "--dim", "4", "--no-progress"
    )
    assert rc == 1 and len(errors(err)) == 1
    assert (
        f"the 'train' shards hold {len(kept)} rows" in err[-1]
        and f"stats.json says {stats['splits']['train']}" in err[-1]
    )
    assert not (tmp_path / "m2" / "metrics.jsonl").exists()


def test_nothing_to_evaluate_or_train_stops_before_epoch_1(work, tmp_path):
    edges = work / "edges.txt"
    no_test = tmp_path / "no_test"
    make_dataset(
        no_test,
        "--edge_format",
        "pairs",
        "--input",
        edges,
        "--min_links",
        "1",
        "--test_fraction",
        "0",
        "--allow_empty",
    )
    rc, _, err = alx(
        "train", "--data", no_test, "--model_dir", tmp_path / "m", "--dim", "4", "--no-progress"
    )
    assert (
        rc == 1 and "no test rows to evaluate (read before epoch 1); pass --eval_every 0" in err[-1]
    )
    assert not (tmp_path / "m" / "metrics.jsonl").exists()
    empty = tmp_path / "empty"
    make_dataset(
        empty, "--edge_format", "pairs", "--input", edges, "--min_links", "1000", "--allow_empty"
    )
    rc, _, err = alx(
        "train",
        "--data",
        empty,
        "--model_dir",
        tmp_path / "m0",
        "--eval_every",
        "0",
        "--no-progress",
    )
    assert rc == 1 and len(errors(err)) == 1 and "the dataset has no node (0 x 0 matrix" in err[-1]


def test_second_training_stops_at_once_and_the_first_is_intact(work, tmp_path):
    model = tmp_path / "model"
    epochs = 60
    argv = [
        "train",
        "--data",
        work / "A",
        "--model_dir",
        model,
        "--dim",
        "4",
        "--epochs",
        epochs,
        "--no-progress",
    ]
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(PYTHONPATH=os.getcwd(), TF_CPP_MIN_LOG_LEVEL="3")
    first = subprocess.Popen(
        [sys.executable, "-m", "alx_trainer", *map(str, argv)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 300
    while (
        not (model / "checkpoints" / "1").exists()
        and first.poll() is None
        and time.time() < deadline
    ):
        time.sleep(0.1)
    lock = json.loads((model / "train.lock").read_text())
    assert lock["pid"] == first.pid and lock["host"] == socket.gethostname() and lock["started"]
    # paused (not ended) while the second one tries: on a quiet machine the first could finish first
    first.send_signal(signal.SIGSTOP)
    try:
        still_running = first.poll() is None
        rc, _, err = alx(*argv)
    finally:
        first.send_signal(signal.SIGCONT)
    out, first_err = first.communicate(timeout=600)
    assert rc == 1 and len(errors(err)) == 1
    assert f"{model} is being trained by pid {first.pid} on host {socket.gethostname()}" in err[-1]
    assert still_running, "the first training ended before it was paused: make it longer"
    assert first.returncode == 0, first_err[-3000:]
    records = [json.loads(line) for line in (model / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in records] == list(range(1, epochs + 1))
    assert json.loads((model / "config.json").read_text())["epochs"] == epochs
    assert not (model / "train.lock").exists()


def test_stale_lock_is_taken_over_with_a_warning(work, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    (model / "train.lock").write_text(
        json.dumps({"host": socket.gethostname(), "pid": dead.pid, "started": "x"})
    )
    rc, out, err = alx(
        "train",
        "--data",
        work / "A",
        "--model_dir",
        model,
        "--dim",
        "4",
        "--epochs",
        "1",
        "--no-progress",
        "--eval_every",
        "0",
    )
    assert rc == 0 and "trained 1 epoch(s)" in out
    assert [
        line
        for line in err
        if "WARNING" in line and f"took over a stale lock of pid {dead.pid}" in line
    ]
    assert not (model / "train.lock").exists()


def test_train_to_fewer_epochs_than_done_trains_nothing_and_keeps_config(work, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(work / "model", model)
    before = tree(model)
    rc, out, err = alx(
        "train",
        "--data",
        work / "A",
        "--model_dir",
        model,
        "--dim",
        "4",
        "--epochs",
        "1",
        "--reg",
        "0.5",
        "--no-progress",
    )
    assert rc == 0, err
    assert out.strip() == (
        f"nothing to train: {model} is at epoch 1 already (--epochs 1); it and its config.json "
        "are as they were"
    )
    assert tree(model) == before


def test_predict_checks_every_node_before_answering_any(work):
    model, data = work / "model", work / "A"
    rc, out, err = alx("predict", "--data", data, "--model_dir", model, "id:0", "id:40")
    assert rc == 1 and out == "" and len(err) == 1
    assert "node 'id:40': id 40 is outside the rows' 0..39" in err[0]
    rc, out, err = alx("predict", "--data", data, "--model_dir", model, "--links", "-1", "id:3")
    assert rc == 0 and "-1 (id_out_of_range)" in "".join(err)


def test_predict_and_neighbours_normalize_urls_as_the_pipeline(work):
    model, data = work / "model", work / "A"
    asked = ["http://n3.example/p", "HTTP://N3.Example:80/p#top"]
    _, plain, _ = alx(
        "predict", "--data", data, "--model_dir", model, "--k", "3", asked[0], check_rc=0
    )
    _, loose, _ = alx(
        "predict", "--data", data, "--model_dir", model, "--k", "3", asked[1], check_rc=0
    )
    assert plain.split("\n", 1)[1] == loose.split("\n", 1)[1] and plain.count("example/p") >= 3
    _, near, _ = alx(
        "predict",
        "--data",
        data,
        "--model_dir",
        model,
        "--neighbors",
        "--k",
        "2",
        asked[1],
        check_rc=0,
    )
    assert "nearest neighbours of" in near and near.count("example/p") >= 2
    rc, _, err = alx("predict", "--data", data, "--model_dir", model, "http://bad host/")
    assert (
        rc == 1 and len(err) == 1 and "is not a URL the dataset could hold (whitespace)" in err[0]
    )


def test_usage_errors_exit_2_and_debug_shows_the_traceback(work, tmp_path):
    rc, _, err = alx("train", "--data", work / "A", "--model_dir", tmp_path / "m", "--reg", "inf")
    assert rc == 2 and err == [
        "alx_trainer train: error: reg: must be a finite number >= 0, got inf"
    ]
    rc, _, err = alx("eval", "--data", work / "A", "--model_dir", tmp_path / "nowhere")
    assert rc == 1 and len(err) == 1 and "model directory not found" in err[0]
    rc, _, err = alx("eval", "--debug", "--data", work / "A", "--model_dir", tmp_path / "nowhere")
    assert rc == 1 and err[0].startswith("Traceback") and "model directory not found" in err[-1]


def test_url_list_naming_an_id_twice_counts_the_extra_line_once(tmp_path):
    (tmp_path / "e.txt").write_text("1 2\n2 3\n3 1\n1 3\n2 1\n3 2\n")
    (tmp_path / "u.txt").write_text(
        "1 http://a.example/\n2 http://b.example/\n3 http://c.example/\n"
        "3 http://d.example/\n2 http://b.example/\n"
    )
    stats = make_dataset(
        tmp_path / "out",
        "--edge_format",
        "pairs",
        "--input",
        tmp_path / "e.txt",
        "--urls",
        tmp_path / "u.txt",
        "--min_links",
        "1",
        "--test_fraction",
        "0",
        "--allow_empty",
    )
    # id 3 on two lines with two URLs, id 2 twice with the same one: two extra lines
    assert stats["counters"]["dropped_url_list.duplicate_id"] == 2
    names = sorted(dataset_reader.read_vocab(str(tmp_path / "out")).values())
    assert (
        names == ["http://a.example/", "http://b.example/", "http://d.example/"]
        and stats["edges"] == 6
    )


def test_lock_tells_live_reused_and_foreign_owners_apart(tmp_path):
    from alx_trainer import checkpoint

    model = str(tmp_path / "m")
    os.makedirs(model)
    me = checkpoint.acquire_lock(model)
    with pytest.raises(
        checkpoint.LockHeld, match=f"pid {os.getpid()} on host {socket.gethostname()}"
    ):
        checkpoint.acquire_lock(model)  # this very process holds it: alive
    lock = tmp_path / "m" / checkpoint.LOCK_FILE
    checkpoint.release_lock(model, me)
    assert not lock.exists()
    # our pid, another start: a reused pid, left by a killed run
    reused = dict(me, pid_start_ticks=me["pid_start_ticks"] + 1)
    lock.write_text(json.dumps(reused))
    me = checkpoint.acquire_lock(model)
    assert json.loads(lock.read_text())["pid_start_ticks"] == me["pid_start_ticks"]
    checkpoint.release_lock(model, me)
    dead = subprocess.Popen(["true"])
    dead.wait()
    lock.write_text(json.dumps({"host": "elsewhere", "pid": dead.pid}))
    # never guessed stale across hosts
    with pytest.raises(checkpoint.LockHeld, match="host elsewhere"):
        checkpoint.acquire_lock(model)
    checkpoint.release_lock(model, me)
    assert lock.exists()  # not ours: left alone


LOCK_WORKER = """
import sys, time
from alx_trainer import checkpoint
model = sys.argv[1]
for line in sys.stdin:
    if line.startswith("go"):
        start = float(line.split()[1])
        while time.time() < start:
            pass
        try:
            owner = checkpoint.acquire_lock(model)
        except checkpoint.LockHeld:
            owner = None
        print("won" if owner else "lost", flush=True)
    elif line.startswith("release"):
        if owner:
            checkpoint.release_lock(model, owner)
        print("released", flush=True)
"""


def test_of_processes_racing_to_take_over_a_stale_lock_one_wins(tmp_path):
    from alx_trainer import checkpoint

    model = tmp_path / "m"
    model.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = json.dumps({"host": socket.gethostname(), "pid": dead.pid, "started": "x"})
    env = dict(os.environ, PYTHONPATH=str(REPO))
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", LOCK_WORKER, str(model)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(3)
    ]
    try:
        for trial in range(40):
            (model / checkpoint.LOCK_FILE).write_text(stale)
            start = time.time() + 0.05
            for w in workers:
                w.stdin.write(f"go {start}\n")
                w.stdin.flush()
            results = [w.stdout.readline().strip() for w in workers]
            assert sorted(results) == ["lost", "lost", "won"], (trial, results)
            for w in workers:
                w.stdin.write("release\n")
                w.stdin.flush()
            assert [w.stdout.readline().strip() for w in workers] == ["released"] * 3
            assert not (model / checkpoint.LOCK_FILE).exists()
    finally:
        for w in workers:
            w.stdin.close()
            w.wait(timeout=60)


def test_missing_shards_are_named():
    files = [f"/d/train.tfr-{i:05d}-of-00004" for i in (0, 2)]
    assert layout.missing_shards(files) == (
        ["train.tfr-00001-of-00004", "train.tfr-00003-of-00004"],
        None,
    )
    assert layout.missing_shards(files + ["/d/train.tfr-00001-of-00003"])[1] == (
        "shard names disagree on the shard count (3, 4)"
    )
    assert layout.missing_shards([f"/d/train.tfr-{i:05d}-of-00002" for i in (0, 1)]) == ([], None)
