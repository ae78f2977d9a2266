"""`python -m webgraph_pipeline`: run the whole WebGraph job (see `cli.py`)."""

import sys

from webgraph_contract.quiet_logs import quiet, verbose_in

PIPELINE_PACKAGES = ("apache_beam", "warcio", "orjson", "pandas", "pyarrow", "publicsuffixlist")


def main() -> int:
    """The job's command line; one line naming the extra when the pipeline's packages are
    missing."""
    try:
        verbose = verbose_in(sys.argv[1:])
        quiet(verbose)  # before Beam and TensorFlow are imported
        if not verbose:
            from webgraph_pipeline.beam_quiet import import_beam_quietly

            import_beam_quietly()
        from webgraph_pipeline import cli  # imports Beam: the base install (the trainer's) lacks it
    except ModuleNotFoundError as e:
        if e.name not in PIPELINE_PACKAGES:
            raise
        print(
            f"webgraph_pipeline: error: {e.name} is not installed; the pipeline needs the "
            "[pipeline] extra: "
            "pip install 'webgraph-alx[pipeline]'",
            file=sys.stderr,
        )
        return 1
    return cli.main()


if __name__ == "__main__":
    sys.exit(main())
