"""`python -m alx_trainer train/eval/predict/export/sweep` in a process where importing TensorFlow,
TFDS or Beam fails (a meta-path blocker), end to end on a dataset the pipeline made: the trainer
needs none of them, and prints none of their start-up lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from webgraph_contract import dataset_reader, fileio

from pipeline_data import gowalla_dataset, hollins_dataset

BLOCKED = ("tensorflow", "tensorflow_datasets", "apache_beam")
# Runs `python -m alx_trainer ARGS` as if those packages were not installed: their sys.modules
# entries
# are None (`import` fails and `importlib.util.find_spec` answers None, as for an absent package;
# etils asks that before choosing a path backend), and a meta-path finder refuses any of their
# modules should an entry be removed.
LAUNCHER = f"""
import runpy, sys

class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {BLOCKED!r}:
            raise ImportError(f"{{name}} is blocked in this test")
        return None

sys.meta_path.insert(0, Blocker())
for name in {BLOCKED!r}:
    sys.modules[name] = None
sys.argv[0] = "alx_trainer"
runpy.run_module("alx_trainer", run_name="__main__", alter_sys=True)
"""


def alx(*args: str, status: int = 0) -> subprocess.CompletedProcess:
    # GLIBC_TUNABLES set: `train` does not restart itself with huge pages (a child without the
    # blocker)
    # as a user starts it: not with the TF_CPP_MIN_LOG_LEVEL an in-process debug test leaves
    inherited = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env = dict(
        inherited,
        JAX_PLATFORMS="cpu",
        XLA_FLAGS="--xla_force_host_platform_device_count=8",
        GLIBC_TUNABLES=os.environ.get("GLIBC_TUNABLES", ""),
    )
    done = subprocess.run(
        [sys.executable, "-c", LAUNCHER, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == status, (
        f"alx_trainer {args[0]} exited {done.returncode}:\n{done.stderr[-3000:]}"
    )
    for chatter in ("cuda drivers", "TF_ENABLE_ONEDNN_OPTS", "absl::InitializeLog", "oneDNN"):
        assert chatter not in done.stderr, done.stderr[-2000:]
    return done


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """The real hollins.edu crawl (with its URLs) and the Gowalla excerpt with validation splits."""
    root = tmp_path_factory.mktemp("no_tf")
    hollins_dataset(root / "hollins", test_fraction=0.1, num_shards=2)
    gowalla_dataset(root / "gowalla", num_shards=1, validation_fraction=0.25)
    return root, str(root / "hollins"), str(root / "gowalla")


def test_blocker_refuses_the_imports():
    def probe(statement: str) -> subprocess.CompletedProcess:
        code = LAUNCHER.replace(
            'runpy.run_module("alx_trainer", run_name="__main__", alter_sys=True)', statement
        )
        return subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
        )

    done = probe("import tensorflow")
    assert done.returncode == 1 and "ModuleNotFoundError" in done.stderr, done.stderr
    done = probe("del sys.modules['apache_beam']; import apache_beam.io")
    assert done.returncode == 1 and "apache_beam is blocked in this test" in done.stderr, (
        done.stderr
    )
    done = probe("import importlib.util; print(importlib.util.find_spec('tensorflow_datasets'))")
    assert done.returncode == 0 and done.stdout.strip() == "None", done.stderr


def test_every_command_runs_without_tensorflow_tfds_or_beam(datasets):
    root, data, gowalla = datasets
    model = str(root / "model")
    alx(
        "train",
        "--data",
        data,
        "--model_dir",
        model,
        "--dim",
        "8",
        "--epochs",
        "2",
        "--no-progress",
        "--eval_k",
        "5",
        "--ndcg_k",
        "5",
    )
    metrics = [json.loads(line) for line in open(os.path.join(model, "metrics.jsonl"))]
    assert [m["epoch"] for m in metrics] == [1, 2] and 0 <= metrics[-1]["recall@5"] <= 1

    out = alx("eval", "--data", data, "--model_dir", model, "--k", "5", "--ndcg_k", "5").stdout
    assert "recall@5" in out and "popularity" in out

    vocab = dataset_reader.read_vocab(data)
    url = vocab[dataset_reader.read_split(data, "train")[0][0]]
    out = alx("predict", "--data", data, "--model_dir", model, url, "--k", "3").stdout
    assert f"predicted outlinks of {url}" in out and len(out.strip().splitlines()) == 4

    export = root / "export"
    written = alx(
        "export", "--model_dir", model, "--data", data, "--output", str(export)
    ).stdout.split()
    assert os.path.join(str(export), "col_embeddings.tfr-00000-of-00001") in written
    tables = np.load(export / "embeddings.npz")
    first = fileio.read_records(str(export / "col_embeddings.tfr-00000-of-00001"))
    assert sum(1 for _ in first) == len(tables["col_table"])

    sweep = root / "sweep"
    out = alx(
        "sweep",
        "--out_dir",
        str(sweep),
        "--data",
        gowalla,
        "--dims",
        "4",
        "--lambdas",
        "0.1",
        "--alphas",
        "0.1",
        "--metric",
        "recall_gt@5",
        "--epochs",
        "1",
        "--no-progress",
        "--eval_k",
        "5",
        "--ndcg_k",
        "5",
    ).stdout
    assert (sweep / "best_config.json").exists() and "wrote" in out


def test_a_tfds_name_without_tfds_names_the_extra(tmp_path):
    done = alx(
        "train", "--data", "web_graph/de-dense", "--model_dir", str(tmp_path / "m"), status=1
    )
    assert done.stderr.strip().splitlines() == [
        "alx_trainer train: error: ImportError: --data web_graph/de-dense is a TFDS name, which "
        "needs TensorFlow "
        "Datasets: pip install 'webgraph-alx[tfds]' (or give a dataset directory) (--debug or "
        "WEBGRAPH_DEBUG=1 shows the "
        "traceback)"
    ]
