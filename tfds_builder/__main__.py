"""`python -m tfds_builder build ...`: `tfds build`, flags and output the same, with the libraries quiet.

`tfds build` loads TensorFlow and Beam before it loads the builder, so what they print on start-up
(TensorFlow's C++ notices, Beam's `apitools not found`) comes before the builder can hold it back;
this command sets `webgraph_pipeline.quiet` up first, then runs the `tfds` command line itself,
with log records at INFO and below disabled (TFDS's `Loading dataset ...` notes; `tfds build`
sets its own level to INFO, so only `logging.disable` reaches them).
`WEBGRAPH_DEBUG=1` shows everything (and tracebacks), as it does for `tfds build`.
"""

import logging
import os
import runpy
import sys

from webgraph_pipeline.quiet import quiet

TFDS_CLI = "tensorflow_datasets.scripts.cli.main"

if __name__ == "__main__":
    verbose = os.environ.get("WEBGRAPH_DEBUG", "") not in ("", "0")
    quiet(verbose, beam=True)
    if not verbose:  # the `tfds` command sets its log level to INFO itself: progress notes stay back here
        logging.disable(logging.INFO)
    sys.argv = ["tfds", *sys.argv[1:]]
    runpy.run_module(TFDS_CLI, run_name="__main__", alter_sys=True)
