"""`benchmarks.profile`: every section at toy size on CPU in one run (device kernels of a warm epoch
and a top-K batch, `train` through the command line twice on one compile cache with its own phases
line, the trainer's phases and resident memory by mark, the accelerator path's proxies), the
trace reader on a GPU-shaped trace, and the host CPU share's resolution rule."""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys

import pytest

from benchmarks import profile
from benchmarks.core.paths import REPO
from benchmarks.core.profile_sections import dataset_dir, phases_of
from benchmarks.core.proxies import host_share
from benchmarks.core.speed_sizes import SIZES
from benchmarks.core.trace import device_kernels


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """One toy run of every section on CPU, as a user runs it: its report and stdout."""
    out = tmp_path_factory.mktemp("profile")
    flags = ["--device", "cpu", "--size", "toy", "--topk_cols", "5000", "--topk_dim", "8"]
    flags += ["--topk_rows", "32", "--k", "20", "--proxy_size", "2000,1000,20000"]
    flags += ["--proxy_dim", "8", "--out", str(out)]
    done = subprocess.run(
        [sys.executable, "-m", profile.MODULE, *flags],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
        env=dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=1"),
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads((out / "profile.json").read_text()), done.stdout, out


def test_toy_run_profiles_the_epoch_and_the_top_k_by_kernel(toy):
    report, stdout, _ = toy
    assert report["errors"] == {} and "cpu" in report["device"]
    train, topk = report["train"], report["topk"]
    assert train["epoch_s"] > 0 and train["kernels"] > 0 and train["top"]
    assert train["busy_s"] == pytest.approx(sum(r["seconds"] for r in train["top"]), rel=0.5)
    assert train["dim"] == 16 and train["matrix"] == [2_000, 500, 6_000]
    assert topk["batch_s"] > 0 and topk["rows"] == 32 and topk["kernels"] > 0
    assert "train: device time by kernel" in stdout and "topk: device time by kernel" in stdout


def test_cli_section_runs_train_twice_on_one_compile_cache_with_its_phases(toy):
    report, stdout, out = toy
    cli = report["cli"]
    assert len(cli["runs"]) == 2 and "toy" in cli["data"]
    # the toy's shape, d and epochs, not configs/gowalla.json's 1024 and 4
    config = json.loads((out / "cli_model_1" / "config.json").read_text())
    assert config["dim"] == 16 and config["epochs"] == 2
    stats = json.loads((out / "synthetic_data" / "stats.json").read_text())
    assert stats["num_rows"] == 2_000
    for run in cli["runs"]:
        assert len(run["epochs_s"]) == 2
        assert {"start", "imports", "init", "read", "plan", "pack", "epochs", "other"} <= set(
            run["phases"]
        )
        # the trainer's own start-up and `other` figures, as its phases line gives them
        for name in ("start", "imports", "other"):
            assert run[f"{name}_s"] == run["phases"][name]["s"] >= 0
        inside = sum(p["s"] for p in run["phases"].values())
        assert 0 < inside < run["wall_s"]
    # the second process finds every program in the cache: its first epoch compiles nothing new
    assert cli["second_over_first_first_epoch"] < 1
    assert "cli: the second run's first epoch is" in stdout


def test_phases_section_marks_the_trainers_phases_and_resident_memory(toy):
    report, stdout, _ = toy
    phases = report["phases"]
    marks = [m["mark"] for m in phases["marks"]]
    assert marks == ["tables and plan"] + [
        f"epoch {e} {side}" for e in (1, 2) for side in ("row", "col")
    ] + ["end"]
    first, last = phases["marks"][0], phases["marks"][-1]
    # the trainer's own phases: set-up ones before the first epoch, the epochs' after
    assert {"init", "read", "plan", "pack"} <= set(first["trainer_phases"])
    assert "epochs" not in first["trainer_phases"]
    assert "epochs" in last["trainer_phases"] and len(phases["epochs_s"]) == 2
    for m in phases["marks"]:
        # the kernel's high-water mark (VmHWM) lags its resident count by a few pages at most
        assert 0 < m["rss_gib"] <= m["peak_since_gib"] <= phases["peak_host_gib"] * 1.01
    seconds = [m["seconds"] for m in phases["marks"]]
    assert seconds == sorted(seconds)
    assert "phases: tables and plan: RSS" in stdout


def test_proxies_section_counts_calls_copies_and_a_possible_host_share(toy):
    report, _, _ = toy
    proxies = report["proxies"]
    assert (proxies["rows"], proxies["cols"], proxies["devices"]) == (2_000, 1_000, 1)
    epochs = proxies["epochs"]
    assert [e["epoch"] for e in epochs] == [2, 3, 4]
    # resident batches on one device: the whole epoch is one call
    assert epochs[0]["calls_per_epoch"] == 1, epochs[0]
    cores = os.cpu_count()
    for line in epochs[1:]:
        assert 0 < line["window_s"] <= line["seconds"] * 1.5 + 0.001, line
        assert line["host_cpu_s"] <= cores * line["window_s"] + line["host_cpu_resolution_s"]
        share = line["host_cpu_share"]
        assert share is None or 0 <= share <= cores, line
    # resident batches: nothing copied to the devices after the first epoch
    assert all(e["h2d_bytes"] == 0 for e in epochs)
    cost = proxies["cost"]
    assert cost["xla_bytes_ratio"] == pytest.approx(
        cost["xla_bytes_per_epoch"] / cost["counted_bytes_per_epoch"], rel=1e-3
    )


def test_share_below_resolution_is_not_given():
    # three threads' 10 ms ticks over a 4 ms epoch
    tick = host_share(0.004, 0.042, 0.03)
    assert tick["host_cpu_share"] is None and "below resolution" in tick["host_cpu_share_note"]
    fine = host_share(0.5, 0.02, 1e-6)
    assert fine["host_cpu_share"] == 0.04 and "host_cpu_share_note" not in fine


def test_synthetic_dataset_of_another_shape_is_rewritten(tmp_path):
    """A cached synthetic dataset is reused only at the wanted shape (its stats.json)."""
    data = tmp_path / "synthetic_data"
    data.mkdir()
    stale = {"num_rows": 7, "num_cols": 5, "edges": 9, "config": {"seed": 0}}
    (data / "stats.json").write_text(json.dumps(stale))
    args = argparse.Namespace(data="", size="toy")
    assert dataset_dir(args, tmp_path) == (str(data), True)
    stats = json.loads((data / "stats.json").read_text())
    toy = SIZES["toy"]
    assert (stats["num_rows"], stats["num_cols"], stats["edges"]) == (toy.rows, toy.cols, toy.nnz)
    # at the wanted shape it is kept as it is
    written = (data / "stats.json").stat().st_mtime_ns
    assert dataset_dir(args, tmp_path) == (str(data), True)
    assert (data / "stats.json").stat().st_mtime_ns == written


def test_phases_line_is_read_whole_and_the_last_one_counts():
    log = (
        "INFO phases: init 9.00 s\n"
        "INFO phases: start 0.41 s (0.38 CPU s), imports 2.05 s (1.90 CPU s), init 1.21 s (2.17 "
        "CPU s), read 0.19 s (0.20 CPU s), compile 0.47 s, epochs 0.27 s (0.30 CPU s), other "
        "0.12 s\n"
    )
    assert phases_of(log) == {
        "start": {"s": 0.41, "cpu_s": 0.38},
        "imports": {"s": 2.05, "cpu_s": 1.90},
        "init": {"s": 1.21, "cpu_s": 2.17},
        "read": {"s": 0.19, "cpu_s": 0.20},
        "compile": {"s": 0.47, "cpu_s": None},
        "epochs": {"s": 0.27, "cpu_s": 0.30},
        "other": {"s": 0.12, "cpu_s": None},
    }
    assert phases_of("no phases here") == {}


@pytest.mark.parametrize(
    "flags,error",
    [
        (["--sections", "train,gemm"], "--sections: unknown 'gemm'"),
        (["--sections", "pallas"], "--sections: unknown 'pallas'"),
        (["--proxy_size", "10,10"], "--proxy_size: expected ROWS,COLS,NNZ"),
        (["--proxy_epochs", "2"], "--proxy_epochs: at least 3"),
    ],
)
def test_a_bad_flag_is_one_line(capsys, flags, error):
    with pytest.raises(SystemExit):
        profile.parse_args(flags)
    assert error in capsys.readouterr().err


def test_device_kernels_reads_a_gpu_trace_by_stream(tmp_path):
    """A GPU trace repeats each kernel on its 'XLA Ops' line: only the streams' events count."""
    meta = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/host:CPU"}},
        {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "/device:GPU:0"}},
        {"ph": "M", "name": "thread_name", "pid": 2, "tid": 7, "args": {"name": "Stream #7"}},
        {"ph": "M", "name": "thread_name", "pid": 2, "tid": 8, "args": {"name": "XLA Ops"}},
    ]

    def kernel(name: str, tid: int, dur: float) -> dict:
        return {"ph": "X", "pid": 2, "tid": tid, "name": name, "dur": dur}

    events = meta + [
        kernel("loop_gather_fusion", 7, 300.0),
        kernel("loop_gather_fusion", 7, 100.0),
        kernel("sm90_gemm", 7, 50.0),
        kernel("loop_gather_fusion", 8, 400.0),
        {"ph": "X", "pid": 1, "tid": 1, "name": "ExecuteHelper", "dur": 9000.0},
    ]
    folder = tmp_path / "plugins" / "profile" / "run"
    folder.mkdir(parents=True)
    with gzip.open(folder / "host.trace.json.gz", "wt") as f:
        json.dump({"traceEvents": events}, f)
    got = device_kernels(str(tmp_path), top=5)
    assert got["kernels"] == 3 and got["busy_s"] == pytest.approx(450e-6)
    assert got["top"] == [
        {"name": "loop_gather_fusion", "count": 2, "seconds": pytest.approx(400e-6)},
        {"name": "sm90_gemm", "count": 1, "seconds": pytest.approx(50e-6)},
    ]
