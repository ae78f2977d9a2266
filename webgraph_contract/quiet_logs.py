"""What the libraries may print: only real warnings, unless a command is asked to be verbose.

Every entry point (`python -m webgraph_pipeline`, `python -m alx_trainer`, `python -m tfds_builder
build`, demo.py) calls `quiet(verbose)` before it imports TensorFlow, JAX or Beam, so the settings
act at the source (`python -m webgraph_pipeline.wat_writer` imports none of them; under plain `tfds
build` the builder quiets what it still can, see `web_graph_dataset_builder.quiet_cli`):

- TensorFlow's and XLA's C++ logs (CPU-feature notices, CUDA probes such as `failed call to cuInit`
  on a host without GPU) are read from `TF_CPP_MIN_LOG_LEVEL` when the library loads: 3 keeps them
  all back; `verbose` shows them all (0). `TF_ENABLE_ONEDNN_OPTS=0`: TensorFlow only reads and
  writes records here, so its oneDNN math kernels (and the notice that they are on) are not needed.
  Values the user set are kept.
- Two notices TensorFlow's shared libraries write while they load, before any setting is read
  (`Could not find cuda drivers` on a host without GPU, and absl's `All log messages before
  absl::InitializeLog()`), are held back by loading TensorFlow with stderr (file descriptor 2)
  pointed at /dev/null: `_QuietTensorFlowFinder` does so on its first import, wherever it happens
  (a command that never imports TensorFlow pays nothing); Python errors of the import still raise.
- Python logging gets one stderr handler on the root logger, at WARNING (DEBUG when verbose), with
  the logger's name in each line, so `logging.warning` in a library no longer installs its own
  (`WARNING:root:...`) handler. Beam (`apache_beam`), absl (orbax's routine notices) and TFDS log
  at ERROR unless verbose: what they warn about at our scale (a missing optional BigQuery client,
  pipeline options the worker discards, TFDS custom-config notices) is no problem of the command.
- What Beam itself prints (its import-time BigQuery warning, its SDK workers' logs) is held back
  by `webgraph_pipeline.beam_quiet`, which the commands that run Beam call after `quiet`.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import logging
import os
import sys
from typing import Iterator, Sequence

TF_LOG_ENV = "TF_CPP_MIN_LOG_LEVEL"
LIBRARY_LOGGERS = ("apache_beam", "absl", "tensorflow", "tensorflow_datasets")
_HANDLER_MARK = "webgraph_quiet"


def quiet(verbose: bool = False) -> None:
    """Set the libraries' logging before they are imported (see the module docstring);
    idempotent."""
    if verbose:
        os.environ[TF_LOG_ENV] = "0"
    else:
        os.environ.setdefault(TF_LOG_ENV, "3")
        os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
        if "tensorflow" not in sys.modules and not any(
            isinstance(f, _QuietTensorFlowFinder) for f in sys.meta_path
        ):
            sys.meta_path.insert(0, _QuietTensorFlowFinder())
    root = logging.getLogger()
    if not any(getattr(h, _HANDLER_MARK, False) for h in root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        setattr(handler, _HANDLER_MARK, True)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.WARNING)
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET if verbose else logging.ERROR)


@contextlib.contextmanager
def _stderr_to_devnull() -> Iterator[None]:
    """File descriptor 2 (what C++ code writes to) pointed at /dev/null for the duration."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


class _QuietTensorFlowFinder(importlib.abc.MetaPathFinder):
    """Loads the `tensorflow` package (once) with file descriptor 2 silenced; see the module
    docstring."""

    def find_spec(self, name, path=None, target=None):
        if name != "tensorflow":
            return None
        sys.meta_path.remove(self)  # the real finders find it; this finder only wraps its loading
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _QuietLoader(spec.loader)
        return spec


class _QuietLoader(importlib.abc.Loader):
    """The package's own loader, run with file descriptor 2 silenced."""

    def __init__(self, loader: importlib.abc.Loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        # the package keeps its own loader
        module.__loader__ = module.__spec__.loader = self._loader
        with _stderr_to_devnull():
            self._loader.exec_module(module)


def verbose_in(argv: Sequence[str], flags: Sequence[str] = ("--verbose",)) -> bool:
    """Whether a command line asks for the libraries' output: one of `flags`, or `--log_level
    debug`."""
    args = list(argv)
    if any(a in flags for a in args) or "--log_level=debug" in args:
        return True
    return any(a == "--log_level" and b == "debug" for a, b in zip(args, args[1:]))
