"""End to end from real WAT input: `tfds build` runs the WebGraph pipeline on the bundled Common
Crawl sample plus the hollins.edu crawl packed as WAT, and `tfds.load` must return exactly the
records that `python -m webgraph_pipeline` writes from the same files, with the same stats."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from webgraph_contract import layout, record_codec, stats_json
from webgraph_pipeline.cli import run
from webgraph_pipeline.wat_writer import read_edge_list, write_wat_files

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = {"name": "hollins", "min_links": 2, "seed": 3}


def _pipeline_rows(data_dir: str, split: str) -> list:
    return [
        record_codec.decode_row(r.numpy())
        for f in layout.iter_split_files(data_dir, split)
        for r in tf.data.TFRecordDataset(f)
    ]


def _tfds_rows(ds) -> list:
    return [
        (int(x["row_tag"]), x["col_tag"].tolist(), x["gt_tag"].tolist()) for x in tfds.as_numpy(ds)
    ]


@pytest.fixture(scope="module")
def wat_dir(tmp_path_factory) -> str:
    """The real Common Crawl WAT sample and the hollins crawl as per-record-gzip WAT files."""
    d = tmp_path_factory.mktemp("wat")
    for name in os.listdir(os.path.join(REPO, "data", "commoncrawl")):
        if name.endswith(".wat"):
            shutil.copy(os.path.join(REPO, "data", "commoncrawl", name), d)
    hollins = os.path.join(REPO, "data", "hollins")
    write_wat_files(
        read_edge_list(
            os.path.join(hollins, "edges.txt"), os.path.join(hollins, "urls.txt"), header=True
        ),
        str(d),
        records_per_file=2500,
    )
    return str(d)


@pytest.fixture(scope="module")
def both(wat_dir, tmp_path_factory):
    """The pipeline's own output directory, and the TFDS dataset `tfds build` makes from the WAT
    files."""
    out = str(tmp_path_factory.mktemp("pipeline"))
    run(
        [
            "--input",
            os.path.join(wat_dir, "*.wat*"),
            "--output",
            out,
            "--min_links",
            "2",
            "--seed",
            "3",
            "--num_shards",
            "3",
            "--runner",
            "DirectRunner",
        ]
    )
    data_dir = str(tmp_path_factory.mktemp("tfds"))
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [
        sys.executable,
        "-m",
        "tensorflow_datasets.scripts.cli.main",
        "build",
        "tfds_builder/web_graph",
        f"--config={json.dumps(CONFIG)}",
        f"--manual_dir={wat_dir}",
        f"--data_dir={data_dir}",
        "--beam_pipeline_options=runner=DirectRunner",
    ]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return out, data_dir


def test_tfds_load_returns_exactly_what_the_pipeline_wrote(both):
    out, data_dir = both
    stats = stats_json.read_stats(out)
    builder = tfds.builder("web_graph/hollins:1.0.0", data_dir=data_dir)
    for split in layout.SPLIT_PREFIXES:
        expected = _pipeline_rows(out, split)
        got = _tfds_rows(tfds.load("web_graph/hollins:1.0.0", data_dir=data_dir, split=split))
        assert sorted(got) == sorted(expected), split
        assert (
            len(got)
            == len({r[0] for r in got})
            == builder.info.splits[split].num_examples
            == stats["splits"][split]
        )
    # the hollins graph kept nodes
    assert stats["splits"]["train"] > 100 and stats["splits"]["test"] > 10
    assert all(r[1] and r[2] for r in _pipeline_rows(out, "test"))


def test_stats_kept_with_the_dataset_match_the_pipeline(both):
    out, data_dir = both
    ours = stats_json.read_stats(os.path.join(data_dir, "web_graph", "hollins", "1.0.0"))
    theirs = stats_json.read_stats(out)
    assert ours["input_files"] == theirs["input_files"]
    assert len(ours["input_files"]) == 4 and ours["input_files"][0].endswith("00006.head.warc.wat")
    assert ours["config"] == dict(theirs["config"], name="hollins")
    for key in (
        "nodes",
        "edges",
        "splits",
        "counters",
        "dropped",
        "unreadable_files",
        "in_degree_histogram",
        "out_degree_histogram",
    ):
        assert ours[key] == theirs[key], key
    assert tfds.builder("web_graph/hollins:1.0.0", data_dir=data_dir).info.metadata["stats"] == ours
    assert not [
        f
        for f in os.listdir(os.path.join(data_dir, "web_graph", "hollins", "1.0.0"))
        if "incomplete" in f
    ]


def test_wat_build_with_an_empty_split_says_why(tmp_path):
    """de-dense (.de pages with >= 50 in- and out-links) leaves nothing of the Common Crawl
    sample."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from tfds_builder.web_graph import WebGraph

    wat = tmp_path / "wat"
    wat.mkdir()
    shutil.copy(
        os.path.join(REPO, "data", "commoncrawl", "CC-MAIN-20140820021334-00006.head.warc.wat"), wat
    )
    builder = WebGraph(config="de-dense", data_dir=str(tmp_path / "tfds"), source_dir=str(wat))
    with pytest.raises(
        Exception, match=r"graph of 1 WAT file\(s\) with tlds=\['de'\], min_links=50: split\(s\) "
    ):
        builder.download_and_prepare(
            download_config=tfds.download.DownloadConfig(beam_options=PipelineOptions(flags=[]))
        )
