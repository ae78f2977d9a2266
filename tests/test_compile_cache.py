"""Compile once: the persistent compilation cache across processes, and where it may live.

Each command runs in a fresh Python process that counts, with its own `jax.monitoring` listeners
(not the trainer's), XLA compile requests and persistent-cache hits; the cache directory's entries
are counted too (every compiled program writes one: no minimum compile time or size).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import numpy as np
import pytest

from alx_trainer import compile_cache
from alx_trainer.config import ConfigError

import reference_ials as ref
from conftest import REPO

COUNTING_RUN = """
import json, sys
import jax
seen = {"requests": 0, "hits": 0, "traced": []}
def duration(event, secs, **kw):
    seen["requests"] += event == "/jax/core/compile/backend_compile_duration"
    if event == "/jax/core/compile/jaxpr_trace_duration":
        seen["traced"].append(kw.get("fun_name"))
def event(event, **kw):
    seen["hits"] += event == "/jax/compilation_cache/cache_hits"
jax.monitoring.register_event_duration_secs_listener(duration)
jax.monitoring.register_event_listener(event)
from alx_trainer.__main__ import main
rc = main(sys.argv[1:])
print("COUNTS " + json.dumps(dict(seen, rc=rc)))
"""


def _run(argv: list[str], cache_home: str) -> dict:
    env = dict(
        os.environ,
        XLA_FLAGS="--xla_force_host_platform_device_count=1",
        JAX_PLATFORMS="cpu",
        XDG_CACHE_HOME=cache_home,
        PYTHONPATH=str(REPO),
    )
    done = subprocess.run(
        [sys.executable, "-c", COUNTING_RUN, *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("COUNTS ")]
    assert lines, done.stdout[-2000:] + done.stderr[-3000:]
    counts = json.loads(lines[-1].split(" ", 1)[1])
    assert counts["rc"] == 0, done.stderr[-3000:]
    return counts


def _entries(path: str) -> set[str]:
    return {name for _, _, files in os.walk(path) for name in files}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> str:
    rng = np.random.default_rng(3)
    rows = ref.random_rows(0, 40, 50, max_len=9)
    test = {
        r: (rows[r][: len(rows[r]) // 2 + 1], sorted(rng.choice(50, 3, replace=False).tolist()))
        for r in range(10)
    }
    return ref.write_dataset(str(tmp_path_factory.mktemp("cc") / "data"), rows, 40, 50, test=test)


def test_a_second_process_on_the_same_shapes_compiles_nothing(data, tmp_path):
    home = str(tmp_path / "xdg")
    cache = os.path.join(home, "alx", "jax")  # 'auto': the user's own cache directory
    train = [
        "train",
        "--data",
        data,
        "--dim",
        "8",
        "--epochs",
        "2",
        "--no-progress",
        "--piece_len",
        "4",
        "--batch_pieces",
        "8",
    ]
    first = _run([*train, "--model_dir", str(tmp_path / "m1")], home)
    assert first["requests"] > 0 and first["hits"] == 0, first
    written = _entries(cache)
    assert len(written) >= first["requests"] - first["hits"], (first, written)
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700

    # the kernels' executables kept whole beside JAX's entries
    assert os.listdir(os.path.join(cache, compile_cache.KEPT_SUBDIR)), written
    assert "_epoch" in first["traced"], first

    second = _run([*train, "--model_dir", str(tmp_path / "m2")], home)
    # every program loaded; the kernels' not even traced
    assert second["hits"] == second["requests"], second
    assert not {"_epoch", "_gramian_local", "_step"} & set(second["traced"]), second
    assert _entries(cache) == written  # nothing new compiled, so nothing new written
    metrics = [json.loads(line) for line in open(tmp_path / "m2" / "metrics.jsonl")]
    assert [m["compiles"] for m in metrics] == [0, 0]
    first_metrics = [json.loads(line) for line in open(tmp_path / "m1" / "metrics.jsonl")]
    assert first_metrics[0]["compiles"] > 0 and first_metrics[0]["compile_seconds"] > 0
    # the same programs: the same losses, bit for bit
    assert [m["loss"] for m in metrics] == [m["loss"] for m in first_metrics]

    # a trained model's eval and export in new processes: programs from the cache, once warm
    for command in (
        ["eval", "--data", data, "--model_dir", str(tmp_path / "m1")],
        ["export", "--model_dir", str(tmp_path / "m1"), "--output", str(tmp_path / "out")],
    ):
        _run(command, home)
        again = _run(command, home)
        assert again["hits"] == again["requests"], (command, again)


def test_off_uses_no_directory(data, tmp_path):
    home = str(tmp_path / "xdg")
    counts = _run(
        [
            "train",
            "--data",
            data,
            "--model_dir",
            str(tmp_path / "m"),
            "--dim",
            "4",
            "--epochs",
            "1",
            "--eval_every",
            "0",
            "--no-progress",
            "--compile_cache",
            "off",
        ],
        home,
    )
    assert counts["requests"] > 0 and counts["hits"] == 0
    assert not os.path.exists(home)


def test_a_directory_others_can_write_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(ConfigError, match="writable by others"):
        compile_cache.cache_dir(str(shared))
    inside = tmp_path / "open"
    inside.mkdir()
    os.chmod(inside, 0o777)  # a directory under it could be renamed away and replaced
    with pytest.raises(ConfigError, match="others can write"):
        compile_cache.cache_dir(str(inside / "cache"))
    mine = compile_cache.cache_dir(str(tmp_path / "mine" / "cache"))
    assert stat.S_IMODE(os.stat(mine).st_mode) == 0o700


def test_the_command_line_refuses_it_in_one_line(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "alx_trainer",
            "export",
            "--model_dir",
            str(tmp_path / "m"),
            "--output",
            str(tmp_path / "o"),
            "--compile_cache",
            str(shared),
        ],
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().count("\n") == 0 and "writable by others" in done.stderr, done.stderr


KEPT_RUN = """
import json, sys
import jax, jax.numpy as jnp
traced = []
def duration(event, secs, **kw):
    if event == "/jax/core/compile/jaxpr_trace_duration":
        traced.append(kw.get("fun_name"))
jax.monitoring.register_event_duration_secs_listener(duration)
from alx_trainer import compile_cache
compile_cache.enable(sys.argv[1])
# the trainer's code as of a release
compile_cache._source_hash = lambda: sys.argv[2]

@compile_cache.kept_program
def make_poly(power: int):
    def poly(x, y):
        return (x**power + y).sum(axis=0), y * 2
    return jax.jit(poly, donate_argnums=(1,))

x = jnp.arange(12.0).reshape(4, 3)
total, doubled = make_poly(3)(x, jnp.ones(3))
print("OUT " + json.dumps({"total": total.tolist(), "doubled": doubled.tolist(), "traced": traced}))
"""


def _kept_run(cache: str, code: str = "v1") -> dict:
    done = subprocess.run(
        [sys.executable, "-c", KEPT_RUN, cache, code],
        env=dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("OUT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    return json.loads(lines[-1].split(" ", 1)[1])


def test_a_kept_program_made_from_jax_cache_runs_in_a_new_process(tmp_path):
    """XLA:CPU serializes an executable loaded from JAX's cache without its code: a kept program
    written by a run that JAX's cache served must still run when loaded (compiled afresh)."""
    cache = str(tmp_path / "cache")
    x = np.arange(12.0).reshape(4, 3)
    want = {"total": (x**3 + 1).sum(axis=0).tolist(), "doubled": [2.0] * 3}
    kept = os.path.join(cache, compile_cache.KEPT_SUBDIR)

    first = _kept_run(cache)
    assert {k: first[k] for k in want} == want and "poly" in first["traced"], first
    assert len(os.listdir(kept)) == 1
    # JAX's cache holds the program; the kept one gone
    for name in os.listdir(kept):
        os.unlink(os.path.join(kept, name))
    served = _kept_run(cache)
    assert {k: served[k] for k in want} == want and len(os.listdir(kept)) == 1, served
    loaded = _kept_run(cache)
    assert {k: loaded[k] for k in want} == want and "poly" not in loaded["traced"], loaded
    # removed once more: JAX's cache now serves the salted compile too; a random salt keeps it
    for name in os.listdir(kept):
        os.unlink(os.path.join(kept, name))
    again = _kept_run(cache)
    assert {k: again[k] for k in want} == want and len(os.listdir(kept)) == 1, again
    assert "poly" not in _kept_run(cache)["traced"]

    # other trainer code making the same program (an upgrade): JAX's cache serves its text, so it
    # is compiled afresh under its own key and kept; the next run loads it
    before = set(os.listdir(kept))
    upgraded = _kept_run(cache, "v2")
    assert {k: upgraded[k] for k in want} == want and len(os.listdir(kept)) == 2, upgraded
    assert "poly" not in _kept_run(cache, "v2")["traced"]
    for name in set(os.listdir(kept)) - before:
        os.unlink(os.path.join(kept, name))

    # a torn kept file: not loaded; traced and compiled again, the same result
    (name,) = os.listdir(kept)
    with open(os.path.join(kept, name), "r+b") as f:
        f.truncate(100)
    torn = _kept_run(cache)
    assert {k: torn[k] for k in want} == want and "poly" in torn["traced"], torn


def test_kept_programs_are_keyed_by_parameters_devices_and_code(tmp_path, monkeypatch):
    """In one process: the same factory and parameters load what was kept (no compile request);
    other parameters, another mesh's devices, another JAX setting or other trainer code compile
    and keep their own; a parameter without a faithful text is never kept."""
    import jax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    folder = tmp_path / "kept"
    monkeypatch.setattr(compile_cache, "_kept_dir", str(folder))

    def make_scaled(scale: float, mesh: Mesh):
        return jax.jit(
            lambda t: jax.lax.with_sharding_constraint(t * scale, NamedSharding(mesh, P("d")))
        )

    kept = compile_cache.kept_program(make_scaled)
    devices = np.array(jax.devices())
    meshes = [Mesh(devices[:4], ("d",)), Mesh(devices[4:], ("d",))]
    table = np.arange(16, dtype=np.float32).reshape(8, 2)

    def call(scale: float, mesh: Mesh) -> int:
        kept.cache_clear()
        before = compile_cache.counts().requests
        arg = jax.device_put(table, NamedSharding(mesh, P("d")))
        np.testing.assert_array_equal(np.asarray(kept(scale, mesh)(arg)), table * scale)
        return compile_cache.counts().requests - before

    assert call(2.0, meshes[0]) >= 1 and len(os.listdir(folder)) == 1
    assert call(2.0, meshes[0]) == 0 and len(os.listdir(folder)) == 1
    assert call(3.0, meshes[0]) >= 1 and len(os.listdir(folder)) == 2
    assert call(2.0, meshes[1]) >= 1 and len(os.listdir(folder)) == 3
    # a JAX setting changed
    jax.config.update("jax_default_matmul_precision", "highest")
    try:
        assert call(2.0, meshes[0]) >= 1 and len(os.listdir(folder)) == 4
    finally:
        jax.config.update("jax_default_matmul_precision", None)
    assert call(2.0, meshes[0]) == 0
    monkeypatch.setattr(compile_cache, "_source_hash", lambda: "other code")
    assert call(2.0, meshes[0]) >= 1 and len(os.listdir(folder)) == 5

    class Opaque:
        pass

    opaque = compile_cache.kept_program(lambda what: jax.jit(lambda t: t + 1))
    opaque(Opaque())(jax.numpy.ones(2))
    assert len(os.listdir(folder)) == 5
