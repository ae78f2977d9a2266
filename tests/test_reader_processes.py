"""`dataset.read_chunks` decoding in worker processes (`webgraph_contract.file_workers`), forced
on a small multi-file dataset: the same chunks and the same one-line errors as the threads."""

from __future__ import annotations

import glob
import logging
import os
import subprocess
import sys

import numpy as np
import pytest

from alx_trainer.data import dataset
from alx_trainer.data.dataset import decode_mode, prefetch, read_chunks
from webgraph_contract import file_workers, fileio, record_codec

ROWS, COLS = 3000, 1 << 20


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> list[str]:
    """Three shard files of 3,000 rows each, over 1 MiB (several blocks) apiece."""
    rng = np.random.default_rng(33)
    root = tmp_path_factory.mktemp("procs")
    files = []
    for s in range(3):
        path = str(root / f"train.tfr-0000{s}-of-00003")
        rows = [
            record_codec.encode_row(r, rng.integers(0, COLS, rng.integers(0, 300)).tolist())
            for r in rng.permutation(ROWS)
        ]
        fileio.write_records(path, rows)
        files.append(path)
    assert min(os.path.getsize(f) for f in files) > 1 << 20
    return files


def read(files, chunk, processes: bool, monkeypatch, num_cols=COLS) -> list:
    monkeypatch.setattr(dataset, "PROCESS_MIN_BYTES", 0 if processes else 1 << 62)
    assert decode_mode(files, 2) == (("processes", 2) if processes else ("threads", 2))
    out = []
    for c in read_chunks(files, chunk, ROWS, num_cols, threads=2):
        assert c.row_ids.dtype == c.indptr.dtype == c.ids.dtype == np.int64
        out.append((c.row_ids.tobytes(), c.indptr.tobytes(), c.ids.tobytes()))
    return out


def leftovers() -> list[str]:
    return glob.glob(os.path.join(file_workers.SHM_DIR, f"alx-decode-{os.getpid()}-*"))


@pytest.mark.parametrize("chunk", [2048, 777, 5])
def test_processes_give_the_threads_chunks(shards, monkeypatch, chunk):
    threads = read(shards, chunk, False, monkeypatch)
    assert len(threads) > len(shards)
    assert read(shards, chunk, True, monkeypatch) == threads
    assert leftovers() == []


def test_small_reads_stay_in_threads(shards):
    assert decode_mode(shards, 2) == ("threads", 2)  # under PROCESS_MIN_BYTES
    assert decode_mode(shards[:1], 2)[0] == "threads"
    assert decode_mode(shards, 1) == ("threads", 1)


def test_reads_that_would_crowd_memory_stay_in_threads(shards, monkeypatch):
    monkeypatch.setattr(dataset, "PROCESS_MIN_BYTES", 0)
    assert decode_mode(shards, 2) == ("processes", 2)
    in_flight = 4 * sum(sorted((os.path.getsize(f) for f in shards), reverse=True)[:3])
    monkeypatch.setattr(file_workers, "available_memory", lambda: 4 * in_flight - 1)
    assert decode_mode(shards, 2) == ("threads", 2)


def _damaged(shards, tmp_path) -> list[str]:
    bad = str(tmp_path / os.path.basename(shards[1]))
    data = bytearray(open(shards[1], "rb").read())
    data[len(data) // 2] ^= 0x01
    open(bad, "wb").write(bytes(data))
    return [shards[0], bad, shards[2]]


def test_errors_are_the_threads_one_line_errors(shards, tmp_path, monkeypatch):
    cases = (  # files, num_cols, the file named, words in the message
        (_damaged(shards, tmp_path), COLS, 1, "corrupt"),
        (shards, COLS // 2, 0, "col_tag"),
    )
    for files, cols, named, word in cases:
        errors = []
        for processes in (False, True):
            with pytest.raises(ValueError) as e:
                read(files, 777, processes, monkeypatch, num_cols=cols)
            errors.append(str(e.value))
        assert errors[0] == errors[1] and len(errors[1].splitlines()) == 1, errors
        assert errors[1].startswith(files[named] + ":") and word in errors[1], errors
    assert leftovers() == []


def test_early_close_and_prefetch_thread(shards, monkeypatch):
    monkeypatch.setattr(dataset, "PROCESS_MIN_BYTES", 0)
    whole = read(shards, 512, True, monkeypatch)
    it = read_chunks(shards, 512, ROWS, COLS, threads=2)
    next(it)
    it.close()  # the workers are killed, their output removed
    assert leftovers() == []
    ahead = prefetch(lambda: read_chunks(shards, 512, ROWS, COLS, threads=2))
    got = [(c.row_ids.tobytes(), c.indptr.tobytes(), c.ids.tobytes()) for c in ahead]
    assert got == whole and leftovers() == []


def test_a_worker_imports_numpy_and_the_contract_only(shards, tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.abspath(file_workers.__file__)))
    code = (
        f"import sys; sys.path.insert(0, {root!r}); from webgraph_contract import file_workers; "
        f"print(file_workers.decode_file({shards[0]!r}, {ROWS}, {COLS}, {str(tmp_path / 'o')!r}));"
        "print(sorted({m.split('.')[0] for m in sys.modules}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    n_rows, modules = out.stdout.splitlines()
    assert eval(n_rows)[0] > 0
    assert not {"jax", "alx_trainer", "tensorflow"} & set(eval(modules))


def test_processes_that_cannot_write_hand_over_to_threads(shards, monkeypatch, tmp_path, caplog):
    whole = read(shards, 777, False, monkeypatch)
    monkeypatch.setattr(dataset, "PROCESS_MIN_BYTES", 0)
    monkeypatch.setattr(file_workers, "shm_free_bytes", lambda: 1 << 62)
    monkeypatch.setattr(file_workers, "SHM_DIR", str(tmp_path / "missing"))  # workers fail
    with caplog.at_level(logging.WARNING, logger=dataset.__name__):
        got = [
            (c.row_ids.tobytes(), c.indptr.tobytes(), c.ids.tobytes())
            for c in read_chunks(shards, 777, ROWS, COLS, threads=2)
        ]
    assert got == whole
    assert any("the rest in threads" in r.getMessage() for r in caplog.records)
