"""Printing the benchmarks' tables: fixed-width columns, '-' for a missing figure."""

from __future__ import annotations

from typing import Any, Sequence


def fmt(value: Any, spec: str = "") -> str:
    """`value` formatted with `spec`, or '-' when it is None."""
    return "-" if value is None else format(value, spec)


def print_table(columns: Sequence[tuple[str, str, str, int]], rows: Sequence[dict]) -> None:
    """Rows as a table under a header line: `columns` are (header, key, format spec, width); a
    negative width left-aligns."""

    def cell(text: str, width: int) -> str:
        return f"{text:<{-width}}" if width < 0 else f"{text:>{width}}"

    head = " ".join(cell(header, width) for header, _, _, width in columns)
    print("\n" + head + "\n" + "-" * len(head), flush=True)
    for r in rows:
        cells = (cell(fmt(r.get(key), spec), width) for _, key, spec, width in columns)
        print(" ".join(cells), flush=True)
