"""What every command line shares: one-line errors, `--log_level`, comma-separated K lists."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Callable

LOG_LEVELS = ("debug", "info", "warning", "error")
EXPECTED_ERRORS = (ValueError, FileNotFoundError, KeyError, OSError)


def setup_logging(level: str) -> None:
    """Send the `alx_trainer` loggers' records at `level` and above to stderr (replacing an earlier setup)."""
    logger = logging.getLogger("alx_trainer")
    for handler in [h for h in logger.handlers if getattr(h, "alx_cli", False)]:
        logger.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.alx_cli = True
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
    logger.addHandler(handler)
    logger.setLevel(level.upper())
    logger.propagate = False


def add_log_level(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log_level", choices=LOG_LEVELS, default="info", help="Diagnostics on stderr from this level.")


def run(prog: str, body: Callable[[], int]) -> int:
    """`body()`, or a one-line `alx_trainer PROG: error: ...` on stderr and exit code 1 for bad input."""
    try:
        return body()
    except EXPECTED_ERRORS as e:
        message = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"alx_trainer {prog}: error: {message}", file=sys.stderr)
        return 1


def ks(text: str) -> list[int]:
    """`--k 20,50` as [20, 50]; an argparse error for anything else."""
    try:
        values = [int(k) for k in text.split(",") if k.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values
