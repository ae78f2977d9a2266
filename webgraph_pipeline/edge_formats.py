"""Text edge-list formats, parsed a block of lines at a time (plain functions, no Beam).

`--edge_format` names the layout of every line; ids are any token without whitespace:

- `pairs`: `src dst [ignored columns...]` (whitespace-separated).
- `adjacency`: `src dst1 dst2 ...`.
- `movielens`: `user item rating timestamp`, tab/space- (`u.data`) or `::`-separated
  (`ratings.dat`); exactly 4 fields and a finite numeric rating; users x items (bipartite).
- `csv`: `src<D>dst[<D>rating...]` with a one-character `--delimiter` D; whitespace around a field
  is stripped (`c; d;4` is c -> d), whitespace inside a field or an empty field makes the line
  malformed (`bad_field`; no quoting).
- `given_split`: `user item item ...`, one line per user, as the published train/test files of
  LightGCN and its successors; users x items (bipartite).

A header is skipped only when asked (`header`). Blank lines and `#`/`%` comment lines are skipped
(`skipped_lines.<reason>`); a UTF-8 byte-order mark at the start of a file is stripped; lines that
cannot be decoded as UTF-8 (or hold a NUL byte, as UTF-16 text does) or do not fit the format are
dropped (`dropped_lines.<reason>`), with
the line numbers of the first few of each reason kept for stats.json.

Vectorized: a block is tokenized by one `str.split()` (C), and one NumPy pass over its bytes finds
where each token starts and on which line, so per-line rules (token counts, comments) are array
operations; a Python loop runs only over the lines of a block that hold undecodable bytes.
"""

from __future__ import annotations

import collections
import dataclasses
import re
from typing import Optional

import numpy as np

FORMATS = ("pairs", "adjacency", "movielens", "csv", "given_split")
# formats whose data is users x items by definition
BIPARTITE_FORMATS = ("movielens", "given_split")
MAX_EXAMPLES = 5  # line numbers kept per drop reason
BOM = "\ufeff"

# The ASCII whitespace of `str.split()` (space, \t \n \v \f \r and the separators \x1c-\x1f).
_WS = np.zeros(256, bool)
_WS[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32]] = True
_ASCII_WS_TO_SPACE = bytes.maketrans(bytes([9, 10, 11, 12, 13, 28, 29, 30, 31]), b" " * 9)
# bytes <= 32 that str.split() does not split on
_OTHER_CONTROL = re.compile(rb"[\x00-\x08\x0e-\x1b]")
_COMMENT = np.zeros(256, bool)
_COMMENT[[ord("#"), ord("%")]] = True
INT_TOKEN = re.compile(r"-?\d+\Z")  # an integer id (of a URL list)


@dataclasses.dataclass(frozen=True)
class EdgeFormat:
    """How to read one edge list. `min_rating` keeps rating lines with rating >= it (movielens,
    csv)."""

    name: str = "pairs"
    delimiter: str = ","
    header: bool = False
    min_rating: Optional[float] = None

    def __post_init__(self) -> None:
        if self.name not in FORMATS:
            raise ValueError(
                f"unknown edge format {self.name!r}; expected one of {', '.join(FORMATS)}"
            )
        if self.name == "csv" and (
            len(self.delimiter) != 1
            or not self.delimiter.isascii()
            or self.delimiter.isspace()
            or self.delimiter in "#%"
        ):
            raise ValueError(
                f"--delimiter must be one ASCII character other than whitespace, # and %, "
                f"got {self.delimiter!r} (use --edge_format pairs for whitespace)"
            )
        if self.min_rating is not None and self.name not in ("movielens", "csv"):
            raise ValueError(
                f"--min_rating applies to --edge_format movielens or csv, not {self.name}"
            )

    @property
    def bipartite(self) -> bool:
        """Whether the format itself says the data is users x items."""
        return self.name in BIPARTITE_FORMATS


@dataclasses.dataclass
class ParsedBlock:
    """Edges of a block (parallel lists of names) and its line counts by reason."""

    src: list[str]
    dst: list[str]
    counts: collections.Counter
    examples: dict[str, list[int]]  # reason -> first line numbers (1-based)

    def drop(self, reason: str, line_numbers: np.ndarray) -> None:
        """Count lines under `reason` (`dropped_lines.x` or `skipped_lines.x`) and keep a few
        numbers."""
        if len(line_numbers):
            self.counts[reason] += int(len(line_numbers))
            kept = self.examples.setdefault(reason, [])
            kept.extend(int(n) for n in line_numbers[: MAX_EXAMPLES - len(kept)])


def decode_block(data: bytes, first_line: int, block: ParsedBlock) -> tuple[str, list[int]]:
    """UTF-8 text of a block and the indices of its lines with undecodable bytes (counted, and
    made blank in the text). A NUL byte makes a line undecodable too: no text holds one, and
    UTF-16 text (a NUL in every ASCII character) would otherwise parse into garbled ids."""
    if b"\x00" not in data:
        try:
            return data.decode("utf-8"), []
        except UnicodeDecodeError:
            pass
    lines = data.split(b"\n")
    out, bad = [], []
    for i, line in enumerate(lines):
        try:
            text = None if b"\x00" in line else line.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is None:
            bad.append(i)
        # blank, but a line even when it is the block's only one
        out.append(" " if text is None else text)
    block.drop("dropped_lines.undecodable", np.array(bad) + first_line)
    return "\n".join(out), bad


def _tokenize(text: str) -> tuple[list[str], np.ndarray, np.ndarray, int]:
    """Tokens, the line index of each token, whether each token starts with # or %, and the
    number of lines of a block."""
    raw = text.encode("utf-8")
    arr = np.frombuffer(raw, np.uint8)
    # Bytes <= 32 are whitespace unless a control byte outside _WS occurs (rare).
    ws = arr <= 32 if not _OTHER_CONTROL.search(raw) else _WS[arr]
    if len(raw) == len(text):  # ASCII: str.split() splits on exactly the bytes of _WS
        tokens = text.split()
    else:  # str.split() would also split on non-ASCII spaces; split on _WS only, as the scan does
        tokens = [t.decode("utf-8") for t in raw.translate(_ASCII_WS_TO_SPACE).split(b" ") if t]
    # One sorted stream of events, token starts and newlines: a token's line = newlines before it.
    is_start = np.empty(len(arr), bool)
    is_start[:1] = ~ws[:1]
    np.greater(ws[:-1], ws[1:], out=is_start[1:])  # whitespace, then not
    events = np.flatnonzero(is_start | (arr == 10))
    is_newline = arr[events] == 10
    starts = events[~is_newline]
    line_of = np.cumsum(is_newline)[~is_newline]
    num_lines = int(is_newline.sum()) + 1 if len(arr) else 0
    return tokens, line_of, _COMMENT[arr[starts]], num_lines


def parse_block(data: bytes, first_line: int, fmt: EdgeFormat) -> ParsedBlock:
    """Parse whole lines `data` (line `first_line` first; 1 is a file's first line) into edges.

    Edges are neither deduplicated nor stripped of self-loops (the graph stage does that).
    """
    block = ParsedBlock([], [], collections.Counter(), {})
    text, accounted = decode_block(data, first_line, block)
    if first_line == 1 and text.startswith(BOM):
        text = text[1:]
        block.counts["input_files.bom_stripped"] += 1
    if first_line == 1 and fmt.header:
        _, sep, rest = text.partition("\n")
        if text:
            block.drop("skipped_lines.header", np.array([1]))
            accounted.append(0)
            text = " " + sep + rest  # line 1 becomes blank, so the line numbers stay
    if fmt.name == "movielens":
        text = text.replace("::", "\t")
    delims = None
    if fmt.name == "csv":
        delims = _per_line_count(text, fmt.delimiter)
        text = text.replace(fmt.delimiter, " ")
    tokens, line_of, comment_tok, num_lines = _tokenize(text)
    n = np.bincount(line_of, minlength=num_lines)
    first_tok = np.cumsum(n) - n  # index of each line's first token (valid where n > 0)
    line_no = np.arange(num_lines) + first_line
    has = n > 0
    blank = ~has
    blank[accounted] = False  # undecodable lines and the header, counted already
    comment = np.zeros(num_lines, bool)
    comment[has] = comment_tok[first_tok[has]]
    block.drop("skipped_lines.blank", _blank_lines(line_no, blank, data))
    block.drop("skipped_lines.comment", line_no[comment])
    ok = has & ~comment
    if fmt.name == "csv":
        bad = ok & (n != delims + 1)
        block.drop("dropped_lines.bad_field", line_no[bad])
        ok &= ~bad
    if fmt.name == "movielens":
        bad = ok & (n != 4)
        block.drop("dropped_lines.wrong_field_count", line_no[bad])
        ok &= ~bad
    short = ok & (n < 2)
    block.drop("dropped_lines.too_few_fields", line_no[short])
    ok &= ~short
    if (
        fmt.name in ("pairs", "csv")
        and fmt.min_rating is None
        and 2 * int(ok.sum()) == len(tokens)
        and (n[ok] == 2).all()
    ):
        # the common case: every token is in a `src dst` line
        block.src, block.dst = tokens[0::2], tokens[1::2]
        return block
    tok = np.array(tokens, dtype=object)
    if fmt.min_rating is not None or fmt.name == "movielens":
        ok = _rating_filter(tok, first_tok, n, ok, line_no, fmt, block)
    if fmt.name in ("adjacency", "given_split"):
        owner = np.repeat(np.arange(num_lines), n)
        is_first = np.zeros(len(tokens), bool)
        is_first[first_tok[n > 0]] = True
        take = ok[owner] & ~is_first
        block.src = np.repeat(tok[first_tok[ok]], n[ok] - 1).tolist()
        block.dst = tok[take].tolist()
    else:
        block.src, block.dst = tok[first_tok[ok]].tolist(), tok[first_tok[ok] + 1].tolist()
    return block


def _blank_lines(line_no: np.ndarray, blank: np.ndarray, data: bytes) -> np.ndarray:
    """Blank lines, less the empty piece after a block's final newline (not a line)."""
    if len(blank) and data.endswith(b"\n"):
        blank = blank.copy()
        blank[-1] = False
    return line_no[blank]


def _per_line_count(text: str, char: str) -> np.ndarray:
    """How many times `char` (one ASCII character) occurs on each line of `text`."""
    raw = np.frombuffer(text.encode("utf-8"), np.uint8)
    line_of = np.cumsum(raw == 10)
    return np.bincount(line_of[raw == ord(char)], minlength=int(line_of[-1]) + 1 if len(raw) else 0)


def _rating_filter(
    tok, first_tok, n, ok, line_no, fmt: EdgeFormat, block: ParsedBlock
) -> np.ndarray:
    """Drop lines whose third field is no finite number (`bad_rating`: `nan` and `inf` are not
    ratings) or below `min_rating`."""
    has = ok & (n >= 3)
    if fmt.min_rating is not None:
        missing = ok & (n < 3)
        block.drop("dropped_lines.no_rating", line_no[missing])
        ok = ok & ~missing
    ratings = np.full(len(n), np.nan)
    fields = tok[first_tok[has] + 2]
    try:
        ratings[has] = fields.astype(np.float64)
    except ValueError:  # some field is no number: find which, one by one
        ratings[has] = [_float_or_nan(f) for f in fields]
    bad = has & ~np.isfinite(ratings)
    block.drop("dropped_lines.bad_rating", line_no[bad])
    ok = ok & ~bad
    if fmt.min_rating is not None:
        low = ok & (ratings < fmt.min_rating)
        block.drop("dropped_lines.below_min_rating", line_no[low])
        ok = ok & ~low
    return ok


HINT_SAMPLE_LINES = 100  # lines after the first that `header_hint` compares it with
_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\Z")


def token_kind(token: str) -> str:
    """`number`, `url` (holds `://`) or `word`: what `header_hint` compares."""
    if _NUMBER.match(token):
        return "number"
    return "url" if "://" in token else "word"


def _fields(line: str, fmt: EdgeFormat) -> list[str]:
    if fmt.name == "csv":
        return [f.strip() for f in line.split(fmt.delimiter)]
    return (line.replace("::", "\t") if fmt.name == "movielens" else line).split()


def header_hint(
    data: bytes, fmt: EdgeFormat, url_ids: bool = False
) -> Optional[tuple[int, str, str]]:
    """(line number, line, why) when the first data line of a file (blank and comment lines skipped)
    looks like a header the reader was not told to skip; None otherwise.

    It does when one of its fields is a word where the same field of the next `HINT_SAMPLE_LINES`
    lines is always a number or a URL (`start end` over `1 2`), or, with `url_ids` (ids named by a
    `--urls` list, which must be integers), when one of its first two fields is no integer while
    the next lines' are. Word ids over word ids (`src dst` over `alice bob`) cannot be told apart.
    """
    if fmt.header:
        return None
    lines = []
    for number, raw in enumerate(
        data.split(b"\n", 4 * HINT_SAMPLE_LINES)[: 4 * HINT_SAMPLE_LINES], 1
    ):
        text = raw.decode("utf-8", "replace").lstrip(BOM).strip()
        if text and text[0] not in "#%":
            lines.append((number, text, _fields(text, fmt)))
        if len(lines) > HINT_SAMPLE_LINES:
            break
    if len(lines) < 2:
        return None
    (number, text, first), rest = lines[0], [f for _, _, f in lines[1:]]
    for col, token in enumerate(first):
        kinds = {token_kind(r[col]) for r in rest if len(r) > col}
        if token_kind(token) == "word" and kinds and kinds <= {"number", "url"}:
            return (
                number,
                text,
                f"the word {token!r} where the other lines have {' or '.join(sorted(kinds))}s",
            )
        if (
            url_ids
            and col < 2
            and not INT_TOKEN.match(token)
            and all(INT_TOKEN.match(r[col]) for r in rest if len(r) > col)
        ):
            return number, text, f"{token!r} is no integer id that --urls could name"
    return None


def parse_url_line(line: str) -> tuple[Optional[tuple[str, str]], Optional[str]]:
    """One `id url` line of a URL list -> ((id, url), None) or (None, reason)."""
    tokens = line.split()
    if not tokens:
        return None, "empty"
    if len(tokens) != 2:
        return None, "bad_fields"
    if not INT_TOKEN.match(tokens[0]):
        return None, "bad_id"
    return (str(int(tokens[0])), tokens[1]), None


def _float_or_nan(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return float("nan")
