"""File operations on local paths and object stores (gs://, s3://, ...), one layer for every tool.

Local paths go through `os`, `shutil` and `open`; a path with a scheme goes through fsspec, the
filesystem interface that gcsfs (gs://), s3fs (s3://) and adlfs implement and that etils.epath,
orbax's path layer, itself uses without TensorFlow: one small pure-Python package in the base
install, with the store's own package (`pip install gcsfs`) added only by who needs it. Every
failure is an `OSError`, so callers catch one type whatever the path.

`write_records` writes a TFRecord file (framed by `tfrecord.frames`) under a temporary name.
"""

from __future__ import annotations

import contextlib
import glob as _glob
import os
import shutil
import uuid
from typing import IO, Any, Callable, Iterable, Iterator, TypeVar

from webgraph_contract import tfrecord

T = TypeVar("T")


def is_local(path: str) -> bool:
    """Whether a path is on the local filesystem (no `scheme://`, or `file://`)."""
    return "://" not in path


def absolute(path: str) -> str:
    """A local path made absolute; a path with a scheme as it is."""
    return os.path.abspath(path) if is_local(path) else path


def _filesystem(path: str) -> Any:
    """The fsspec filesystem of `path`; an OSError naming the package a scheme needs when it is
    missing."""
    import fsspec

    protocol = path.split("://", 1)[0]
    try:
        return fsspec.filesystem(protocol)
    except (ImportError, ValueError) as e:
        extra = {
            "gs": " (pip install 'webgraph-alx[gcs]')",
            "s3": " (pip install 'webgraph-alx[s3]')",
        }.get(protocol, "")
        raise OSError(
            f"{path}: cannot open {protocol}:// paths: {str(e).splitlines()[0]}{extra}"
        ) from None


def _on(path: str, local: Callable[..., T], remote: str, *args) -> T:
    """`local(path, *args)` for a local path, else the fsspec filesystem's `remote(path, *args)`."""
    if is_local(path):
        return local(path, *args)
    fs = _filesystem(path)
    try:
        return getattr(fs, remote)(path, *args)
    except OSError:
        raise
    except Exception as e:  # noqa: BLE001 - stores raise their own types; callers catch OSError
        raise OSError(f"{path}: {type(e).__name__}: {e}") from None


def exists(path: str) -> bool:
    return _on(path, os.path.exists, "exists")


def isdir(path: str) -> bool:
    return _on(path, os.path.isdir, "isdir")


def listdir(path: str) -> list[str]:
    """The entry names of a directory (without a trailing slash)."""
    if is_local(path):
        return os.listdir(path)
    return [e.rstrip("/").rsplit("/", 1)[-1] for e in _on(path, os.listdir, "ls", False)]


def makedirs(path: str) -> None:
    if is_local(path):
        os.makedirs(path, exist_ok=True)
    else:
        _on(path, os.makedirs, "makedirs", True)


def remove(path: str) -> None:
    _on(path, os.remove, "rm_file")


def rmtree(path: str) -> None:
    if is_local(path):
        shutil.rmtree(path)
    else:
        _on(path, shutil.rmtree, "rm", True)


def rename(src: str, dst: str) -> None:
    """Move `src` to `dst`, replacing a file there."""
    if is_local(src) and is_local(dst):
        os.replace(src, dst)
        return
    _on(src, os.replace, "mv", dst)


def glob(pattern: str) -> list[str]:
    """The paths matching `pattern`, with the pattern's scheme."""
    if is_local(pattern):
        return _glob.glob(pattern)
    fs = _filesystem(pattern)
    return [fs.unstrip_protocol(p) for p in _on(pattern, _glob.glob, "glob")]


@contextlib.contextmanager
def open_file(path: str, mode: str = "r") -> Iterator[IO]:
    """A file object for reading or writing (`r`, `w`, `rb`, `wb`); text is UTF-8."""
    if is_local(path):
        with open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            yield f
        return
    handle = _on(path, open, "open", mode, *([] if "b" in mode else [-1, "utf-8"]))
    with handle as f:
        yield f


TEMP_SUFFIX = r"\.tmp-[0-9a-f]{32}"  # regex of what a temporary name adds to the file's name


def temp_path(path: str) -> str:
    """A unique temporary name beside `path`: `.NAME.tmp-HEX`, hidden, so that no glob of the
    files themselves (`NAME-*`) matches a temporary file a killed writer left."""
    head, name = os.path.split(path)
    return os.path.join(head, f".{name}.tmp-{uuid.uuid4().hex}")


@contextlib.contextmanager
def replacing(path: str, mode: str) -> Iterator[IO]:
    """A file written under a temporary name (`temp_path`) and renamed to `path` once complete;
    the temporary file is removed when the block raises."""
    tmp = temp_path(path)
    try:
        with open_file(tmp, mode) as f:
            yield f
    except BaseException:
        with contextlib.suppress(OSError):
            remove(tmp)
        raise
    rename(tmp, path)


def write_atomic(path: str, data: str | bytes) -> None:
    """Write a whole file under a temporary name, then rename it into place."""
    with replacing(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)


@contextlib.contextmanager
def record_writer(path: str) -> Iterator[Callable[[Iterable[bytes]], None]]:
    """A function appending records to a TFRecord file (uncompressed), which appears at `path`
    complete, renamed from a temporary name, when the block ends without an error."""
    with replacing(path, "wb") as f:
        # one write: faster than writelines
        yield lambda records: f.write(b"".join(tfrecord.frames(records)))


def read_records(path: str) -> Iterator[bytes]:
    """Every record of a TFRecord file as bytes, checksums checked (for small files and tools)."""
    with open_file(path, "rb") as f:
        yield from tfrecord.read_records(f, path)


def write_records(path: str, records: Iterable[bytes]) -> None:
    """Write a TFRecord file (uncompressed) under a temporary name, then rename it into place."""
    with record_writer(path) as write:
        write(records)
