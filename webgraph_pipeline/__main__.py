"""`python -m webgraph_pipeline`: run the whole WebGraph job (see `cli.py`)."""

import sys

from webgraph_pipeline.quiet import quiet, verbose_in

if __name__ == "__main__":
    quiet(verbose_in(sys.argv[1:]), beam=True)  # before Beam and TensorFlow are imported
    from webgraph_pipeline.cli import main

    sys.exit(main())
