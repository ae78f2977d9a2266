"""The main job on the bundled real data, end to end, with the same commands a user would type.

    python demo.py [--out demo_out] [--epochs 8] [--dim 64] [--small]

1. packs the real hollins.edu crawl (data/hollins) into Common Crawl-style WAT files and puts the
   real Common Crawl WAT sample (data/commoncrawl) beside them;
2. runs the WebGraph Beam pipeline on the DirectRunner over those WAT files;
3. builds the TFDS dataset `web_graph/<config>` from the pipeline's output with `tfds build`;
4. trains sharded implicit ALS on it (`python -m alx_trainer train`, Recall@20 every epoch);
5. evaluates (Recall@20/50 and NDCG next to the popularity baseline), prints example predictions
   with their URLs, and writes plots (degree distributions, Recall@20 per epoch).
Every step prints its command line and what the command prints; every output lands under --out.
The pipeline prints its counters in brief (`--brief`; every counter is in the dataset's stats.json)
and the TFDS build a short summary of what it wrote (`python -m tfds_builder build`).
The libraries stay quiet (`webgraph_contract.quiet_logs`, set here and inherited by every step).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shlex
import shutil
import subprocess
import sys
import time

from webgraph_contract.quiet_logs import quiet

REPO = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(REPO, "data")
CONFIG_NAME = "hollins"


STEP_SECONDS: dict[str, float] = {}


def run(title: str, cmd: list[str]) -> None:
    """Run one step as a user would, under its title and command line; stop the demo if it fails."""
    print(f"== {title}\n$ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    start = time.time()
    done = subprocess.run(cmd, cwd=REPO)
    if done.returncode != 0:
        sys.exit(
            f"demo: step failed with exit code {done.returncode}: {cmd[2] if len(cmd) > 2 else cmd}"
        )
    STEP_SECONDS[title.split(".")[0]] = time.time() - start


def plot_recall(metrics_path: str, png_path: str) -> None:
    """Recall@K per epoch from the trainer's metrics.jsonl, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(metrics_path, encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    keys = sorted({k for r in records for k in r if k.startswith("recall@")})
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for key in keys:
        points = [(r["epoch"], r[key]) for r in records if key in r]
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=key)
    ax.set_xlabel("epoch")
    ax.set_ylabel("recall on the test split")
    ax.set_title("iALS on the hollins.edu WebGraph")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png_path, dpi=120)
    plt.close(fig)


def example_test_pages(dataset_dir: str, count: int) -> list[str]:
    """URLs of the first `count` test rows (pages the model never trained on)."""
    from webgraph_contract.dataset_reader import read_split, read_vocab

    urls = read_vocab(dataset_dir)
    return [urls[row] for row, _, _ in read_split(dataset_dir, "test")[:count]]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--out", default=os.path.join(REPO, "demo_out"), help="where everything is written"
    )
    p.add_argument("--epochs", type=int, default=8, help="training epochs")
    p.add_argument("--dim", type=int, default=64, help="embedding dimension")
    p.add_argument("--min_links", type=int, default=2, help="K of the degree filter")
    p.add_argument("--small", action="store_true", help="a quick run (tests): 2 epochs, d=16")
    args = p.parse_args(argv)
    # for this process (the example pages' vocabulary, the plot) and, through the environment, each
    # step
    quiet()
    if args.small:
        args.epochs, args.dim = 2, 16
    out = os.path.abspath(args.out)
    if os.path.exists(out):
        shutil.rmtree(out)
    wat_dir, dataset_dir = os.path.join(out, "wat"), os.path.join(out, "dataset")
    tfds_dir, model_dir = os.path.join(out, "tfds"), os.path.join(out, "model")
    py = sys.executable
    started = time.time()

    run(
        "1. Pack the real hollins.edu crawl into WAT files, next to the real Common Crawl sample",
        [
            py,
            "-m",
            "webgraph_pipeline.wat_writer",
            "--edges",
            "data/hollins/edges.txt",
            "--urls",
            "data/hollins/urls.txt",
            "--header",
            "--output",
            wat_dir,
            "--records_per_file",
            "2000",
        ],
    )
    for path in glob.glob(os.path.join(DATA, "commoncrawl", "*.wat")):
        shutil.copy(path, wat_dir)

    run(
        "2. The WebGraph Beam pipeline on the DirectRunner",
        [
            py,
            "-m",
            "webgraph_pipeline",
            "--input",
            os.path.join(wat_dir, "*"),
            "--output",
            dataset_dir,
            "--min_links",
            str(args.min_links),
            "--num_shards",
            "2",
            "--brief",
        ],
    )

    config = json.dumps({"name": CONFIG_NAME, "min_links": args.min_links})
    run(
        "3. The TFDS dataset, built from the pipeline's output (`tfds build`, quiet)",
        [
            py,
            "-m",
            "tfds_builder",
            "build",
            "tfds_builder/web_graph",
            f"--config={config}",
            f"--manual_dir={dataset_dir}",
            f"--data_dir={tfds_dir}",
            "--beam_pipeline_options=runner=DirectRunner",
        ],
    )

    data_flags = ["--data", f"web_graph/{CONFIG_NAME}", "--tfds_data_dir", tfds_dir]
    run(
        f"4. Train sharded implicit ALS on web_graph/{CONFIG_NAME}",
        [
            py,
            "-m",
            "alx_trainer",
            "train",
            *data_flags,
            "--model_dir",
            model_dir,
            "--epochs",
            str(args.epochs),
            "--dim",
            str(args.dim),
            "--tied",
            "--alpha",
            "0.01",
            "--reg",
            "0.05",
            "--eval_every",
            "1",
            "--eval_k",
            "20,50",
            "--no-progress",
        ],
    )

    metrics_path = os.path.join(out, "eval.json")
    run(
        "5. Evaluate: Recall@20/50 and NDCG@100 next to the popularity baseline",
        [
            py,
            "-m",
            "alx_trainer",
            "eval",
            *data_flags,
            "--model_dir",
            model_dir,
            "--k",
            "20,50",
            "--output",
            metrics_path,
        ],
    )

    run(
        "6. Example predictions (top outlinks) for a few held-out pages, with their URLs",
        [
            py,
            "-m",
            "alx_trainer",
            "predict",
            "--data",
            dataset_dir,
            "--model_dir",
            model_dir,
            "--k",
            "3",
            *example_test_pages(dataset_dir, 3),
        ],
    )

    recall_png = os.path.join(out, "recall_per_epoch.png")
    plot_recall(os.path.join(model_dir, "metrics.jsonl"), recall_png)
    steps = ", ".join(f"{seconds:.1f}" for seconds in STEP_SECONDS.values())
    print(f"== Done in {time.time() - started:.0f} s (steps: {steps} s). Outputs under {out}:")
    for path in [
        dataset_dir,
        *glob.glob(os.path.join(dataset_dir, "*.png")),
        recall_png,
        metrics_path,
        os.path.join(model_dir, "metrics.jsonl"),
    ]:
        print("  " + path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
