"""Run `python -m alx_trainer` in this process (the test's JAX devices), capturing its output."""

from __future__ import annotations

import contextlib
import io
from typing import Sequence

from alx_trainer import __main__ as cli


def run_cli(argv: Sequence[str]) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of the command line given `argv`."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(list(argv))
    return rc, out.getvalue(), err.getvalue()
