"""TFRecord files without TensorFlow: records framed and unframed, every CRC-32C checked.

A TFRecord file is a sequence of records, each `length` (uint64 LE), the masked CRC-32C of those
8 bytes, `length` bytes of data and the masked CRC-32C of the data (google-crc32c computes the
checksums). `frames` makes the pieces of a file (`fileio.write_records` writes them);
`read_blocks` reads an open one back in blocks of about `BLOCK_BYTES`, so memory stays bounded
whatever the file's size, and fails with one line naming the file and the byte offset of the bad
record. No file is opened here: `fileio` (local and remote paths) does that.
"""

from __future__ import annotations

import dataclasses
import functools
import struct
from typing import BinaryIO, Callable, Iterable, Iterator

import numpy as np

BLOCK_BYTES = 1 << 20  # bytes read per block (a record longer than this is read whole); see
# `dataset_reader.iter_file_rows` for why not more
HEADER_BYTES = 12  # length and its masked CRC
FOOTER_BYTES = 4  # masked CRC of the data
_MASK_DELTA = 0xA282EAD8


class RecordError(ValueError):
    """A TFRecord file is corrupt, truncated or not a TFRecord file."""


def _crc32c() -> Callable[[bytes], int]:
    """google-crc32c's CRC-32C (imported when first needed, so importing this module never
    fails)."""
    try:
        from google_crc32c import value
    except ImportError:
        raise ImportError(
            "google-crc32c is not installed; TFRecord files need it for their checksums: "
            "pip install google-crc32c (a base requirement of webgraph-alx)"
        ) from None
    return value


def masked(crcs: np.ndarray) -> np.ndarray:
    """TFRecord's masked CRC-32C of each CRC (uint64 array), as little-endian uint32."""
    crcs = np.asarray(crcs, np.uint64)
    return ((((crcs >> 15) | (crcs << 17)) + _MASK_DELTA) & 0xFFFFFFFF).astype("<u4")


@functools.lru_cache(maxsize=None)
def _length_table() -> tuple[np.ndarray, int]:
    """(T, c): the CRC-32C of any 8 bytes b is c ^ T[0, b[0]] ^ ... ^ T[7, b[7]] (a CRC of a fixed
    length is affine in its bits: c is the CRC of 8 zero bytes, T[j, v] what byte j = v adds)."""
    crc32c = _crc32c()
    zero = crc32c(bytes(8))
    table = np.zeros((8, 256), np.uint32)
    for j in range(8):
        for v in range(256):
            table[j, v] = crc32c(bytes(j) + bytes([v]) + bytes(7 - j)) ^ zero
    table.flags.writeable = False
    return table, zero


def _length_crcs(lengths) -> np.ndarray:
    """The masked CRC-32C of each record length's 8 bytes (little-endian uint32), computed in
    NumPy (no call per record)."""
    table, zero = _length_table()
    octets = np.asarray(lengths, "<u8").reshape(-1, 1).view(np.uint8)
    crcs = np.bitwise_xor.reduce(table[np.arange(8), octets], axis=1) ^ np.uint32(zero)
    return masked(crcs)


def _length_headers(lengths: Iterable[int]) -> dict[int, bytes]:
    """The 12-byte header of each distinct record length."""
    distinct = sorted(set(lengths))
    return {n: struct.pack("<Q", n) + c.tobytes() for n, c in zip(distinct, _length_crcs(distinct))}


def frames(records: Iterable[bytes]) -> list[bytes]:
    """The byte pieces of a TFRecord file holding `records`, in order: per record its header, the
    record and its footer. Headers are made once per distinct length; CRCs are masked by NumPy."""
    records = list(records)
    if not records:
        return []
    lengths = list(map(len, records))
    header_of = _length_headers(lengths)
    footers = masked(np.fromiter(map(_crc32c(), records), np.uint64, count=len(records))).tobytes()
    pieces: list[bytes] = [b""] * (3 * len(records))
    pieces[0::3] = [header_of[n] for n in lengths]
    pieces[1::3] = records
    pieces[2::3] = [footers[i : i + 4] for i in range(0, len(footers), 4)]
    return pieces


@dataclasses.dataclass
class Block:
    """Whole records of a file: record k is `data[starts[k] : starts[k] + lengths[k]]`."""

    data: bytes
    starts: np.ndarray  # int64, offsets into `data`
    lengths: np.ndarray  # int64
    offset: int  # the file offset of data[0] (for error messages)

    def __len__(self) -> int:
        return len(self.starts)


def _u32_at(data: bytes, offsets: np.ndarray) -> np.ndarray:
    """The little-endian uint32 at each of `offsets` in `data` (each at most len(data) - 4)."""
    return np.ndarray((len(data) - 3,), "<u4", data, 0, (1,))[offsets]


def _check(path: str, data: bytes, heads: np.ndarray, lengths: np.ndarray, offset: int) -> None:
    """Every length CRC and data CRC of the records whose headers start at `heads`."""
    crc32c = _crc32c()
    bad = np.flatnonzero(_u32_at(data, heads + 8) != _length_crcs(lengths))
    if len(bad):
        at = offset + int(heads[bad[0]])
        raise RecordError(
            f"{path}: not a TFRecord file, or corrupt: the length checksum of the record at byte "
            f"{at} "
            "does not match"
        )
    starts = heads + HEADER_BYTES
    ends = starts + lengths
    pieces = map(data.__getitem__, map(slice, starts.tolist(), ends.tolist()))
    crcs = np.fromiter(map(crc32c, pieces), np.uint64, count=len(starts))
    bad = np.flatnonzero(_u32_at(data, ends) != masked(crcs))
    if len(bad):
        at = offset + int(heads[bad[0]])
        raise RecordError(
            f"{path}: corrupt TFRecord: the data checksum of the record at byte {at} does not match"
        )


def _walk(data: bytes) -> tuple[np.ndarray, np.ndarray, int]:
    """Headers and lengths (int64) of the whole records at the start of `data`, and where the rest
    begins.

    A Python step per record, under the GIL, on the reading thread: a NumPy walk (every offset
    whose upper length bytes are zero a candidate, successors by one search, the chain from
    offset 0 doubled out) held the GIL less but cost more CPU seconds at `BLOCK_BYTES` (figures in
    docs/benchmarks.md); many cores are used by decoding files in processes instead
    (`file_workers`)."""
    heads, lengths, pos, size = [], [], 0, len(data)
    unpack = struct.Struct("<Q").unpack_from
    while pos + HEADER_BYTES <= size:
        (n,) = unpack(data, pos)
        end = pos + HEADER_BYTES + n + FOOTER_BYTES
        if end > size:
            break
        heads.append(pos)
        lengths.append(n)
        pos = end
    return np.array(heads, np.int64), np.array(lengths, np.int64), pos


def check(path: str, block: Block) -> None:
    """Every checksum of a block's records (`read_blocks(..., checked=False)` leaves them to
    this)."""
    _check(path, block.data, block.starts - HEADER_BYTES, block.lengths, block.offset)


def read_blocks(
    f: BinaryIO, path: str, block_bytes: int = BLOCK_BYTES, checked: bool = True
) -> Iterator[Block]:
    """The records of the TFRecord file `f` (named `path` in errors), a block of whole records at a
    time; with `checked`, their checksums too (else call `check` on each block, e.g. in threads)."""
    rest, offset = b"", 0
    while True:
        chunk = f.read(block_bytes)
        data = rest + chunk if rest else chunk
        h, n, used = _walk(data)
        if not len(h) and len(data) >= HEADER_BYTES:
            # The next record is longer than the block: check its length before reading it whole.
            _check_length(path, data, offset)
        if len(h):
            if checked:
                _check(path, data, h, n, offset)
            yield Block(data, h + HEADER_BYTES, n, offset)
        rest, offset = data[used:], offset + used
        if not chunk:
            break
    if rest:
        raise RecordError(
            f"{path}: truncated TFRecord: the file ends inside the record at byte {offset} "
            f"({len(rest)} of its bytes present)"
        )


def _check_length(path: str, data: bytes, offset: int) -> None:
    """The length CRC of the record at the start of `data`."""
    if data[8:12] != _length_crcs([struct.unpack_from("<Q", data)[0]]).tobytes():
        raise RecordError(
            f"{path}: not a TFRecord file, or corrupt: the length checksum of the record at byte "
            f"{offset} does not match"
        )


def read_records(f: BinaryIO, path: str) -> Iterator[bytes]:
    """Every record of the TFRecord file `f` as bytes (for small files and tools)."""
    for block in read_blocks(f, path):
        for a, n in zip(block.starts.tolist(), block.lengths.tolist()):
            yield block.data[a : a + n]
