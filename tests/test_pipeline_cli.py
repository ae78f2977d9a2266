"""The whole job through its command line: edge-list input, bad flags, determinism, Dataflow
build."""

from __future__ import annotations

import collections
import json
import os

import apache_beam as beam
import pytest
from apache_beam.internal import pickler
from apache_beam.options.pipeline_options import PipelineOptions

from webgraph_contract import stats_json
from webgraph_pipeline.cli import main
from webgraph_pipeline.edge_formats import EdgeFormat
from webgraph_pipeline.graph_config import GraphConfig, get_variant
from webgraph_pipeline.pipeline import JobSpec, build_pipeline

# noqa: E402  (tests/ is on sys.path)
from test_pipeline_graph import check_dataset, reference_graph


def run_cli(args, capsys):
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--input", "/nonexistent/*.wat", "--output", "OUT"], "no file matches"),
        (
            ["--input", "IN", "--output", "OUT", "--min_link", "3"],
            "unknown flag --min_link (did you mean --min_links?)",
        ),
        (["--input", "IN", "IN", "--output", "OUT"], "quote globs"),
        (
            ["--input", "IN", "--output", "OUT", "--variant", "de-dense", "--min_links", "3"],
            "either --variant",
        ),
        (["--input", "IN", "--output", "OUT", "--test_fraction", "1.5"], "test_fraction"),
        (["--input", "IN", "--output", "OUT", "--tlds", "d.e"], "top-level domain"),
        (["--input", "IN", "--output", "OUT", "--urls", "IN"], "edges only"),
        (
            [
                "--input",
                "IN",
                "--output",
                "OUT",
                "--input_format",
                "edges",
                "--urls",
                "/nonexistent.txt",
            ],
            "no file matches",
        ),
        (["--input", "IN", "--output", "OUT", "--num_shards", "0"], "num_shards"),
        (
            ["--input", "IN", "--output", "OUT", "--edge_format", "pairs", "--urls", "/no/u.txt"],
            "--urls '/no/u.txt': no file matches",
        ),
        (
            ["--input", "IN", "--output", "OUT", "--edge_format", "given_split"]
            + ["--test_input", "/no/test.txt"],
            "--test_input '/no/test.txt': no file matches",
        ),
        (
            ["--input", "IN", "--output", "OUT", "--edge_format", "pairs", "--delimiter", ";"],
            "--delimiter applies to --edge_format csv only, not pairs",
        ),
        (["--input", "IN", "--output", "OUT", "--delimiter", ";"], "--delimiter applies"),
        *[
            (
                ["--input", "IN", "--output", "OUT", "--edge_format", "given_split"]
                + ["--test_input", "IN", flag, value],
                f"{flag}: a given split is used as given",
            )
            for flag, value in [
                ("--test_fraction", "0.1"),
                ("--holdout_fraction", "0.25"),
                ("--seed", "0"),
            ]
        ],
        (
            ["--input", "IN", "--output", "OUT", "--edge_format", "given_split"],
            "needs --test_input",
        ),
        (
            ["--input", "IN", "--output", "OUT", "--edge_format", "pairs", "--test_input", "IN"],
            "needs given_split",
        ),
        (
            ["--input", "IN", "--output", "OUT", "--edge_format", "csv", "--delimiter", "ab"],
            "--delimiter",
        ),
        (
            ["--input", "IN", "--output", "OUT", "--edge_format", "pairs", "--min_rating", "3"],
            "--min_rating",
        ),
        (
            ["--input", "IN", "--output", "OUT", "--input_format", "wat", "--edge_format", "pairs"],
            "edges only",
        ),
        (
            [
                "--input",
                "IN",
                "--output",
                "OUT",
                "--edge_format",
                "given_split",
                "--test_input",
                "IN",
                "--min_links",
                "2",
            ],
            "used as given",
        ),
    ],
)
def test_bad_flags_give_one_line_error_and_exit_2(args, message, tmp_path, capsys):
    (tmp_path / "in.txt").write_text("1 2\n")
    args = [
        str(tmp_path / "in.txt") if a == "IN" else str(tmp_path / "out") if a == "OUT" else a
        for a in args
    ]
    code, out, err = run_cli(args, capsys)
    last = err.strip().splitlines()[-1]
    assert code == 2 and last.startswith("webgraph_pipeline: error: ") and message in last
    assert not (tmp_path / "out").exists()


def test_unknown_variant_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--input", "x", "--output", "y", "--variant", "de-medium"])
    assert e.value.code == 2 and "invalid choice: 'de-medium'" in capsys.readouterr().err


@pytest.fixture(scope="module")
def small_edge_list(tmp_path_factory, data_dir):
    """The first 1,500 real hollins.edu links (integer ids), plus a header, duplicates, a self-loop,
    a comment and a bad line."""
    lines = (data_dir / "hollins" / "edges.txt").read_text().splitlines()
    assert lines[0] == "start end"
    body = lines[1:1501]
    path = tmp_path_factory.mktemp("edges") / "edges.txt"
    path.write_text("\n".join([lines[0]] + body + body[:7] + ["5 5", "# a comment", "17"]) + "\n")
    return path, {tuple(line.split()) for line in body if line.split()[0] != line.split()[1]}


def test_edge_list_through_cli_counts_every_drop(small_edge_list, tmp_path, capsys):
    path, edges = small_edge_list
    out = tmp_path / "out"
    code, stdout, _ = run_cli(
        [
            "--edge_format",
            "pairs",
            "--header",
            "--input",
            path,
            "--output",
            out,
            "--min_links",
            "2",
            "--num_shards",
            "2",
        ],
        capsys,
    )
    assert code == 0
    stats = json.loads((out / stats_json.STATS_FILE).read_text())
    check_dataset(out, reference_graph(edges, (), 2), stats)
    dropped, counters = stats["dropped"], stats["counters"]
    assert counters["skipped_lines.header"] == 1 and counters["skipped_lines.comment"] == 1
    assert dropped["dropped_lines.too_few_fields"] == 1
    # header, 1,500 links, 7 repeats, the self-loop, the comment, the bad line: lines 1510 and 1511
    assert stats["line_examples"] == {
        "skipped_lines.header": [f"{path}:1"],
        "skipped_lines.comment": [f"{path}:1510"],
        "dropped_lines.too_few_fields": [f"{path}:1511"],
    }
    assert counters["edges.parsed"] == 1500 + 7 + 1
    assert dropped["dropped_edges.duplicate"] == 7 and dropped["dropped_edges.self_loop"] == 1
    # Every edge that survived parsing is accounted for: kept, or dropped by the degree filter.
    assert stats["edges"] + dropped["dropped_edges.degree_filter"] == len(edges)
    assert "dropped_edges.degree_filter" in stdout and f"nodes {stats['nodes']:,}" in stdout
    assert stats["input_files"] == [str(path)] and stats["config"]["min_links"] == 2


def _file_bytes(directory):
    return {name: (directory / name).read_bytes() for name in sorted(os.listdir(directory))}


def test_runs_are_byte_identical_across_runs_and_direct_running_modes(
    small_edge_list, tmp_path, capsys
):
    path, _ = small_edge_list
    common = [
        "--edge_format",
        "pairs",
        "--header",
        "--input",
        path,
        "--min_links",
        "1",
        "--num_shards",
        "3",
        "--test_fraction",
        "0.3",
    ]
    outputs = []
    for i, extra in enumerate(
        [[], [], ["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"]]
    ):
        out = tmp_path / f"run{i}"
        out.mkdir()
        # Files of an earlier run with other settings are replaced; with --overwrite other files
        # stay.
        for name in (
            "train.tfr-00004-of-00005",
            "vocab.tsv-00000-of-00001",
            "stats.json",
            "notes.txt",
        ):
            (out / name).write_text("stale")
        assert run_cli(common + ["--output", out, "--overwrite"] + extra, capsys)[0] == 0
        assert (out / "notes.txt").read_text() == "stale"
        (out / "notes.txt").unlink()
        outputs.append(_file_bytes(out))
    # 3 splits + vocabulary, 3 shards each; stats.json; the plot
    assert len(outputs[0]) == 3 * 4 + 2
    assert outputs[0] == outputs[1] == outputs[2]


def test_interaction_data_through_cli(data_dir, tmp_path, capsys):
    """MovieLens-100k (user item rating time) as a bipartite matrix; published: 943 users, 1,682
    items."""
    out = tmp_path / "ml"
    code, _, _ = run_cli(
        [
            "--edge_format",
            "movielens",
            "--input",
            data_dir / "ml-100k" / "u.data",
            "--output",
            out,
            "--num_shards",
            "1",
        ],
        capsys,
    )
    assert code == 0
    stats = json.loads((out / stats_json.STATS_FILE).read_text())
    assert (stats["num_rows"], stats["num_cols"], stats["edges"]) == (943, 1682, 100_000)
    assert stats["bipartite"] is True and stats["protocol"] == "strong_generalization"
    assert stats["splits"]["test"] + stats["splits"]["train"] == 943
    assert stats["dropped"].get("dropped_edges.self_loop", 0) == 0


def _all_fns(pipeline):
    fns = []

    class Visitor(beam.pipeline.PipelineVisitor):
        def visit_transform(self, node):
            if isinstance(node.transform, beam.ParDo):
                fns.append(node.transform.fn)
            elif isinstance(node.transform, (beam.CombinePerKey, beam.CombineGlobally)):
                fns.append(node.transform)

    pipeline.visit(Visitor())
    return fns


@pytest.mark.parametrize("input_format", ["edges", "wat", "given_split"])
def test_dataflow_pipeline_pickles_and_converts_to_runner_api(input_format, data_dir):
    options = PipelineOptions(
        [
            "--runner",
            "DataflowRunner",
            "--project",
            "my-project",
            "--region",
            "us-central1",
            "--temp_location",
            "gs://my-bucket/tmp",
            "--setup_file",
            "./setup.py",
        ]
    )
    p = beam.Pipeline(options=options)
    if input_format == "edges":
        files = [str(data_dir / "hollins" / "edges.txt")]
        spec = JobSpec(
            tuple(files),
            "gs://my-bucket/out",
            get_variant("de-dense"),
            input_format="edges",
            urls_file=str(data_dir / "hollins" / "urls.txt"),
        )
    elif input_format == "given_split":
        files = [str(data_dir / "ml-1m-implicit" / "train.txt")]
        spec = JobSpec(
            tuple(files),
            "gs://my-bucket/out",
            GraphConfig(bipartite=True),
            input_format="edges",
            edge_format=EdgeFormat("given_split"),
            test_patterns=(str(data_dir / "ml-1m-implicit" / "test.txt"),),
        )
    else:
        files = [str(next((data_dir / "commoncrawl").glob("*.wat")))]
        spec = JobSpec(tuple(files), "gs://my-bucket/out", get_variant("in-sparse"))
    build_pipeline(p, spec, files)
    fns = _all_fns(p)
    assert len(fns) > 30
    for fn in fns:
        assert type(pickler.loads(pickler.dumps(fn))) is type(fn)
    proto = p.to_runner_api()
    names = collections.Counter(
        t.unique_name.split("/")[0] for t in proto.components.transforms.values()
    )
    graph_stage = "BuildGivenSplit" if input_format == "given_split" else "BuildWebGraph"
    assert {graph_stage, "WriteTfRecords"} <= set(names)
