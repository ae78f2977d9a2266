"""`python -m webgraph_pipeline`: run the whole WebGraph job (see `cli.py`)."""

import sys

from webgraph_pipeline.cli import main

if __name__ == "__main__":
    sys.exit(main())
