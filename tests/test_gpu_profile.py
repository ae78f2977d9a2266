"""The profiling run for the GPU machine (`benchmarks.gpu_profile`) at toy sizes on CPU, and its
trace reader on a trace laid out as a GPU's."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest

from benchmarks import gpu_profile
from benchmarks.core.trace import device_kernels


def test_toy_run_profiles_every_section(tmp_path, capsys):
    code = gpu_profile.main(
        ["--size", "toy", "--topk_cols", "5000", "--topk_dim", "8", "--topk_rows", "32"]
        + ["--k", "20", "--sections", "train,topk,pallas", "--out", str(tmp_path)]
    )
    report = json.loads((tmp_path / "profile.json").read_text())
    assert code == 0 and report["errors"] == {}
    train, topk, pallas = report["train"], report["topk"], report["pallas"]
    assert train["epoch_s"] > 0 and train["kernels"] > 0 and train["top"]
    assert train["busy_s"] == pytest.approx(sum(r["seconds"] for r in train["top"]), rel=0.5)
    assert topk["batch_s"] > 0 and topk["rows"] == 32 and topk["kernels"] > 0
    assert set(pallas) == {"d64_float32", "d128_bfloat16"}
    assert all(r["finite"] for r in pallas.values())
    out = capsys.readouterr().out
    assert "train: device time by kernel" in out and "pallas d64_float32: first call" in out


def test_cache_section_runs_train_twice_on_one_compile_cache(tmp_path, capsys):
    data = tmp_path / "data"
    made = subprocess.run(
        [sys.executable, "-m", "webgraph_contract.synthetic_matrix", "--out", str(data)]
        + ["--rows", "600", "--cols", "400", "--nnz", "5000", "--shards", "1"],
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr
    flags = "--dim 8 --epochs 2 --eval_every 0"
    code = gpu_profile.main(
        ["--sections", "cache", "--cache_data", str(data), "--cache_flags", flags]
        + ["--out", str(tmp_path / "out")]
    )
    cache = json.loads((tmp_path / "out" / "profile.json").read_text())["cache"]
    assert code == 0 and len(cache["runs"]) == 2
    assert all(len(run["epochs_s"]) == 2 for run in cache["runs"])
    # the second process finds every program in the cache: its first epoch compiles nothing new
    assert cache["second_over_first_first_epoch"] < 1
    assert "cache: the second run's first epoch is" in capsys.readouterr().out


def test_a_bad_section_is_one_line(capsys):
    with pytest.raises(SystemExit):
        gpu_profile.parse_args(["--sections", "train,gemm", "--out", "x"])
    assert "--sections: unknown 'gemm'" in capsys.readouterr().err


def test_device_kernels_reads_a_gpu_trace_by_stream(tmp_path):
    """A GPU trace repeats each kernel on its 'XLA Ops' line: only the streams' events count."""
    meta = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/host:CPU"}},
        {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "/device:GPU:0"}},
        {"ph": "M", "name": "thread_name", "pid": 2, "tid": 7, "args": {"name": "Stream #7"}},
        {"ph": "M", "name": "thread_name", "pid": 2, "tid": 8, "args": {"name": "XLA Ops"}},
    ]
    kernel = lambda name, tid, dur: {"ph": "X", "pid": 2, "tid": tid, "name": name, "dur": dur}
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


def test_toy_size_shrinks_the_cache_section(tmp_path, capsys):
    code = gpu_profile.main(["--size", "toy", "--sections", "cache", "--out", str(tmp_path)])
    cache = json.loads((tmp_path / "profile.json").read_text())["cache"]
    assert code == 0 and len(cache["runs"]) == 2 and "toy" in cache["data"]
    config = json.loads((tmp_path / "cache_model_1" / "config.json").read_text())
    assert config["dim"] == 16 and config["epochs"] == 2  # not configs/gowalla.json's 1024 and 4
    stats = json.loads((tmp_path / "cache_data" / "stats.json").read_text())
    assert stats["num_rows"] == 2_000
