"""Decoding whole TFRecord files in worker processes: the host's cores without the GIL.

`decode_files` runs `workers` fresh interpreters (`python -c`, started by `subprocess`: a spawn
that never forks the parent, which may run JAX's threads, and that imports nothing of the
parent's `__main__`, as multiprocessing's spawn and forkserver would: a worker imports only
NumPy and this package). Each worker takes one file at a time over a pipe, checks and decodes
it a block at a time as `dataset_reader.iter_file_rows` does (and checks its ids), and appends
each block's arrays to three files in `/dev/shm` (memory); the parent maps them copy-on-write and
unlinks them, so a file's arrays cross from the worker at the cost of one copy there and none
here. Errors (a corrupt record, an id outside the matrix) come back as the worker raised them:
the same one-line ValueError naming the file and byte offset as the threads give.

The workers' plumbing serves other jobs too: `start` a worker of a module whose `serve` loops on
`serve_jobs`, `send` it jobs, `receive` their results, `stop` the workers; `WorkerPool` hands a list
of jobs to idle workers (`dataset_writer`'s shards).
"""

from __future__ import annotations

import mmap
import os
import pickle
import selectors
import subprocess
import sys
import uuid
from typing import Any, BinaryIO, Callable, Iterator, Sequence

import numpy as np

from webgraph_contract.ragged import RaggedRows

SHM_DIR = "/dev/shm"
_PARTS = ("rows", "ptr", "cols")  # row tags [n], column pointer [n + 1], columns [nnz]
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def available_memory() -> int:
    """Bytes of memory the host could still give (Linux's MemAvailable; else free pages)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def shm_free_bytes() -> int:
    """Bytes free in `SHM_DIR` (0 when there is none to write)."""
    try:
        if not os.access(SHM_DIR, os.W_OK):
            return 0
        s = os.statvfs(SHM_DIR)
        return s.f_bavail * s.f_frsize
    except OSError:
        return 0


def decode_files(
    files: Sequence[str], num_rows: int, num_cols: int, workers: int, threads: int = 1
) -> Iterator[RaggedRows]:
    """Each of `files` (local paths), in order, as its rows (row tags, column pointer from 0,
    columns: int64 arrays, writable, copy-on-write maps of the worker's output), the ids checked
    against `[0, num_rows)` and `[0, num_cols)`.

    `workers` processes (started here, ended when the iterator ends, is closed or raises) decode
    one file each at a time, `threads` threads each (`dataset_reader.iter_file_rows`; 1: in the
    worker's own thread). At most `workers` files are in flight beyond the one the caller holds,
    so memory holds at most `workers` + 1 files' decoded arrays (about 2.5 times the files'
    bytes) in `SHM_DIR` and here, plus a block's decoding in each worker.
    """
    workers = max(1, min(workers, len(files)))
    tag = f"alx-decode-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    procs: list[subprocess.Popen] = []
    sent = 0
    finished = False

    def submit() -> None:
        nonlocal sent
        job = (files[sent], num_rows, num_cols, os.path.join(SHM_DIR, f"{tag}-{sent}"), threads)
        send(procs[sent % workers], job)
        sent += 1

    try:
        for _ in range(workers):
            procs.append(start(__name__))
        while sent < min(workers, len(files)):
            submit()
        for i in range(len(files)):
            value = receive(procs[i % workers], f"{files[i]}: the decoding worker")
            if sent < len(files):
                submit()
            yield _take(os.path.join(SHM_DIR, f"{tag}-{i}"), *value)
        finished = True
    finally:
        # closed early or failed: the files in flight are not wanted
        stop(procs, kill=not finished)
        for i in range(sent):
            for part in _PARTS:
                try:
                    os.unlink(os.path.join(SHM_DIR, f"{tag}-{i}.{part}"))
                except FileNotFoundError:
                    pass


def start(module: str) -> subprocess.Popen:
    """A fresh interpreter running `module.serve()` (a loop of `serve_jobs`), jobs on its stdin
    and replies on its stdout (`send`, `receive`)."""
    code = f"import sys; sys.path.insert(0, {_ROOT!r}); from {module} import serve; serve()"
    return subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )


def send(proc: subprocess.Popen, job: tuple) -> None:
    """Hand a job to a worker."""
    pickle.dump(job, proc.stdin, pickle.HIGHEST_PROTOCOL)
    proc.stdin.flush()


def receive(proc: subprocess.Popen, what: str) -> Any:
    """A worker's result of its job; the exception it raised is raised here, and a RuntimeError
    naming `what` when it ended."""
    try:
        status, value = pickle.load(proc.stdout)
    except EOFError:
        raise RuntimeError(f"{what} ended (exit code {proc.wait()})") from None
    if status != "ok":
        raise value
    return value


def stop(procs: Sequence[subprocess.Popen], kill: bool) -> None:
    """End the workers: at the end of their input (killed first with `kill`: their jobs in flight
    are not wanted); one still busy after 5 s is killed."""
    for p in procs:
        if kill:
            p.kill()
        if p.stdin:
            try:
                # the worker ends at the end of its input
                p.stdin.close()
            except OSError:
                pass
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            # still working on a job no one wants
            p.kill()
            p.wait()
        if p.stdout:
            p.stdout.close()


class WorkerPool:
    """`count` workers of `module` (`start`); `run(jobs)` hands them the jobs, a job to each idle
    one, and returns the results in the jobs' order (a worker's exception is raised here)."""

    def __init__(self, module: str, count: int, what: str = "a worker"):
        self.module, self.count, self.what = module, max(1, count), what
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> WorkerPool:
        self.procs = [start(self.module) for _ in range(self.count)]
        return self

    def run(self, jobs: Sequence[tuple]) -> list[Any]:
        """Each job's result, in the jobs' order."""
        results: list[Any] = [None] * len(jobs)
        pending = iter(enumerate(jobs))
        # worker -> the index of its job
        busy: dict[int, int] = {}
        with selectors.DefaultSelector() as sel:

            def give(w: int) -> None:
                nxt = next(pending, None)
                if nxt is not None:
                    busy[w] = nxt[0]
                    send(self.procs[w], nxt[1])

            for w, p in enumerate(self.procs):
                sel.register(p.stdout, selectors.EVENT_READ, w)
                give(w)
            while busy:
                for key, _ in sel.select():
                    w = key.data
                    results[busy.pop(w)] = receive(self.procs[w], self.what)
                    give(w)
        return results

    def __exit__(self, *exc) -> None:
        stop(self.procs, kill=exc[0] is not None)


def _take(prefix: str, n_rows: int, n_cols: int) -> RaggedRows:
    """The arrays a worker wrote at `prefix`, mapped copy-on-write; the files unlinked."""
    out = []
    for part, n in zip(_PARTS, (n_rows, n_rows + 1, n_cols)):
        path = f"{prefix}.{part}"
        with open(path, "rb") as f:
            os.unlink(path)
            if n == 0:
                out.append(np.zeros(0, np.int64))
                continue
            m = mmap.mmap(f.fileno(), 8 * n, access=mmap.ACCESS_COPY)
        out.append(np.frombuffer(m, np.int64, n))
    return RaggedRows(out[0], out[1], out[2])


def serve() -> None:
    """A decoding worker's loop (`serve_jobs` of `decode_file`)."""
    serve_jobs(lambda job: decode_file(*job))


def serve_jobs(run: Callable[[tuple], Any]) -> None:
    """A worker's loop: a job from stdin, `run(job)`'s outcome to stdout, until stdin ends."""
    stdin, out = sys.stdin.buffer, os.fdopen(os.dup(1), "wb")
    # stray prints go to stderr, not into the replies
    os.dup2(2, 1)
    while True:
        try:
            job = pickle.load(stdin)
        except EOFError:
            return
        try:
            reply: tuple = ("ok", run(job))
        # handed to the parent, which raises it
        except Exception as e:
            reply = ("error", _portable(e))
        pickle.dump(reply, out, pickle.HIGHEST_PROTOCOL)
        out.flush()


def _portable(e: Exception) -> Exception:
    """`e` if it pickles back as itself, else a RuntimeError with its message."""
    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:
        return RuntimeError(f"{type(e).__name__}: {e}")


def decode_file(
    path: str, num_rows: int, num_cols: int, prefix: str, threads: int = 1
) -> tuple[int, int]:
    """Decode `path` (its checksums and ids checked) into `prefix`.rows/.ptr/.cols, raw int64
    arrays; (rows, columns) written."""
    from webgraph_contract import dataset_reader

    blocks = dataset_reader.iter_file_rows(path, threads if threads > 1 else 0)  # 0: this thread
    n_rows = n_cols = 0
    files: list[BinaryIO] = [open(f"{prefix}.{part}", "wb") for part in _PARTS]
    try:
        rows_f, ptr_f, cols_f = files
        ptr_f.write(np.zeros(1, np.int64).tobytes())
        for block in blocks:
            rows = block.col_tag
            dataset_reader.check_ids(path, rows, num_rows, num_cols)
            rows_f.write(np.ascontiguousarray(rows.row_ids, np.int64).data)
            ptr_f.write(np.ascontiguousarray(rows.indptr[1:] + n_cols, np.int64).data)
            cols_f.write(np.ascontiguousarray(rows.ids, np.int64).data)
            n_rows, n_cols = n_rows + len(rows), n_cols + len(rows.ids)
    finally:
        for f in files:
            f.close()
    return n_rows, n_cols
