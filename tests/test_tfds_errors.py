"""`tfds build` of web_graph: a build's user errors are one line and an exit status, not a traceback
(through the real `tfds` command line in a subprocess); config values are type-checked."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tfds_builder.web_graph import WebGraphConfig, sources

from extract_fixtures import a_links, envelope, wat_bytes  # noqa: E402  (tests/ is on sys.path)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ERROR = "tfds build web_graph: error: "


def tfds_build(
    config: dict, manual_dir, data_dir, env=None, logs: list | None = None
) -> tuple[int, list[str]]:
    """Run `tfds build`: (exit status, stderr lines); the log lines TFDS sends to stdout go to
    `logs`."""
    cmd = [
        sys.executable,
        "-m",
        "tensorflow_datasets.scripts.cli.main",
        "build",
        "tfds_builder/web_graph",
        f"--config={json.dumps(config)}",
        f"--data_dir={data_dir}",
        "--beam_pipeline_options=runner=DirectRunner",
    ]
    if manual_dir is not None:
        cmd.append(f"--manual_dir={manual_dir}")
    done = subprocess.run(
        cmd,
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=REPO, **(env or {})),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if logs is not None:
        logs.extend(done.stdout.splitlines())
    return done.returncode, done.stderr.strip().splitlines()


def check_one_line(code: int, err: list[str], status: int, *pieces: str) -> str:
    """The build failed with `status`, its last stderr line is the one error line holding `pieces`,
    and no traceback was printed."""
    assert code == status, err[-30:]
    assert not [line for line in err if line.startswith("Traceback")], "\n".join(err[-60:])
    errors = [line for line in err if line.startswith(ERROR)]
    assert errors == [err[-1]], err[-30:]
    for piece in pieces:
        assert piece in err[-1], err[-1]
    return err[-1]


@pytest.mark.parametrize(
    "config, pieces",
    [
        (
            {"name": "x", "tlds": 5},
            ["web_graph config 'x': tlds: expected a comma-separated string or a list"],
        ),
        (
            {"name": "x", "min_links": "2"},
            ["web_graph config 'x': min_links must be an integer, got '2'"],
        ),
        (
            {"name": "x", "min_link": 2},
            [
                "web_graph config: got an unexpected keyword argument 'min_link'",
                "the keys are name, ",
                "min_links",
            ],
        ),
    ],
)
def test_bad_config_is_one_line_exit_2(config, pieces, tmp_path):
    code, err = tfds_build(config, tmp_path, tmp_path / "tfds")
    check_one_line(code, err, 2, *pieces)
    assert not (tmp_path / "tfds").exists()


def test_debug_env_shows_the_traceback(tmp_path):
    code, err = tfds_build(
        {"name": "x", "min_links": "2"}, tmp_path, tmp_path / "tfds", env={"WEBGRAPH_DEBUG": "1"}
    )
    assert code == 2 and any(line.startswith("Traceback") for line in err)  # the status kept
    assert err[-1].endswith("min_links must be an integer, got '2'")


def test_missing_or_useless_manual_dir(tmp_path):
    code, err = tfds_build({"name": "x", "min_links": 2}, tmp_path / "nowhere", tmp_path / "tfds")
    check_one_line(
        code, err, 1, f"{tmp_path / 'nowhere'} does not exist or is empty", "give --manual_dir=DIR"
    )
    (tmp_path / "notes.txt").write_text("not a dataset")
    code, err = tfds_build({"name": "x", "min_links": 2}, tmp_path, tmp_path / "tfds")
    check_one_line(code, err, 1, f"web_graph source {tmp_path}: found neither TFRecord shards")


@pytest.fixture
def wat_dir(tmp_path):
    """One small good WAT file: 8 pages, each linking to the next three (so every degree is 3)."""
    d = tmp_path / "wat"
    d.mkdir()
    pages = [
        envelope(f"http://site.de/p{i}", a_links(*[f"/p{(i + k) % 8}" for k in (1, 2, 3)]))
        for i in range(8)
    ]
    (d / "good.warc.wat.gz").write_bytes(wat_bytes(pages)[0])
    return d


def test_bad_wat_files_are_not_told_to_lower_min_links(tmp_path):
    d = tmp_path / "wat"
    d.mkdir()
    (d / "a.warc.wat").write_text("my notes, not a WAT file\n" * 20)
    (d / "b.warc.wat.gz").write_bytes(b"\x1f\x8b\x08\x00" + bytes(range(256)) * 8)
    logs: list[str] = []
    code, err = tfds_build({"name": "x", "min_links": 2}, d, tmp_path / "tfds", logs=logs)
    line = check_one_line(
        code,
        err,
        1,
        "split(s) ['train', 'train_t', 'test'] are empty",
        "no link was read from the 2 WAT file(s): they are damaged or not WAT files",
    )
    assert "min_links" not in line.split("are empty")[1]
    # The warnings before it (TFDS logs to stdout) name each file and why.
    assert any(f"unreadable input file {d / 'a.warc.wat'}: not_warc" in line for line in logs + err)
    assert any(
        f"unreadable input file {d / 'b.warc.wat.gz'}: bad_gzip" in line for line in logs + err
    )


def test_degree_filter_emptiness_says_lower_min_links(wat_dir, tmp_path):
    code, err = tfds_build({"name": "x", "min_links": 4}, wat_dir, tmp_path / "tfds")
    check_one_line(
        code,
        err,
        1,
        "24 links were read, too few kept by min_links=4: give more input, or a lower min_links",
    )


@pytest.mark.parametrize(
    "value, tlds",
    [
        ("de", ("de",)),
        ("DE, in", ("de", "in")),
        (["рф", ".De"], ("de", "xn--p1ai")),
        ([], ()),
        ("", ()),
    ],
)
def test_config_tlds_string_or_list(value, tlds):
    assert WebGraphConfig(name="x", tlds=value).tlds == tlds


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"tlds": 5}, "tlds: expected a comma-separated string or a list of strings, got 5"),
        ({"tlds": ["de", None]}, "got ['de', None]"),
        ({"tlds": "de,xyzjunk"}, "tlds: unknown top-level domain 'xyzjunk'"),
        ({"min_links": 2.5}, "min_links must be an integer, got 2.5"),
        ({"min_links": True}, "min_links must be an integer, got True"),
        ({"seed": "0"}, "seed must be an integer"),
        ({"min_links": -1}, "min_links must be >= 0"),
        ({"degree_passes": 0}, "degree_passes must be >= 1"),
        ({"test_fraction": "0.1"}, "test_fraction must be a number, got '0.1'"),
        ({"test_fraction": 1}, "test_fraction must be in [0, 1)"),
        ({"holdout_fraction": 0}, "holdout_fraction must be in (0, 1)"),
    ],
)
def test_config_values_are_type_and_range_checked(kwargs, message):
    with pytest.raises(sources.ConfigError) as error:
        WebGraphConfig(name="bad", **kwargs)
    assert str(error.value).startswith("web_graph config 'bad': ") and message in str(error.value)


def test_advice_follows_what_was_read():
    assert sources.wat_advice(0, 3, [], 10).startswith("no link was read from the 3 WAT file(s)")
    assert sources.wat_advice(7, 1, [], 10).endswith("give more input, or a lower min_links")
    assert sources.wat_advice(7, 1, ["de"], 0).endswith("give more input, or other tlds")
    assert (
        sources.wat_advice(7, 1, [], 0)
        == "7 links were read: too few pages for the splits; give more input"
    )
    assert sources.stats_advice(
        {"dropped": {"dropped_edges.degree_filter": 9, "dropped_edges.self_loop": 2}}
    ) == ("commonest drop dropped_edges.degree_filter (9): build it again with a lower min_links")
    assert "lower min_links" not in sources.stats_advice(
        {"dropped": {"unreadable_files.not_warc": 2}}
    )
