"""`python -m webgraph_pipeline.beam_worker`: Beam's SDK worker process, with Beam's import-time
warning held back.

With `--direct_running_mode multi_processing` the local runner starts each worker as a new Python
process (`python -m apache_beam.runners.worker.sdk_worker_main`). Importing Beam there logs
`apitools not found ...` through the root logger, which gives the process a stderr handler: that
line and the worker's first INFO line (`Logging handler created.`) reached the terminal, 2 lines per
worker. This entry point imports Beam with that warning held back
(`beam_quiet.import_beam_quietly`), then runs Beam's own worker main: everything the worker logs
afterwards goes to the runner's log service, and the parent process prints it at its own level
(errors only, unless `--verbose`). `local_runner.runner_for` makes the local runner start its
workers with this command.
"""

import sys

from webgraph_pipeline.beam_quiet import import_beam_quietly

if __name__ == "__main__":
    import_beam_quietly()
    from apache_beam.runners.worker import sdk_worker_main

    sdk_worker_main.main(sys.argv)
