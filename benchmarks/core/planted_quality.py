"""Quality against a known optimum: ours beside the oracle and popularity on a planted graph.

    python -m benchmarks.core.planted_quality --scale 0.01            # on the host's cores
    python -m benchmarks.core.planted_quality --scale 1 --on device --config FILE   # on a GPU

The planted graph (`webgraph_contract.planted`: communities of power-law sizes, links inside the
community by its popularity, the others to globally popular pages, every link probability known)
is drawn and written as a dataset directory through the contract, then ours runs as a user runs
it, two commands, `python -m alx_trainer train --data DIR` (any further arguments go to it) and
`python -m alx_trainer eval`, each timed with its peak host memory. Beside ours' Recall@20/50 the
run prints the oracle's (each test row ranked by the true link probabilities, its fold-in links
and itself excluded, `planted.oracle_top_k`) and the popularity baseline's (from `eval`), all by
the project's recall (`alx_trainer.evaluation.metrics`), and ours / oracle at Recall@50. A run
whose `eval` does not rank every test row says so in its headline (no partial figure as the
result). The figures also go to `--out` as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Sequence

from alx_trainer import loading
from alx_trainer.evaluation import metrics
from benchmarks.core import children
from webgraph_contract import planted, stats_json

KS = (20, 50)
GIB = 2.0**30
# no evaluation or loss inside `train`: `eval` is timed apart
TRAIN_DEFAULTS = (
    "--eval_every",
    "0",
    "--train_loss_every",
    "0",
    "--checkpoint_every",
    "0",
    "--no-progress",
)


def parse_args(argv: Sequence[str] | None) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.core.planted_quality", description=__doc__.split("\n")[0]
    )
    p.add_argument("--scale", type=float, default=0.01, help="1: the de-sparse size (19.7M pages)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--on", choices=("host", "device"), default="host", help="where links are drawn")
    p.add_argument("--work", default="", help="folder of the dataset and model (default: temp)")
    p.add_argument("--shards", type=int, default=0, help="shards per split (0: by size)")
    p.add_argument("--workers", type=int, default=0, help="writing processes (0: a core each)")
    p.add_argument("--reuse", action="store_true", help="keep a dataset already in --work")
    p.add_argument("--out", default="", help="also write the figures to this JSON file")
    p.add_argument(
        "--gpu_path_memory",
        action="store_true",
        help="also run train and eval as on a GPU (the accelerator path, resident batches, on one "
        "CPU device) and report their host memory outside the device buffers and the device peak",
    )
    args, train_args = p.parse_known_args(argv)
    if args.scale <= 0 or args.shards < 0 or args.workers < 0:
        p.error("--scale must be positive, --shards and --workers >= 0")
    return args, train_args


def write_data(args: argparse.Namespace, data: str) -> dict:
    """Draw the planted graph and write it to `data`, in a child process (on a device, its memory
    is given back before `train`): `python -m webgraph_contract.planted --json`'s figures."""
    argv = ["--out", data, "--scale", str(args.scale), "--seed", str(args.seed), "--on", args.on]
    argv += ["--shards", str(args.shards), "--workers", str(args.workers), "--json"]
    cmd = [sys.executable, "-m", "webgraph_contract.planted", *argv]
    try:
        done = children.run_child(cmd)
    except children.ChildError as e:
        raise SystemExit(f"writing the planted dataset failed: {e}") from None
    return json.loads(done.stdout.strip().splitlines()[-1])


# `train` as a GPU runs it, on one CPU device: the accelerator path with its batches on the device
GPU_PATH = ("--accelerator", "on", "--resident_batches", "on")


def command(name: str, argv: list[str], log: str, sampled: str = "") -> dict:
    """Run `python -m alx_trainer ARGV` as a child (its stdout and stderr to `log`); its wall time
    and peak RSS (`children.run_child`: the child's own, not this process's high-water mark). The
    log holds its stderr, then its stdout. With `sampled` (a JSON file), run through
    `device_host_memory`: its figures as `NAME_gpu_path_*`."""
    launcher = ["benchmarks.core.device_host_memory", sampled] if sampled else []
    cmd = [sys.executable, "-m", *launcher, "alx_trainer", *argv]
    child = children.run_child(cmd, log=log, check=False)
    with open(log, "a") as f:
        f.write(child.stdout)
    if child.returncode != 0:
        with open(log) as f:
            tail = f.read()[-3000:]
        raise SystemExit(f"{name} failed (exit {child.returncode}); the end of {log}:\n{tail}")
    if not sampled:
        return {f"{name}_s": child.wall_s, f"{name}_peak_host_gib": child.peak_gib}
    with open(sampled) as f:
        got = json.load(f)
    return {
        f"{name}_gpu_path_s": child.wall_s,
        f"{name}_gpu_path_peak_host_gib": child.peak_gib,
        f"{name}_gpu_path_host_gib": got["host_outside_device_peak_bytes"] / GIB,
        f"{name}_gpu_path_device_gib": got["device_peak_bytes"] / GIB,
        f"{name}_gpu_path_host_peak_s": got["host_peak_s"],
        f"{name}_gpu_path_host_peak_after": got["host_peak_after_phase"],
        f"{name}_gpu_path_samples": got["samples"],
        f"{name}_gpu_path_rss_gib": got["rss_peak_bytes"] / GIB,
    }


def _too_few(samples: int, wall_s: float) -> str:
    """A warning when the sampler read fewer than one sample a second (its peaks say little)."""
    if samples >= max(10.0, wall_s):
        return ""
    return f"; UNRELIABLE: {samples} sample(s) in {wall_s:.0f} s"


def gpu_path_memory(data: str, work: str, train_args: list[str], scoring: list[str]) -> dict:
    """`train` (on the accelerator path, `GPU_PATH`, with the run's flags) and `eval` of its model
    run again through `device_host_memory`: what a GPU run's host and device would hold."""
    model = os.path.join(work, "model_gpu_path")
    shutil.rmtree(model, ignore_errors=True)
    train = ["train", "--data", data, "--model_dir", model, *TRAIN_DEFAULTS, *GPU_PATH]
    fig = {}
    for name, argv in (
        ("train", [*train, *train_args]),
        ("eval", [*scoring, "--model_dir", model, "--output", os.path.join(work, "eval_gpu.json")]),
    ):
        log, sampled = (os.path.join(work, f"{name}_gpu_path{s}") for s in (".log", ".json"))
        fig.update(command(name, argv, log, sampled))
    return fig


def oracle_figures(data: str) -> dict:
    """The oracle's Recall@K on the dataset's test rows, and `planted.popularity_top_k`'s (a check
    of `eval`'s popularity baseline, written to --out)."""
    params = planted.params_of(stats_json.read_stats(data))
    s = planted.structure(params)
    rows = loading.eval_data(data)
    test, gts, popularity = rows.known, rows.gt.lists(), rows.popularity
    t = time.perf_counter()
    top = planted.oracle_top_k(s, test, max(KS))
    oracle_s = time.perf_counter() - t
    pop = planted.popularity_top_k(popularity, test, max(KS))
    out = {"oracle_s": oracle_s}
    for name, ids in (("oracle", top), ("popularity_planted", pop)):
        scores = metrics.ranking_metrics(ids, gts, KS, None)
        out.update({f"{name}/recall@{k}": scores[f"recall@{k}"] for k in KS})
    return out


def report(fig: dict) -> str:
    """The run in a few lines: sizes (and whether every test row was ranked), Recall@K of ours,
    the oracle and popularity, ours / oracle, the seconds and peaks."""
    rows = [
        ("ours", "recall@"),
        ("oracle", "oracle/recall@"),
        ("popularity", "popularity/recall@"),
    ]
    done = fig.get("num_rows", 0) == fig["test_rows"]
    head = (
        f"planted graph at scale {fig['scale']}: {fig['pages']:,} pages, {fig['links']:,} links "
        f"({fig['training_links']:,} training), {fig['test_rows']:,} test rows"
    )
    if not done:
        head += f"; INCOMPLETE: eval ranked {int(fig.get('num_rows', 0)):,} of them"
    lines = [head, f"{'':12}" + "".join(f"{f'Recall@{k}':>12}" for k in KS)]
    for label, key in rows:
        lines.append(f"{label:12}" + "".join(f"{fig[f'{key}{k}']:>12.4f}" for k in KS))
    ratio = fig["ours_over_oracle@50"]
    lines.append(f"ours / oracle at Recall@50: {ratio:.3f}" + ("" if done else " (incomplete)"))
    gen = f"links_{fig['on']}_s"
    made = (
        f"structure {fig['structure_s']:.1f}, links ({fig['on']}) {fig[gen]:.1f}, writing "
        f"{fig['write_s']:.1f} ({fig['shards']} shards)"
        if gen in fig
        else "dataset reused"
    )
    lines.append(
        f"seconds: {made}, train {fig['train_s']:.1f} (peak host {fig['train_peak_host_gib']:.2f} "
        f"GiB), eval {fig['eval_s']:.1f} (peak host {fig['eval_peak_host_gib']:.2f} GiB), oracle "
        f"{fig['oracle_s']:.1f}"
    )
    per_link = GIB / fig["training_links"]
    lines.append(
        f"bytes per training link, peak RSS: train {fig['train_peak_host_gib'] * per_link:.1f}, "
        f"eval {fig['eval_peak_host_gib'] * per_link:.1f}"
    )
    for name in ("train", "eval") if "train_gpu_path_host_gib" in fig else ():
        key = f"{name}_gpu_path"
        lines.append(
            f"  {name} as on a GPU: host outside device buffers "
            f"{fig[f'{key}_host_gib'] * per_link:.1f} (at {fig[f'{key}_host_peak_s']:.0f} s, "
            f"after {fig[f'{key}_host_peak_after'] or 'start'}), device "
            f"{fig[f'{key}_device_gib'] * per_link:.1f}, "
            f"RSS {fig[f'{key}_peak_host_gib'] * per_link:.1f}"
            + _too_few(fig[f"{key}_samples"], fig[f"{key}_s"])
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args, train_args = parse_args(argv)
    # absolute: the children run from the repository root
    work = os.path.abspath(args.work or tempfile.mkdtemp(prefix="planted-quality-"))
    data, model = os.path.join(work, "data"), os.path.join(work, "model")
    fig: dict = {"scale": args.scale, "seed": args.seed, "on": args.on, "train_args": train_args}
    if args.reuse and os.path.exists(os.path.join(data, stats_json.STATS_FILE)):
        stats = stats_json.read_stats(data)
        if planted.params_of(stats) != planted.Params.at_scale(args.scale, args.seed):
            raise SystemExit(f"{data}: a planted dataset of another scale or seed")
        fig.update(
            pages=stats["nodes"],
            links=stats["edges"],
            training_links=stats["split_edges"]["train"],
            test_rows=stats["splits"]["test"],
            shards=stats["num_shards"],
        )
    else:
        fig.update(write_data(args, data))
    shutil.rmtree(model, ignore_errors=True)
    train = ["train", "--data", data, "--model_dir", model, *TRAIN_DEFAULTS, *train_args]
    fig.update(command("train", train, os.path.join(work, "train.log")))
    result = os.path.join(work, "eval.json")
    scoring = ["eval", "--data", data, "--eval_k", "20,50", "--ndcg_k", "0"]
    evaluate = [*scoring, "--model_dir", model, "--output", result]
    fig.update(command("eval", evaluate, os.path.join(work, "eval.log")))
    with open(result) as f:
        fig.update(json.load(f))
    fig.update(oracle_figures(data))
    fig["ours_over_oracle@50"] = fig["recall@50"] / fig["oracle/recall@50"]
    if args.gpu_path_memory:
        fig.update(gpu_path_memory(data, work, train_args, scoring))
    print(report(fig))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(fig, f, indent=2, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
