"""What every command line shares: one-line errors, logging, the compilation cache, argparse types
(comma-separated K lists and sweep grids, bounded integers, fractions)."""

from __future__ import annotations

import argparse
import atexit
import logging
import math
import os
import sys
import traceback
from typing import Callable

from alx_trainer.cli import interrupt
from alx_trainer.config import ConfigError
from webgraph_contract.command_line import DEBUG_ENV, debugging, one_line

# Errors the commands raise on purpose, with a message that says what, where and what to do.
EXPECTED_ERRORS = (ValueError, OSError, KeyError, ArithmeticError)


def setup_logging(level: str) -> None:
    """Send the `alx_trainer` loggers' records at `level` and above to stderr (replacing an earlier
    setup)."""
    logger = logging.getLogger("alx_trainer")
    for handler in [h for h in logger.handlers if getattr(h, "alx_cli", False)]:
        logger.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.alx_cli = True
    handler.setFormatter(_Formatter())
    logger.addHandler(handler)
    logger.setLevel(level.upper())
    logger.propagate = False
    # orbax logs routine notices through absl as warnings (a read-only checkpoint manager's
    # settings): kept for --log_level debug, so an error stays one line otherwise
    logging.getLogger("absl").setLevel(logging.DEBUG if level == "debug" else logging.ERROR)


class _Formatter(logging.Formatter):
    """Progress (INFO) as the message alone; warnings, errors and debug records with their level and
    logger."""

    def __init__(self):
        super().__init__("%(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        return record.getMessage() if record.levelno == logging.INFO else super().format(record)


def use_compile_cache(setting: str) -> None:
    """Turn JAX's persistent compilation cache on (`compile_cache.enable`) before anything
    compiles."""
    from alx_trainer import compile_cache  # imports JAX: not for --help

    path = compile_cache.enable(setting)
    logging.getLogger("alx_trainer").debug("compilation cache: %s", path or "off")


def run(prog: str, body: Callable[[], int]) -> int:
    """`body()`, or one line `alx_trainer PROG: error: ...` on stderr and its exit status: 2 for a
    bad flag or config value (`ConfigError`), 1 for bad data or a failure (the previous results
    stay). In the command's own process (`python -m alx_trainer`) the process then ends
    (`end_process`)."""
    status = _run(prog, body)
    if _whole_process():
        end_process(status)
    return status


def _whole_process() -> bool:
    """Whether this process is the command (`python -m alx_trainer`), not a caller of `run`."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", None) == "alx_trainer.__main__"


def end_process(status: int) -> None:
    """End the process with `status` once its exit handlers have run (logging's flush and close,
    JAX's and orbax's shutdown, ...) and stdout and stderr are flushed, without the interpreter's
    teardown of every module and object: 0.3 s of a warm `eval` of ML-100k (1.55 s against
    1.85, 2-core host at load 4.5), the backends' and libraries' destructors. Every file a command
    writes is closed by then (a `with` block each)."""
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _run(prog: str, body: Callable[[], int]) -> int:
    """`run` without the process's end."""
    try:
        return body()
    except KeyboardInterrupt:
        return interrupt.report(f"alx_trainer {prog}")
    # every error becomes one line; --debug / WEBGRAPH_DEBUG=1 adds the traceback
    except Exception as e:
        # an error that Ctrl-C caused (`interrupt`)
        if interrupt.caused_error():
            return interrupt.report(f"alx_trainer {prog}")
        if debugging():
            traceback.print_exc()
        if isinstance(e, ConfigError):
            print(f"alx_trainer {prog}: error: {one_line(e)}", file=sys.stderr)
            return 2
        if isinstance(e, EXPECTED_ERRORS):
            print(f"alx_trainer {prog}: error: {one_line(e)}", file=sys.stderr)
        else:
            hint = "" if debugging() else f" (--debug or {DEBUG_ENV}=1 shows the traceback)"
            print(
                f"alx_trainer {prog}: error: {type(e).__name__}: {one_line(e)}{hint}",
                file=sys.stderr,
            )
        return 1


def ks(text: str) -> list[int]:
    """`--eval_k 20,50` as [20, 50]; an argparse error for anything else."""
    try:
        values = [int(k) for k in text.split(",") if k.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def grid(text: str) -> tuple[float, ...]:
    """A sweep's grid `--lambdas 5e-2,1e-2` as (0.05, 0.01): finite non-negative numbers; an
    argparse error for anything else."""
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers, got {text!r}"
        ) from None
    if not values or not all(0 <= v < math.inf for v in values):
        raise argparse.ArgumentTypeError(
            f"expected comma-separated non-negative numbers, got {text!r}"
        )
    return values


def at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer >= `low` (argparse then exits 2 with a one-line usage error)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {value}")
        return value

    return parse


def fraction(text: str) -> float:
    """An argparse type: a number in (0, 1] (what `lax.approx_max_k` takes as a recall target)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text!r}") from None
    # also refuses nan
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1], got {text}")
    return value
