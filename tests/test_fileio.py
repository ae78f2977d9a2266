"""fileio: TFRecord framing equal to TensorFlow's writer, local file operations, and a whole
pipeline run that never imports TensorFlow."""

from __future__ import annotations

import subprocess
import sys

import pytest

from webgraph_contract import fileio


@pytest.mark.parametrize(
    "records", [[], [b""], [b"x"], [b"\x00\xff" * 5000, b"row", bytes(range(256))]]
)
def test_tfrecord_bytes_equal_tensorflow_writer(tmp_path, records):
    import tensorflow as tf

    ours, theirs = tmp_path / "ours.tfrecord", tmp_path / "theirs.tfrecord"
    fileio.write_records(str(ours), records)
    with tf.io.TFRecordWriter(str(theirs)) as writer:
        for record in records:
            writer.write(record)
    assert ours.read_bytes() == theirs.read_bytes()
    assert [r.numpy() for r in tf.data.TFRecordDataset(str(ours))] == records
    # no temp left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ours.tfrecord", "theirs.tfrecord"]


def test_local_operations(tmp_path):
    d = tmp_path / "a" / "b"
    fileio.makedirs(str(d))
    fileio.makedirs(str(d))  # exists already: fine
    fileio.write_atomic(str(d / "t.txt"), "é\n")
    fileio.write_atomic(str(d / "t.txt"), "second\n")  # replaces
    with fileio.open_file(str(d / "t.txt")) as f:
        assert f.read() == "second\n"
    assert (
        fileio.isdir(str(d))
        and not fileio.isdir(str(d / "t.txt"))
        and fileio.exists(str(d / "t.txt"))
    )
    assert fileio.listdir(str(d)) == ["t.txt"] and fileio.glob(str(d / "*.txt")) == [
        str(d / "t.txt")
    ]
    fileio.rename(str(d / "t.txt"), str(d / "u.txt"))
    fileio.remove(str(d / "u.txt"))
    with pytest.raises(OSError):
        fileio.remove(str(d / "u.txt"))
    fileio.rmtree(str(tmp_path / "a"))
    assert not fileio.exists(str(tmp_path / "a"))


def test_a_whole_job_never_imports_tensorflow(tmp_path):
    edges = tmp_path / "edges.txt"
    edges.write_text(
        "".join(f"{s} {d}\n" for s in range(12) for d in range(12) if s != d and (s + d) % 3)
    )
    script = (
        "import sys\n"
        "from webgraph_pipeline.cli import main\n"
        f"code = main(['--input_format', 'edges', '--input', {str(edges)!r}, '--output', "
        f"{str(tmp_path / 'out')!r},"
        " '--num_shards', '2', '--test_fraction', '0.3'])\n"
        "assert code == 0, code\n"
        "print('tensorflow' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "False"
    assert (tmp_path / "out" / "stats.json").exists()


def test_a_write_that_fails_or_is_cut_leaves_no_file_of_the_name(tmp_path):
    path = tmp_path / "part.tfr-00000-of-00001"
    with pytest.raises(RuntimeError):
        with fileio.record_writer(str(path)) as write:
            write([b"x"])
            raise RuntimeError("cut")
    assert list(tmp_path.iterdir()) == []  # the temporary file is removed
    # a temporary name (where a killed writer leaves it) is hidden from the files' globs
    tmp = fileio.temp_path(str(path))
    assert tmp.startswith(str(tmp_path / ".part.tfr-00000-of-00001.tmp-"))
    assert not fileio.glob(str(tmp_path / "part.tfr-*")) and fileio.temp_path(str(path)) != tmp
