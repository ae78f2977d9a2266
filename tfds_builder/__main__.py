"""`python -m tfds_builder build ...`: `tfds build`, same flags, with the libraries quiet and a
short summary.

`tfds build` loads TensorFlow and Beam before it loads the builder, so what they print on start-up
(TensorFlow's C++ notices, Beam's `apitools not found`) comes before the builder can hold it back;
this command sets `webgraph_contract.quiet_logs` up first, then runs the `tfds` command line itself,
with log records at INFO and below disabled (TFDS's `Loading dataset ...` notes; `tfds build`
sets its own level to INFO, so only `logging.disable` reaches them). After each build it prints
`build_summary.summary` (splits with their example counts, where the files are) instead of TFDS's
DatasetInfo dump. `--verbose` (this command's own flag) or `WEBGRAPH_DEBUG=1` shows everything:
the libraries' logs, tracebacks, the DatasetInfo.
"""

import logging
import os
import runpy
import sys

from webgraph_contract.command_line import DEBUG_ENV, debugging
from webgraph_contract.quiet_logs import quiet
from webgraph_pipeline.beam_quiet import import_beam_quietly

TFDS_CLI = "tensorflow_datasets.scripts.cli.main"
VERBOSE_FLAG = "--verbose"

if __name__ == "__main__":
    verbose = VERBOSE_FLAG in sys.argv[1:] or debugging()
    quiet(verbose)
    if verbose:
        os.environ[DEBUG_ENV] = (
            "1"  # the builder's own quiet settings and one-line errors step aside
        )
    else:  # the `tfds` command sets its log level to INFO itself: progress notes stay back here
        import_beam_quietly()
        logging.disable(logging.INFO)
        from tensorflow_datasets.scripts.cli import cli_utils

        from tfds_builder.build_summary import summarised

        cli_utils.download_and_prepare = summarised(cli_utils.download_and_prepare)
    sys.argv = ["tfds", *[a for a in sys.argv[1:] if a != VERBOSE_FLAG]]
    runpy.run_module(TFDS_CLI, run_name="__main__", alter_sys=True)
