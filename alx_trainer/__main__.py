"""`python -m alx_trainer train|eval|sweep|predict|export ...`: one entry point; a command's module
is imported only when that command runs, and imports what the command needs only after its flags
are read (`--help` and a bad flag stay fast). Ctrl-C at any moment, imports included, ends it with
one line `alx_trainer: interrupted` and exit status 130."""

from __future__ import annotations

import importlib
import os
import signal
import sys

from alx_trainer.cli import interrupt

# command -> (module, function); each function takes the remaining argv and returns an exit code.
COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("alx_trainer.cli.commands", "main_train"),
    "eval": ("alx_trainer.cli.commands", "main_eval"),
    "sweep": ("alx_trainer.cli.commands", "main_sweep"),
    "predict": ("alx_trainer.cli.commands", "main_predict"),
    "export": ("alx_trainer.cli.commands", "main_export"),
}

USAGE = (
    "usage: python -m alx_trainer {"
    + ",".join(COMMANDS)
    + "} [--help] [--debug] [--log_level LEVEL] [options]"
)
PROG = "alx_trainer"


def main(argv: list[str] | None = None) -> int:
    """Dispatch to the command's own parser; a one-line error (exit 2) for no or an unknown
    command; one line and 130 for Ctrl-C."""
    try:
        return _dispatch(list(sys.argv[1:] if argv is None else argv))
    except KeyboardInterrupt:
        return interrupted()
    # an error that Ctrl-C caused (`interrupt`)
    except Exception:
        if interrupt.caused_error():
            return interrupted()
        raise


def interrupted() -> int:
    """The one line of Ctrl-C, and its exit status (a second Ctrl-C while exiting is ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return interrupt.report(PROG)


def _dispatch(argv: list[str]) -> int:
    """`main` of `argv`."""
    # imported once Ctrl-C is handled (`interrupt.install`): an interrupt here is one line too
    from webgraph_contract.command_line import did_you_mean, missing_command, take_debug_flag
    from webgraph_contract.quiet_logs import quiet, verbose_in  # (as above)

    # before TensorFlow, JAX or orbax are imported
    quiet(verbose_in(argv))
    # any command: errors show their traceback
    argv = take_debug_flag(argv)
    if not argv:
        return missing_command(PROG, COMMANDS)
    if argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        hint = did_you_mean("--" + command, ["--" + c for c in COMMANDS]).replace("--", "")
        print(
            f"{PROG}: error: unknown command {command!r}{hint}; one of {', '.join(COMMANDS)}",
            file=sys.stderr,
        )
        return 2
    module, function = COMMANDS[command]
    return int(getattr(importlib.import_module(module), function)(rest) or 0)


def _entry() -> int:
    """`python -m alx_trainer`: `main`, restarted first with huge pages for `train`."""
    interrupt.install()
    try:
        # (as above)
        from alx_trainer.cli import hugepages

        # large tables: see `hugepages` (not for `train --help`, which starts no training)
        if sys.argv[1:2] == ["train"] and not {"-h", "--help"} & set(sys.argv[2:]):
            hugepages.restart_with_hugepages("alx_trainer", sys.argv[1:])
    except KeyboardInterrupt:
        return interrupted()
    status = main()
    if interrupt.exit_now():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    return status


if __name__ == "__main__":
    sys.exit(_entry())
