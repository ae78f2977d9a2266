"""Nothing lost, nothing mixed, through the real command line (`python -m webgraph_pipeline` in a
subprocess): every input file ends read, partly read (where) or unreadable (why); bad input is
refused with one line and the right exit status; the previous dataset survives; TLDs are
normalized and checked; stale staging directories are cleaned up only when they are ours and dead.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

from webgraph_contract import staged_dir
from webgraph_pipeline import output_dir

from extract_fixtures import a_links, envelope, wat_bytes  # noqa: E402  (tests/ is on sys.path)
from test_pipeline_graph import read_split, read_vocab  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ERROR = "webgraph_pipeline: error: "


@dataclasses.dataclass
class Run:
    code: int
    out: str
    err: str

    @property
    def errors(self) -> list[str]:
        """The error lines the command printed (one expected on failure; no traceback ever)."""
        assert "Traceback" not in self.err, self.err[-3000:]
        return [line for line in self.err.splitlines() if line.startswith(ERROR)]


def cli(*args, env=None) -> Run:
    environment = dict(os.environ, PYTHONPATH=REPO, **(env or {}))
    done = subprocess.run(
        [sys.executable, "-m", "webgraph_pipeline", *map(str, args)],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return Run(done.returncode, done.stdout, done.stderr)


def snapshot(directory) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def no_staging_beside(out) -> bool:
    return not [p for p in out.parent.iterdir() if output_dir.STAGING_TAG in p.name]


# A hand-made graph: page i links to pages i+1..i+3 (mod 8) of its site; every record intact.
def page(site: str, i: int) -> dict:
    return envelope(f"http://{site}/p{i}", a_links(*[f"/p{(i + k) % 8}" for k in (1, 2, 3)]))


def edges_of(site: str, pages) -> set[tuple[str, str]]:
    return {
        (f"http://{site}/p{i}", f"http://{site}/p{(i + k) % 8}") for i in pages for k in (1, 2, 3)
    }


@pytest.fixture(scope="module")
def wats(tmp_path_factory, data_dir):
    """good, damaged (record 3 of 8 corrupt), cut (inside its last record), and three unreadable
    files."""
    d = tmp_path_factory.mktemp("wat")
    good, _ = wat_bytes([page("good.de", i) for i in range(8)])
    (d / "good.warc.wat.gz").write_bytes(good)
    data, offsets = wat_bytes([page("damaged.de", i) for i in range(8)])
    broken = bytearray(data)
    broken[offsets[2] + 30 : offsets[2] + 60] = bytes(30)  # inside record 3's gzip member
    (d / "damaged.warc.wat.gz").write_bytes(bytes(broken))
    data, cut_offsets = wat_bytes([page("cut.de", i) for i in range(8)])
    (d / "cut.warc.wat.gz").write_bytes(data[: (cut_offsets[7] + len(data)) // 2])
    (d / "garbage.warc.wat.gz").write_bytes(b"\x1f\x8b\x08\x00" + bytes(range(256)) * 8)
    (d / "notes.warc.wat").write_text("my notes, not a WAT file\n" * 20)
    shutil.copy(
        data_dir / "commoncrawl" / "CC-MAIN-20140820021334-00006.head.warc",
        d / "responses.warc.wat",
    )
    return d, {"damaged": (offsets[2], 3), "cut": (cut_offsets[7], 8)}


# file: (status, reason)
BAD = {
    "damaged.warc.wat.gz": ("partly_read", "corrupt_region"),
    "cut.warc.wat.gz": ("partly_read", "truncated_record"),
    "garbage.warc.wat.gz": ("unreadable", "bad_gzip"),
    "notes.warc.wat": ("unreadable", "not_warc"),
    "responses.warc.wat": ("unreadable", "not_wat"),
}


@pytest.fixture(scope="module")
def previous(wats, tmp_path_factory):
    """A finished dataset from the good file: what a failed run must leave byte-identical."""
    d, _ = wats
    out = tmp_path_factory.mktemp("previous") / "out"
    run = cli(
        "--input",
        d / "good.warc.wat.gz",
        "--output",
        out,
        "--test_fraction",
        "0",
        "--num_shards",
        "1",
    )
    assert run.code == 0, run.err[-2000:]
    return out


def test_every_wat_file_is_accounted_for(wats, tmp_path):
    d, where = wats
    out = tmp_path / "out"
    run = cli("--input", d / "*.wat*", "--output", out, "--test_fraction", "0", "--num_shards", "2")
    assert run.code == 0 and run.errors == []
    stats = json.loads((out / "stats.json").read_text())
    expected_problems = [
        {
            "file": str(d / name),
            "status": status,
            "reason": reason,
            "detail": "byte {} (record {})".format(*where[name.split(".")[0]]),
        }
        for name, (status, reason) in BAD.items()
        if status == "partly_read"
    ]
    got = {p["file"]: p for p in stats["file_problems"]}
    assert sorted(got) == sorted(str(d / n) for n in BAD)
    for problem in expected_problems:
        assert got[problem["file"]] == problem
    for name, (status, reason) in BAD.items():
        assert (got[str(d / name)]["status"], got[str(d / name)]["reason"]) == (status, reason), (
            name
        )
        assert str(d / name) in run.out  # named in the summary too
    assert (
        "UNREADABLE input files (3):" in run.out
        and "PARTLY READ (damaged) input files (2):" in run.out
    )
    assert stats["unreadable_files"] == sorted(
        str(d / n) for n, (s, _) in BAD.items() if s == "unreadable"
    )
    counters = stats["counters"]
    assert counters["files.matched"] == 6
    assert (
        counters["files.read"],
        counters["files.partly_read"],
        counters["files.unreadable"],
    ) == (1, 2, 3)
    assert counters["unreadable_files.not_warc"] == counters["unreadable_files.not_wat"] == 1
    # Nothing lost: every intact record of the damaged files is in the graph (record 3 of damaged
    # and the cut record 8 are not), and nothing of the unreadable ones.
    vocab = read_vocab(out)
    got_edges = {(vocab[r], vocab[c]) for r, cols, _ in read_split(out, "train") for c in cols}
    expected = (
        edges_of("good.de", range(8))
        | edges_of("damaged.de", {0, 1, 3, 4, 5, 6, 7})
        | edges_of("cut.de", range(7))
    )
    assert got_edges == expected


# damaged stands for partly read
@pytest.mark.parametrize("name", sorted(set(BAD) - {"cut.warc.wat.gz"}))
def test_fail_on_unreadable_fires_for_each_kind(name, wats, previous, tmp_path):
    d, where = wats
    out = tmp_path / "out"
    shutil.copytree(previous, out)
    before = snapshot(out)
    run = cli(
        "--input",
        d / "good.warc.wat.gz",
        "--input",
        d / name,
        "--output",
        out,
        "--fail_on_unreadable",
    )
    status, reason = BAD[name]
    assert run.code == 1 and len(run.errors) == 1, run.err[-2000:]
    assert f"{status.replace('_', ' ')} input file {d / name}: {reason}" in run.errors[0]
    assert "--fail_on_unreadable" in run.errors[0] and f"{out} is unchanged" in run.errors[0]
    assert snapshot(out) == before and no_staging_beside(out)


def test_no_readable_input_is_an_error_even_with_allow_empty(wats, previous, tmp_path):
    d, _ = wats
    out = tmp_path / "out"
    shutil.copytree(previous, out)
    before = snapshot(out)
    run = cli(
        "--input",
        d / "notes.warc.wat",
        "--input",
        d / "garbage.warc.wat.gz",
        "--output",
        out,
        "--allow_empty",
    )
    assert run.code == 1 and len(run.errors) == 1
    assert "no input file could be read:" in run.errors[0] and "(bad_gzip)" in run.errors[0]
    assert "(not_warc)" in run.errors[0] and "min_links" not in run.errors[0]
    assert snapshot(out) == before


# Edge lists and flags --------------------------------------------------------------------------

RING = "".join(
    f"{s} {d}\n" for s in range(12) for d in range(12) if s != d and (d - s) % 12 in (1, 2, 5)
)


def test_tlds_are_idna_encoded_and_match_idn_hosts(tmp_path):
    """`--tlds РФ` is xn--p1ai, the TLD of the punycode hosts: the .рф triangle stays, the .de page
    goes."""
    edges = tmp_path / "idn.txt"
    ru = ["http://а.рф/", "http://б.рф/", "http://в.рф/"]
    lines = [f"{a} {b}" for a in ru for b in ru if a != b] + [
        f"http://x.de/ {ru[0]}",
        f"{ru[1]} http://x.de/",
    ]
    edges.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    run = cli(
        "--edge_format",
        "pairs",
        "--input",
        edges,
        "--output",
        out,
        "--tlds",
        "РФ",
        "--test_fraction",
        "0",
    )
    assert run.code == 0, run.err[-2000:]
    stats = json.loads((out / "stats.json").read_text())
    assert stats["config"]["tlds"] == ["xn--p1ai"]
    assert (stats["nodes"], stats["edges"]) == (3, 6) and stats["counters"][
        "dropped_edges.tld_filter"
    ] == 2
    # The hosts as the standard library's IDNA codec spells them.
    assert sorted(read_vocab(out).values()) == sorted(
        f"http://{h.encode('idna').decode()}/" for h in ["а.рф", "б.рф", "в.рф"]
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--tlds", "ü"],
            "--tlds: unknown top-level domain 'ü' ('xn--tda'): not a TLD of the Public Suffix List",
        ),
        (["--tlds", "de,xyzjunk"], "--tlds: unknown top-level domain 'xyzjunk'"),
        (["--test_fraction", "1"], "test_fraction must be in [0, 1) (1 leaves no training row)"),
    ],
)
def test_bad_flag_values_exit_2_before_reading(args, message, tmp_path):
    out = tmp_path / "out"
    run = cli(
        "--edge_format", "pairs", "--input", "/nonexistent/never-read.txt", "--output", out, *args
    )
    # Flags are checked before the input: the missing input is not what is reported.
    assert run.code == 2 and len(run.errors) == 1 and run.errors[0].startswith(ERROR + message), (
        run.errors
    )
    assert not out.exists()


def test_edge_lists_bad_lines_bad_files_and_duplicate_ids(tmp_path):
    """Non-UTF-8 lines (Latin-1, a NUL byte, an undecodable last line without newline) are dropped,
    counted and located; a garbage gzip edge list is named unreadable and the rest goes on (or the
    job stops with --fail_on_unreadable); an id the URL list gives twice is counted once."""
    edges = tmp_path / "mixed.txt"
    lines = RING.encode().splitlines(keepends=True)
    lines.insert(2, "caf\xe9 1\n".encode("latin-1"))  # line 3: Latin-1, not UTF-8
    lines.insert(4, b"2\x003 4\n")  # line 5: a NUL byte
    lines.append(b"\xff\xfe 7")  # the last line, no newline
    edges.write_bytes(b"".join(lines))
    bad = tmp_path / "bad.txt.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00" + bytes(range(256)) * 8)
    urls = tmp_path / "urls.txt"
    urls.write_text(
        "".join(f"{i} http://p{i}.example.org/\n" for i in range(12))
        + "5 http://other.example.org/\n"
    )
    out = tmp_path / "out"
    args = [
        "--edge_format",
        "pairs",
        "--input",
        edges,
        "--input",
        bad,
        "--urls",
        urls,
        "--output",
        out,
    ]
    run = cli(*args, "--test_fraction", "0")
    assert run.code == 0 and run.errors == [], run.err[-2000:]
    stats = json.loads((out / "stats.json").read_text())
    last = len(lines)
    assert stats["counters"]["dropped_lines.undecodable"] == 3
    assert stats["line_examples"]["dropped_lines.undecodable"] == [
        f"{edges}:3",
        f"{edges}:5",
        f"{edges}:{last}",
    ]
    assert (
        f"first lines of dropped_lines.undecodable: {edges}:3, {edges}:5, {edges}:{last}" in run.out
    )
    assert stats["edges"] == len(RING.splitlines()) and stats["nodes"] == 12
    assert (
        stats["unreadable_files"] == [str(bad)]
        and stats["file_problems"][0]["reason"] == "bad_gzip"
    )
    assert stats["counters"]["files.read"] == 1 and stats["counters"]["files.unreadable"] == 1
    assert f"unreadable input file {bad}: bad_gzip" in run.out
    assert stats["counters"]["dropped_url_list.duplicate_id"] == 1
    before = snapshot(out)
    run = cli(*args, "--fail_on_unreadable")
    assert (
        run.code == 1
        and len(run.errors) == 1
        and f"unreadable input file {bad}: bad_gzip" in run.errors[0]
    )
    assert snapshot(out) == before


@pytest.mark.parametrize("case", ["utf16", "csv_as_pairs", "empty_file"])
def test_empty_results_exit_1_naming_the_reason(case, tmp_path, previous):
    path = tmp_path / "edges.txt"
    if case == "utf16":
        path.write_bytes(RING.encode("utf-16"))
        message = f"{path}: no edge read; commonest reason dropped_lines.undecodable"
    elif case == "csv_as_pairs":
        path.write_text(RING.replace(" ", ","))
        message = f"{path}: no edge read; commonest reason dropped_lines.too_few_fields"
    else:
        path.write_text("")
        message = f"{path}: no edge read; commonest reason no line"
    out = tmp_path / "out"
    shutil.copytree(previous, out)
    before = snapshot(out)
    run = cli("--edge_format", "pairs", "--input", path, "--output", out)
    assert run.code == 1 and len(run.errors) == 1 and message in run.errors[0], run.errors
    assert snapshot(out) == before


# Staging directories left by kill -9 -----------------------------------------------------------


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def stale(out, tag: str, owner) -> str:
    path = f"{out}{output_dir.STAGING_TAG}{tag}"
    os.makedirs(path)
    with open(os.path.join(path, "train.tfr-00000-of-00001"), "w") as f:
        f.write("half-written")
    if owner is not None:
        with open(os.path.join(path, output_dir.OWNER_FILE), "w") as f:
            json.dump(owner, f)
    return path


def test_next_run_removes_dead_staging_and_keeps_the_rest(tmp_path):
    edges = tmp_path / "edges.txt"
    edges.write_text(RING)
    out = tmp_path / "out"
    dead = stale(
        out, "0123456789ab", {"host": socket.gethostname(), "pid": dead_pid(), "start": None}
    )
    unowned = stale(out, "ba9876543210", None)
    elsewhere = stale(out, "aaaaaaaaaaaa", {"host": "another-host", "pid": 1, "start": None})
    not_ours = f"{out}{output_dir.STAGING_TAG}mine"  # not a name our rule makes
    os.makedirs(not_ours)
    run = cli("--edge_format", "pairs", "--input", edges, "--output", out, "--test_fraction", "0")
    assert run.code == 0, run.err[-2000:]
    assert not os.path.exists(dead) and f"removed {dead}, left by process" in run.err
    assert all(os.path.exists(p) for p in (unowned, elsewhere, not_ours))
    assert f"left {unowned} in place (no owner marker)" in run.err
    assert f"left {elsewhere} in place (host another-host)" in run.err
    assert output_dir.OWNER_FILE not in os.listdir(out)  # the marker never reaches the dataset


def test_a_live_writer_of_the_same_output_is_not_disturbed(tmp_path):
    edges = tmp_path / "edges.txt"
    edges.write_text(RING)
    out = tmp_path / "out"
    me = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "start": staged_dir.process_start(os.getpid()),
    }
    live = stale(out, "cafecafecafe", me)
    run = cli("--edge_format", "pairs", "--input", edges, "--output", out)
    assert run.code == 2 and len(run.errors) == 1
    assert f"is being written by process {os.getpid()} ({live})" in run.errors[0]
    assert os.path.exists(live) and not out.exists()


def test_a_dataset_parked_by_an_interrupted_swap_is_put_back(tmp_path):
    out = tmp_path / "out"
    parked = f"{out}{output_dir.STAGING_TAG}old-0123456789ab"
    os.makedirs(parked)
    with open(os.path.join(parked, "stats.json"), "w") as f:
        f.write("{}")
    assert output_dir.clean_stale_staging(str(out)) == []
    assert (out / "stats.json").read_text() == "{}" and not os.path.exists(parked)
    os.makedirs(parked)
    # the swap had finished: just leftovers
    assert output_dir.clean_stale_staging(str(out)) == [parked]
    assert (out / "stats.json").exists()


def test_multi_process_runs_list_every_file_and_example(tmp_path):
    """The lists of stats.json and the summary come whole from several worker processes: every
    unreadable and partly read file, and the first line examples of a reason found in many files
    (Beam's local runner kept one worker's string-set metric and dropped the others')."""
    bad = []
    for i in range(4):
        bad.append(tmp_path / f"bad{i}.gz")
        bad[-1].write_bytes(b"a b\nc d\n")  # no gzip
    for i in range(6):
        (tmp_path / f"short{i}.txt").write_text(f"n{i} n{i + 1}\nlonely{i}\n")  # line 2: 1 field
    text = "".join(f"m{i} m{i + 1}\n" for i in range(3000)).encode()
    cut = tmp_path / "cut.gz"
    cut.write_bytes(gzip.compress(text, mtime=0)[:2000])
    out = tmp_path / "out"
    run = cli(
        "--edge_format",
        "pairs",
        "--input",
        tmp_path / "*.gz",
        "--input",
        tmp_path / "short*.txt",
        "--output",
        out,
        "--test_fraction",
        "0",
        "--direct_running_mode",
        "multi_processing",
        "--direct_num_workers",
        "2",
    )
    assert run.code == 0 and run.errors == [], run.err[-2000:]
    stats = json.loads((out / "stats.json").read_text())
    assert stats["counters"]["unreadable_files.bad_gzip"] == 4
    assert stats["unreadable_files"] == [str(p) for p in bad]
    assert stats["partly_read_files"] == [str(cut)]
    assert len(stats["file_problems"]) == 5
    assert (
        "UNREADABLE input files (4):" in run.out
        and "PARTLY READ (damaged) input files (1):" in run.out
    )
    assert stats["line_examples"]["dropped_lines.too_few_fields"] == [
        f"{tmp_path / f'short{i}.txt'}:2" for i in range(5)
    ]
