"""Predicted outlinks of pages the model was not trained on, known by their outlinks (fold-in).

A page is a name and the URLs it links to: `predict --links URL ...` gives one, `predict --rows
FILE` one per line, `NAME<TAB>URL URL ...`. Each link is looked up in the column vocabulary
(`node_token` says how a name, a number and `id:N` resolve), else normalized as the dataset's names
were (`urls.normalize_url`) and looked up; a link not found is counted, never fatal. The known
columns are folded in and ranked against every column (`ranking.Ranker`, as `eval` does for its test
rows), the known links left out, and in a graph (ids shared by rows and columns) the page itself
when its name is a URL of the vocabulary. A page with no known link gets no predictions and a
reason. Answers are JSON lines: `{"name", "predictions": [{"url", "id", "score"}, ...], "known",
"unknown"[, "reason"]}`.
"""

from __future__ import annotations

import collections
import dataclasses
import json
from typing import Iterable, Iterator, Mapping, Sequence

import numpy as np

from alx_trainer.evaluation.ranking import Ranker
from webgraph_contract import urls

NOT_IN_VOCABULARY = "not_in_vocabulary"
ID_OUT_OF_RANGE = "id_out_of_range"
# why a line of a --rows file was skipped
BAD_LINE_REASONS = ("not_utf8", "no_tab", "empty_name", "no_links")


@dataclasses.dataclass
class Page:
    """A page to predict for: its name, its known column ids (first-seen order, no repeats), how
    many of its links were not found, its own column id (a graph's page in the vocabulary) and
    its line in the input (0: from the command line)."""

    name: str
    known: np.ndarray
    unknown: int = 0
    self_id: int | None = None
    line: int = 0


@dataclasses.dataclass
class Report:
    """What the input held: pages answered, pages without a known link, URLs not found (by
    reason), lines skipped (by reason, with the first line of each)."""

    pages: int = 0
    without_known: int = 0
    unknown: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    bad_lines: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    first_bad_line: dict[str, int] = dataclasses.field(default_factory=dict)

    def bad(self, reason: str, line: int) -> None:
        self.bad_lines[reason] += 1
        self.first_bad_line.setdefault(reason, line)

    def summary(self, source: str) -> str:
        """One line: pages, pages without a known link, links not found, lines skipped."""
        text = f"{source}: {self.pages} pages answered, {self.without_known} without a known link"
        if self.unknown:
            reasons = ", ".join(f"{r}: {n}" for r, n in self.unknown.most_common())
            text += f"; {sum(self.unknown.values())} links not found ({reasons})"
        if self.bad_lines:
            reasons = ", ".join(
                f"{r}: {n} (first at line {self.first_bad_line[r]})"
                for r, n in self.bad_lines.most_common()
            )
            text += f"; {sum(self.bad_lines.values())} lines skipped ({reasons})"
        return text


def _number(text: str) -> int | None:
    """The value of a string of ASCII digits; None for anything else."""
    return int(text) if text.isascii() and text.isdigit() else None


def names_are_numbers(ids: Mapping[str, int]) -> bool:
    """Whether a vocabulary (name -> id) names some node with a number (integer ids turned names,
    as in given_split, pairs and movielens datasets): then a bare number is a name, never an id."""
    return any(_number(name) is not None for name in ids)


def node_token(token: str, ids: Mapping[str, int], numeric_names: bool) -> int | None:
    """The id of a node given on the command line or in a file, before URL normalization: a name
    of the vocabulary `ids` as given is its id; `id:N` is id N; a bare number is id N only when
    no name is a number (`numeric_names` False, as for a vocabulary of URLs or none at all).
    None when the token is none of these (a URL to normalize, or a name not in the vocabulary)."""
    if token.startswith("id:") and _number(token[3:]) is not None:
        return int(token[3:])
    if token in ids:
        return ids[token]
    return None if numeric_names else _number(token)


class ColumnLookup:
    """Column ids of link tokens (`node_token`: a name of the vocabulary as given, `id:N`, or a
    number where no name is one); anything else is normalized as a URL and looked up."""

    def __init__(self, ids: Mapping[str, int], num_cols: int):
        self.ids = ids
        self.num_cols = num_cols
        self.numeric_names = names_are_numbers(ids)

    def column(self, token: str) -> tuple[int | None, str | None]:
        """`(id, None)`, or `(None, reason)`: a `urls.DROP_REASONS` entry, `not_in_vocabulary`
        or `id_out_of_range`."""
        col = node_token(token, self.ids, self.numeric_names)
        if col is not None:
            return (col, None) if col < self.num_cols else (None, ID_OUT_OF_RANGE)
        if _number(token) is not None:
            return None, NOT_IN_VOCABULARY
        if token.startswith("-") and _number(token[1:]) is not None:
            return None, ID_OUT_OF_RANGE  # a negative id
        name, reason = urls.normalize_url(token)
        if name is None:
            return None, reason
        col = self.ids.get(name)
        return (col, None) if col is not None else (None, NOT_IN_VOCABULARY)

    def page(
        self, name: str, links: Sequence[str], report: Report, line: int = 0, shared: bool = False
    ) -> Page:
        """The page `name` linking to `links`, unknown links counted in `report`."""
        known: dict[int, None] = {}
        unknown = 0
        for token in links:
            col, reason = self.column(token)
            if col is None:
                report.unknown[reason] += 1
                unknown += 1
            else:
                known.setdefault(col, None)
        self_id = self.column(name)[0] if shared and name else None
        return Page(name, np.fromiter(known, np.int64, len(known)), unknown, self_id, line)


def parse_rows(
    lines: Iterable[bytes], lookup: ColumnLookup, report: Report, shared: bool
) -> Iterator[Page]:
    """The pages of a `--rows` file's lines, `NAME<TAB>URL URL ...`; blank lines are passed over,
    bad ones counted in `report` by reason (`BAD_LINE_REASONS`)."""
    for number, raw in enumerate(lines, 1):
        try:
            text = raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError:
            report.bad("not_utf8", number)
            continue
        if not text.strip():
            continue
        name, tab, rest = text.partition("\t")
        name = name.strip()
        links = rest.split()
        if not tab:
            report.bad("no_tab", number)
        elif not name:
            report.bad("empty_name", number)
        elif not links:
            report.bad("no_links", number)
        else:
            yield lookup.page(name, links, report, number, shared)


def predict_pages(
    ranker: Ranker, pages: Iterable[Page], k: int, report: Report
) -> Iterator[tuple[Page, np.ndarray, np.ndarray]]:
    """`(page, scores [k], ids [k])` for every page, in order, `ranker.rows_per_call` pages folded
    in at a time; a page without a known link gets empty arrays (and is counted in `report`)."""
    held: list[Page] = []

    def flush() -> Iterator[tuple[Page, np.ndarray, np.ndarray]]:
        known = [p for p in held if len(p.known)]
        exclude = [p.known if p.self_id is None else np.append(p.known, p.self_id) for p in known]
        ids, scores = ranker.fold_in_top_k([p.known for p in known], exclude, k)
        answers = iter(zip(scores, ids))
        for page in held:
            report.pages += 1
            if len(page.known):
                s, i = next(answers)
                yield page, s[i >= 0], i[i >= 0]
            else:
                report.without_known += 1
                yield page, np.zeros(0, np.float32), np.zeros(0, np.int64)
        held.clear()

    ready = 0
    for page in pages:
        held.append(page)
        ready += bool(len(page.known))
        if ready >= ranker.rows_per_call:
            yield from flush()
            ready = 0
    if held:
        yield from flush()


def answer(page: Page, scores: np.ndarray, ids: np.ndarray, names: Mapping[int, str]) -> dict:
    """The JSON object of a page's predictions."""
    out: dict = {
        "name": page.name,
        "predictions": [
            {"url": names.get(int(i)), "id": int(i), "score": float(s)} for i, s in zip(ids, scores)
        ],
        "known": int(len(page.known)),
        "unknown": int(page.unknown),
    }
    if not len(page.known):
        out["reason"] = (
            f"none of its {page.unknown} links is in the vocabulary"
            if page.unknown
            else "no links given"
        )
    return out


def json_line(obj: dict) -> str:
    """One JSON line (non-ASCII URLs kept as they are)."""
    return json.dumps(obj, ensure_ascii=False)
