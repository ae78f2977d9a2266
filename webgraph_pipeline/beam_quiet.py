"""What Beam prints, held back: its import-time BigQuery warning and its SDK workers' logs.

Beam's BigQuery client module warns when `apitools` (an optional GCP dependency) is missing, at
import, through the root logger; the commands that run Beam import it once with that warning held
back (`import_beam_quietly`, after `webgraph_contract.quiet_logs.quiet`). Beam's SDK worker
processes (`--direct_running_mode multi_processing`) start through `webgraph_pipeline.beam_worker`
(`local_runner.runner_for`), which does the same; they log at INFO by default: `beam_args` adds
`--default_sdk_harness_log_level` so they log errors only (as the parent does).
"""

from __future__ import annotations

import logging
import sys
from typing import Sequence

WORKER_LOG_FLAG = "--default_sdk_harness_log_level"


def import_beam_quietly() -> None:
    """Import Beam's BigQuery client stubs with their import-time `apitools not found` warning held
    back (nothing here uses BigQuery); a no-op once imported, or without Beam."""
    if "apache_beam.io.gcp.internal.clients.bigquery" in sys.modules:
        return
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    # `logging.warning` on a root without handlers would add one
    placeholder = logging.NullHandler()
    logging.root.addHandler(placeholder)
    try:
        import apache_beam.io.gcp.internal.clients.bigquery  # noqa: F401
    except ImportError:
        pass
    finally:
        logging.root.removeHandler(placeholder)
        logging.disable(previous)


def beam_args(beam_argv: Sequence[str], verbose: bool = False) -> list[str]:
    """Beam's options with its SDK workers' log level set to ERROR (DEBUG when verbose) unless
    given."""
    args = list(beam_argv)
    if not any(a.split("=", 1)[0] == WORKER_LOG_FLAG for a in args):
        args.append(f"{WORKER_LOG_FLAG}={'DEBUG' if verbose else 'ERROR'}")
    return args
