"""What `python -m tfds_builder build` prints after a build: a short summary instead of TFDS's
DatasetInfo.

`tfds build` prints the whole `repr(builder.info)` (features, the builder's docstring, the
citation: about 40 lines) after each dataset it builds. At default verbosity our command prints the
dataset's name and config, each split with its example count, and where the files are; `--verbose`
(or `WEBGRAPH_DEBUG=1`) keeps TFDS's own print.
"""

from __future__ import annotations

import contextlib
import functools
import io
import sys
from typing import Any, Callable


def summary(builder: Any) -> str:
    """Two lines: `NAME/CONFIG/VERSION: split N, ... examples` (splits in TFDS's order) and `wrote
    DATA_DIR`."""
    info = builder.info
    splits = ", ".join(f"{name} {split.num_examples:,}" for name, split in info.splits.items())
    return (
        f"{info.full_name}: {splits + ' examples' if splits else 'no split'}\nwrote "
        f"{builder.data_dir}"
    )


def summarised(download_and_prepare: Callable[..., None]) -> Callable[..., None]:
    """TFDS's per-builder `download_and_prepare` of its command line, with `summary` printed in
    place of the DatasetInfo it prints on stdout at the end (a blank line, `repr(builder.info)`, a
    blank line). Whatever else the build writes on stdout is passed on, after the build; its log
    goes to stderr as before."""

    @functools.wraps(download_and_prepare)
    def wrapper(builder: Any, *args: Any, **kwargs: Any) -> None:
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                download_and_prepare(builder, *args, **kwargs)
        finally:
            sys.stdout.write(printed.getvalue().removesuffix(f"\n{builder.info!r}\n\n"))
        print(summary(builder), flush=True)

    return wrapper
