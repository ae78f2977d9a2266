"""How the web_graph builder tells sources apart, its bad-input errors, and what a build keeps.

The datasets in `dummy_data/` are written by the pipeline through
`tfds_builder/web_graph/make_dummy_data.py`; they are checked against its `DENSE_GRAPH` here, and a
build must then hold exactly their rows.
"""

import json
import shutil
import sys

import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
from apache_beam.options.pipeline_options import PipelineOptions

from tfds_builder.web_graph import WebGraph, WebGraphConfig, sources
from tfds_builder.web_graph.make_dummy_data import (
    DENSE_GRAPH,
    DUMMY_DIR,
    NUM_NODES,
    node_url,
    write_dummy_data,
)
from webgraph_contract import dataset_reader, fileio, layout, record_codec, stats_json

from test_pipeline_graph import check_dataset  # noqa: E402  (tests/ is on sys.path)

# The rows of the pipeline-made dummy dataset, read with the contract's reader.
SOURCE_ROWS = {
    split: {
        (r, tuple(c.tolist()), tuple(g.tolist()))
        for r, c, g in dataset_reader.read_split(str(DUMMY_DIR), split)
    }
    for split in ("train", "train_t", "test")
}
BEAM = tfds.download.DownloadConfig(beam_options=PipelineOptions(flags=[]))


def _rows(ds) -> set:
    return {
        (int(x["row_tag"]), tuple(x["col_tag"].tolist()), tuple(x["gt_tag"].tolist()))
        for x in tfds.as_numpy(ds)
    }


def _write_split(directory, split, rows, index=0, total=1):
    path = directory / layout.shard_name(
        layout.SPLIT_PREFIXES[split], index, total, layout.TFRECORD_SUFFIX
    )
    with tf.io.TFRecordWriter(str(path)) as w:
        for r in rows:
            w.write(record_codec.encode_row(*r))
    return path


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """`de-dense` built once from the pipeline-layout dummy data, through the builder argument."""
    data_dir = tmp_path_factory.mktemp("tfds")
    builder = WebGraph(config="de-dense", data_dir=str(data_dir), source_dir=str(DUMMY_DIR))
    builder.download_and_prepare(download_config=BEAM)
    return data_dir, builder


def test_dummy_data_is_the_dense_graph():
    edges = {(node_url(s, "de"), node_url(d, "de")) for s, ds in DENSE_GRAPH.items() for d in ds}
    stats = json.loads((DUMMY_DIR / "stats.json").read_text())
    check_dataset(DUMMY_DIR, edges, stats)
    assert stats["config"]["name"] == "de-dense" and stats["protocol"] == "strong_generalization"
    assert len(SOURCE_ROWS["test"]) >= 1 and all(
        len(c) + len(g) == 50 for _, c, g in SOURCE_ROWS["test"]
    )


def test_dummy_data_is_what_the_generator_writes(tmp_path):
    write_dummy_data(tmp_path)
    ours = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert ours == sorted(p.relative_to(DUMMY_DIR) for p in DUMMY_DIR.rglob("*") if p.is_file())
    assert all((tmp_path / p).read_bytes() == (DUMMY_DIR / p).read_bytes() for p in ours)


def test_resolve_tells_sources_apart(tmp_path):
    assert sources.resolve(str(DUMMY_DIR)).kind == sources.PIPELINE
    official = sources.resolve(str(DUMMY_DIR), "web_graph_tld_in_min_50")
    assert official.kind == sources.OFFICIAL and official.path.endswith("web_graph_tld_in_min_50")
    assert [len(official.split_files[s]) for s in ("train", "train_t", "test")] == [2, 2, 2]
    # A config whose official folder is absent falls back to the root.
    assert sources.resolve(str(DUMMY_DIR), "web_graph_min_10").kind == sources.PIPELINE
    wat = tmp_path / "wat"
    wat.mkdir()
    for name in ("a.warc.wat.gz", "b.wat", "notes.txt"):
        (wat / name).write_bytes(b"")
    found = sources.resolve(str(wat))
    assert found.kind == sources.WAT and [p.rsplit("/", 1)[1] for p in found.wat_files] == [
        "a.warc.wat.gz",
        "b.wat",
    ]


def test_resolve_errors_say_what_is_wrong(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a directory"):
        sources.resolve(str(tmp_path / "nowhere"))
    with pytest.raises(
        FileNotFoundError, match="neither TFRecord shards nor WAT files|found neither"
    ):
        sources.resolve(str(tmp_path))
    _write_split(tmp_path, "train", [(0, (1,), ())])
    with pytest.raises(FileNotFoundError, match=r"none for split\(s\) \['train_t', 'test'\]"):
        sources.resolve(str(tmp_path))
    _write_split(tmp_path, "train_t", [(1, (0,), ())])
    _write_split(tmp_path, "test", [], index=1, total=3)
    with pytest.raises(
        ValueError, match=r"'test' .* incomplete: 2 of 3 shards missing \(first: 00000\)"
    ):
        sources.resolve(str(tmp_path))


def test_shards_are_read_and_a_bad_record_names_its_file(tmp_path):
    good = str(tmp_path / "train.tfr-00000-of-00002")
    fileio.write_records(
        good, [record_codec.encode_row(7, [3, 1], [2]), record_codec.encode_row(8, [])]
    )
    (key, example), (key2, example2) = sources.read_shard(good)
    assert (key, key2) == (7, 8) and example["row_tag"] == 7 and example2["col_tag"].tolist() == []
    assert example["col_tag"].tolist() == [3, 1] and example["gt_tag"].tolist() == [2]
    bad = str(tmp_path / "train.tfr-00001-of-00002")
    first = record_codec.encode_row(1, [2])
    fileio.write_records(bad, [first, b"\x01\x02not a proto"])
    # the second record's frame begins after the first's 12-byte header and 4-byte CRC
    at = 16 + len(first)
    with pytest.raises(
        ValueError, match=rf"train.tfr-00001-of-00002: the record at byte {at} is not a web_graph"
    ):
        list(sources.read_shard(bad))


def test_empty_split_is_refused_with_the_reason():
    sources.check_splits_not_empty({"train": 3, "train_t": 4, "test": 1}, "here", "advice")
    with pytest.raises(
        ValueError, match=r"^here: split\(s\) \['test'\] are empty \(.*\); do this$"
    ):
        sources.check_splits_not_empty({"train": 3, "train_t": 4, "test": 0}, "here", "do this")


def test_config_mismatches_compare_recorded_settings_only():
    stats = {"config": {"tlds": ["de"], "min_links": 50, "seed": 0}}
    assert (
        sources.config_mismatches(
            stats, WebGraphConfig(name="x", tlds=("DE",), min_links=50).graph_settings()
        )
        == []
    )
    assert sources.config_mismatches(
        stats, WebGraphConfig(name="y", min_links=10).graph_settings()
    ) == [
        "tlds: dataset has ['de'], config wants []",
        "min_links: dataset has 50, config wants 10",
    ]
    assert sources.config_mismatches({}, {"min_links": 3}) == []


def test_custom_config_is_validated_by_the_pipeline_rules():
    with pytest.raises(ValueError, match="holdout_fraction"):
        WebGraphConfig(name="bad", holdout_fraction=1.0)
    with pytest.raises(ValueError, match="min_links"):
        WebGraphConfig(name="bad", min_links=-1)


def test_build_keeps_exact_rows_counts_and_stats(built):
    data_dir, builder = built
    for split, rows in SOURCE_ROWS.items():
        assert _rows(builder.as_dataset(split=split)) == rows
        assert builder.info.splits[split].num_examples == len(rows)
    written = json.loads((DUMMY_DIR / "stats.json").read_text())
    assert stats_json.read_stats(str(builder.data_dir)) == written
    assert builder.info.metadata["stats"] == written
    assert builder.info.metadata["source"] == {"kind": "pipeline", "path": str(DUMMY_DIR)}
    assert "arXiv:2112.02194" in builder.info.citation and builder.info.homepage.endswith(
        "2112.02194"
    )


def test_tfds_load_reads_the_built_files(built):
    data_dir, _ = built
    ds = tfds.load("web_graph/de-dense:1.0.0", data_dir=str(data_dir), split="test")
    assert _rows(ds) == SOURCE_ROWS["test"]
    restored = tfds.builder("web_graph/de-dense:1.0.0", data_dir=str(data_dir))
    assert restored.info.splits["train_t"].num_examples == len(SOURCE_ROWS["train_t"])
    # the stats travel with the built files
    assert restored.info.metadata["stats"]["nodes"] == NUM_NODES


def test_settings_mismatch_is_refused(tmp_path):
    builder = WebGraph(config="sparse", data_dir=str(tmp_path / "tfds"), source_dir=str(DUMMY_DIR))
    with pytest.raises(
        ValueError, match=r"stats.json: built with other settings than config 'sparse': tlds"
    ):
        builder.download_and_prepare(download_config=BEAM)


def test_corrupt_shard_fails_the_build_naming_the_file(tmp_path):
    source = tmp_path / "src"
    shutil.copytree(DUMMY_DIR / "web_graph_tld_in_min_50", source)
    bad = source / "test.tfr-00001-of-00002"
    bad.write_bytes(bad.read_bytes()[:-7])
    builder = WebGraph(config="in-dense", data_dir=str(tmp_path / "tfds"), source_dir=str(source))
    with pytest.raises(
        Exception,
        match=r"test.tfr-00001-of-00002: truncated TFRecord: the file ends inside the record",
    ):
        builder.download_and_prepare(download_config=BEAM)


def test_beam_steps_pickle_by_a_module_name_workers_can_import():
    """`tfds build tfds_builder/web_graph` imports the builder as
    `web_graph.web_graph_dataset_builder`;
    its Beam steps must still refer to `tfds_builder...`, which setup.py installs on Dataflow
    workers."""
    from apache_beam.internal import pickler
    from tensorflow_datasets.core.community.load import builder_cls_from_module

    with tfds.core.utils.add_sys_path(DUMMY_DIR.parent.parent):
        cls = builder_cls_from_module("web_graph.web_graph_dataset_builder")
    steps = sys.modules[cls.__module__].sources
    assert cls.__module__ == "web_graph.web_graph_dataset_builder" and steps is sources
    for fn in (steps.read_shard, steps.write_job_stats, steps.example_after):
        assert fn.__module__ == "tfds_builder.web_graph.sources"
        assert pickler.loads(pickler.dumps(fn)) is fn
