"""A gzip stream decompressed as it is read, that keeps what came before damage (plain, no Beam).

Public API:

- `Gunzip(raw, cut_short_ok=True)`: a raw (unbuffered, not seekable) binary stream of the
  decompressed data of `raw` (one or more gzip members). Bad compressed data raises `zlib.error`
  on the read that meets it; every byte before it has been returned by earlier reads. A stream
  that ends without the end-of-stream marker (a file cut short, or one holding only a gzip
  header) reads as an early end with `cut_short_ok` (the WAT readers then see a truncated
  record), else its last read raises `EOFError` after every byte decompressed before the cut, so
  a caller can tell a cut file from a whole one (Beam's and Python's `GzipFile` either lose the
  data before the cut or say nothing). A file of no byte at all is an empty stream.
"""

from __future__ import annotations

import io
import zlib
from typing import IO

READ_CHUNK = 1 << 20  # compressed bytes read at a time
CUT_SHORT = "Compressed file ended before the end-of-stream marker was reached"


class Gunzip(io.RawIOBase):
    """The decompressed data of a gzip stream (see the module docstring)."""

    def __init__(self, raw: IO[bytes], cut_short_ok: bool = True):
        self._raw = raw
        self._cut_short_ok = cut_short_ok
        self._inflate = zlib.decompressobj(31)
        self._buffer = b""
        self._pos = 0
        self._started = False  # some compressed byte was read
        self._done = False
        self._cut = False  # the stream ended without its end-of-stream marker

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self._raw.close()
        super().close()

    def _fill(self) -> None:
        while self._pos >= len(self._buffer) and not self._done:
            if self._cut:
                raise EOFError(CUT_SHORT)
            chunk = self._raw.read(READ_CHUNK)
            if not chunk:
                data = self._inflate.flush()
                # Cut short: raise once `data` (what was decompressed before the cut) is read.
                self._cut = self._started and not self._inflate.eof and not self._cut_short_ok
                self._done = not self._cut
            else:
                self._started = True
                data = self._inflate.decompress(chunk)
                while self._inflate.eof and self._inflate.unused_data:  # next member
                    rest = self._inflate.unused_data
                    self._inflate = zlib.decompressobj(31)
                    data += self._inflate.decompress(rest)
            self._buffer, self._pos = data, 0

    def readinto(self, buffer) -> int:
        self._fill()
        n = min(len(buffer), len(self._buffer) - self._pos)
        buffer[:n] = self._buffer[self._pos : self._pos + n]
        self._pos += n
        return n
