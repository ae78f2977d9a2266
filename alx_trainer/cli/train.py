"""`python -m alx_trainer train --data DIR_OR_TFDS_NAME --model_dir DIR [options]`.

Every `TrainConfig` field is a flag (see `--help`); `--config FILE` (JSON/YAML) sets them too,
flags winning. Errors print one line `alx_trainer train: error: ...` and exit 2 (a bad flag or
value) or 1 (bad data, a failed run).

Multi-host (a TPU VM slice; every worker runs the same command, reads its own share of the shard
files, and `jax.distributed.initialize()` finds the coordinator by itself):

    gcloud compute tpus tpu-vm create alx --zone=us-central2-b --accelerator-type=v4-32 \
        --version=tpu-ubuntu2204-base
    gcloud compute tpus tpu-vm ssh alx --zone=us-central2-b --worker=all \
        --command="git clone REPO_URL alx && cd alx && pip install -e '.[tpu]'"
    gcloud compute tpus tpu-vm ssh alx --zone=us-central2-b --worker=all \
        --command="cd alx && python -m alx_trainer train --distributed \
                   --data gs://BUCKET/web_graph/de-dense --model_dir gs://BUCKET/alx/de-dense \
                   --dim 128 --epochs 16 --alpha 0.1 --reg 1.0"

Elsewhere (CPU or GPU hosts) give the coordinator explicitly: `--distributed
--coordinator_address HOST0:PORT --num_processes N --process_id I` on each process.
"""

from __future__ import annotations

import signal
import sys

from alx_trainer.cli.common import run, setup_logging, use_compile_cache
from alx_trainer.cli.dataclass_flags import parse_dataclass_args
from alx_trainer.config import TrainConfig
from webgraph_contract.command_line import one_line


def _init_distributed(config: TrainConfig) -> None:
    """`jax.distributed.initialize` (explicit coordinator for CPU/GPU clusters, auto on a TPU
    slice)."""
    # JAX takes a second to import: not for --help or a bad flag
    import jax

    # CPU devices of several processes need gloo for cross-process collectives; TPU/GPU ignore it.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")

    kwargs: dict = {"initialization_timeout": config.distributed_timeout}
    if config.process_id >= 0 or config.coordinator_address:
        kwargs.update(
            coordinator_address=config.coordinator_address or None,
            num_processes=config.num_processes or None,
            process_id=config.process_id if config.process_id >= 0 else None,
        )
    where = config.coordinator_address or "the auto-detected coordinator"
    check = (
        "check that every process has its own --process_id (0 to --num_processes - 1, none "
        "twice), the same --num_processes, and --coordinator_address of process 0 (host:port "
        "reachable from all)"
    )

    try:
        jax.distributed.initialize(**kwargs)
    # JAX's Python-level errors: a bad value, a refusal
    except (ValueError, RuntimeError) as e:
        raise ConnectionError(
            f"jax.distributed: could not join the run at {where}; {check} ({_short(e)})"
        ) from None


def _short(error: object) -> str:
    """The first line of a JAX runtime status or error, cut to 200 characters."""
    return one_line(str(error)).split("RPC:")[0].strip()[:200]


def main(argv: list[str] | None = None) -> int:
    """Parse flags, train, print a one-line summary; 0 on success, 2 for a bad flag or value, 1 for
    bad data or a failed run (one line on stderr; `--debug` or WEBGRAPH_DEBUG=1 adds the
    traceback)."""
    return run("train", lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    config = parse_dataclass_args(TrainConfig, argv, prog="alx_trainer train").validate()
    setup_logging(config.log_level)
    # not for --help or a bad flag (as below)
    from alx_trainer import phase_times

    # the seconds before the command's imports, from the process's start
    phase_times.command_started()
    # the training stack (orbax, ...) takes seconds to import: not for --help or a bad flag
    with phase_times.timed("imports", is_startup=True):
        use_compile_cache(config.compile_cache)
        import jax  # (as above)

        from alx_trainer import execution  # (as above)
        from alx_trainer.callbacks import Stopped  # (as above)
        from alx_trainer.train import train  # (as above)

    with phase_times.timed("backend", is_startup=True):
        if config.distributed:
            _init_distributed(config)
        else:
            # a small problem (stats.json's count) runs on one CPU device (`execution`)
            execution.start_cpu_devices(config, execution.stats_links(config.data))
        jax.devices()
    try:
        # the summary needs the metrics only
        model = train(config, tables=False)
    # SIGTERM in a multi-process run: all stopped after the same epoch
    except Stopped as e:
        print(f"alx_trainer train: {e}", file=sys.stderr)
        return 128 + signal.SIGTERM
    finally:
        phase_times.reset()
    if not model.epochs_trained:
        print(
            f"nothing to train: {config.model_dir} is at epoch {model.epoch} already (--epochs "
            f"{config.epochs}); it and its config.json are as they were"
        )
        return 0
    last = model.metrics[-1] if model.metrics else {}
    shown = [k for k in last if k == "loss" or (k.startswith("recall@") and "/" not in k)]
    summary = ", ".join(
        f"{k} {last[k]:.6g}" if k == "loss" else f"{k} {last[k]:.4f}" for k in shown
    )
    where = f"{jax.device_count()} device(s) in {jax.process_count()} process(es)"
    this_run = model.metrics[len(model.metrics) - model.epochs_trained :]
    compiles = sum(r.get("compiles", 0) for r in this_run)
    spent = f", {compiles} program(s) compiled" if compiles else ", nothing compiled"
    print(
        f"trained {model.epoch} epoch(s) on {where} into {config.model_dir}{spent}"
        + (f": {summary}" if summary else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
