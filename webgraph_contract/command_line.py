"""What the three commands' command lines share: one-line errors, did-you-mean, the debug switch.

`OneLineParser` is an `argparse.ArgumentParser` whose errors are one line on stderr, with no usage
dump (`--help` has it), and whose unknown flags get the nearest known flag as a suggestion
(`PROG: error: unknown flag --dimm (did you mean --dim?)`, exit 2). `one_line` turns any exception
into the line a command prints; `--debug` or `WEBGRAPH_DEBUG=1` (`debugging`) adds the traceback.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from typing import Iterable, NoReturn, Sequence

UNRECOGNIZED = "unrecognized arguments: "
DEBUG_ENV = "WEBGRAPH_DEBUG"  # set (not 0), or --debug: errors show their traceback
_DEBUG_ALIASES = ("ALX_DEBUG",)  # the trainer's older name for the same switch


def debugging() -> bool:
    """Whether `--debug` or WEBGRAPH_DEBUG=1 (ALX_DEBUG=1 too) asked for tracebacks."""
    return any(os.environ.get(name, "") not in ("", "0") for name in (DEBUG_ENV, *_DEBUG_ALIASES))


def take_debug_flag(argv: Sequence[str]) -> list[str]:
    """`argv` without `--debug`; where it was given, the debug switch is set for this process and
    the processes it starts."""
    if "--debug" in argv:
        os.environ[DEBUG_ENV] = "1"
    return [a for a in argv if a != "--debug"]


def one_line(error: BaseException) -> str:
    """An exception as one line: the last non-empty line of its message (a Beam worker error carries
    the whole remote traceback before the cause), else its type."""
    message = error.args[0] if isinstance(error, KeyError) and error.args else error
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__


def did_you_mean(flag: str, known: Iterable[str]) -> str:
    """` (did you mean --dim?)` for the known flag nearest `flag` (its name before any `=`), or
    ''."""
    name = flag.split("=", 1)[0]
    close = difflib.get_close_matches(
        name, sorted({k for k in known if k.startswith("--")}), n=1, cutoff=0.6
    )
    return f" (did you mean {close[0]}?)" if close else ""


def unknown_flags_message(unknown: Sequence[str], known: Iterable[str]) -> str:
    """`unknown flag --dimm (did you mean --dim?)` for the first unknown flag, or `unexpected
    argument X` for a stray value (such as a file name of a glob the shell expanded)."""
    known = list(known)
    flags = [a for a in unknown if a.startswith("-")]
    if flags:
        more = f" (and {len(flags) - 1} more)" if len(flags) > 1 else ""
        return f"unknown flag {flags[0].split('=', 1)[0]}{did_you_mean(flags[0], known)}{more}"
    return f"unexpected argument {unknown[0]!r}; quote globs so the shell does not expand them"


class OneLineParser(argparse.ArgumentParser):
    """argparse with one-line errors (exit 2) and a did-you-mean for unknown flags."""

    def __init__(self, *args, error_prog: str = "", **kwargs):
        """`error_prog`: the name errors start with (default `prog`, which `--help`'s usage
        shows)."""
        kwargs.setdefault("allow_abbrev", False)  # `--dim` must not quietly mean `--dim_x`
        super().__init__(*args, **kwargs)
        self.error_prog = error_prog or self.prog
        self.also_known: list[str] = []  # flags another parser of the same command line takes

    def known_flags(self) -> list[str]:
        # noqa: SLF001
        return [s for action in self._actions for s in action.option_strings] + self.also_known

    def error(self, message: str) -> NoReturn:
        if message.startswith(UNRECOGNIZED):
            message = unknown_flags_message(
                message[len(UNRECOGNIZED) :].split(" "), self.known_flags()
            )
        self.exit(2, f"{self.error_prog}: error: {message}\n")


def missing_command(prog: str, commands: Iterable[str]) -> int:
    """The one-line error for a command line without its subcommand; exit status 2."""
    print(
        f"{prog}: error: missing command; one of {', '.join(commands)} (--help for each)",
        file=sys.stderr,
    )
    return 2
