"""Ctrl-C told apart from the errors it causes: a library that catches the KeyboardInterrupt of
Ctrl-C while it imports (NumPy's C extension does) raises an ImportError instead; `caused_error`
says that Ctrl-C came, so the command still ends with one line (`report`) and exit status 130. A
KeyboardInterrupt raised where Python ignores exceptions (a garbage collector callback, `__del__`)
is delivered again instead of printed. Ctrl-C during an import (the first seconds of a command,
and later ones inside it) ends the process at once with the same line: a library may print its
own traceback or crash on an interrupted import (NumPy's C extension does). Such a half-done
import can crash the interpreter's shutdown (NumPy's does), so `python -m alx_trainer` then exits
at once (`caused_error`, `exit_now`)."""

from __future__ import annotations

import _thread
import os
import signal
import sys
from types import FrameType
from typing import Any

_RECEIVED = [False]
_CAUSED_ERROR = [False]


def install() -> None:
    """Note every Ctrl-C (SIGINT) before raising KeyboardInterrupt, as Python's own handler, and
    deliver again one that lands where Python ignores exceptions; nothing where SIGINT was
    ignored when the process started (a background job), as Python itself."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        return
    signal.signal(signal.SIGINT, _handler)
    previous = sys.unraisablehook

    def unraisable(args: Any) -> None:
        if args.exc_type is not None and issubclass(args.exc_type, KeyboardInterrupt):
            # SIGINT again, handled at the main thread's next instruction
            _thread.interrupt_main()
            return
        previous(args)

    sys.unraisablehook = unraisable


def _handler(signum: int, frame: FrameType | None) -> None:
    _RECEIVED[0] = True
    if _importing(frame):
        # nothing to clean up yet, and a library may print or crash on an interrupted import
        os._exit(report())
    raise KeyboardInterrupt


def _importing(frame: FrameType | None) -> bool:
    """Whether `frame` runs inside an import (a frame of importlib's bootstrap below it)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def report(prog: str = "alx_trainer") -> int:
    """The one line of Ctrl-C, `PROG: interrupted` on stderr, and its exit status 130."""
    print(f"{prog}: interrupted", file=sys.stderr, flush=True)
    return 130


def caused_error() -> bool:
    """Whether Ctrl-C came since `install`, for an error other than KeyboardInterrupt: noted, as
    the error may have left a module half imported."""
    _CAUSED_ERROR[0] = _RECEIVED[0]
    return _RECEIVED[0]


def exit_now() -> bool:
    """Whether the process should end without the interpreter's shutdown (`caused_error`)."""
    return _CAUSED_ERROR[0]
