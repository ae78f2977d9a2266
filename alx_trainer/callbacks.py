"""What the epoch loop calls besides the solves: evaluation, metrics, checkpoints, progress, and a
user function.

`alx_trainer.train.train` runs `Callback` hooks in list order (as Keras and implicit take
callbacks): `on_train_begin`, then per half-epoch `on_half_epoch_begin`, `on_steps` (after each
compiled call) and `on_half_epoch_end`, then `on_epoch_end` with the epoch's metrics record
(a callback may add to it: `Evaluator` adds `recall@K` and `eval_seconds`), and `on_train_end`
(also after an error).
`default_callbacks(config, ...)` is the list a `TrainConfig` asks for.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import os
import sys
import time
from typing import Any, Callable, Iterator, Mapping, Sequence

import jax
from jax.experimental import multihost_utils
from tensorboardX import SummaryWriter
from tqdm import tqdm

from alx_trainer import checkpoint, jax_compat, phase_times
from alx_trainer.config import TrainConfig
from alx_trainer.data.dataset import DataError, Dataset
from alx_trainer.execution import ExecutionPlan
from alx_trainer.model import METRICS_FILE, Model, fold_in, trim
from alx_trainer.ops import cost
from webgraph_contract import fileio

log = logging.getLogger(__name__)


class Tables(dict):
    """The run's tables by name ('row', 'col'; sharded, padded), each with its gramian once
    computed: writing a table (`tables[name] = ...`, by the loop or a callback) drops its
    gramian."""

    def __init__(self, tables: Mapping[str, jax.Array]):
        super().__init__(tables)
        self.gramians: dict[str, jax.Array] = {}

    def __setitem__(self, name: str, table: jax.Array) -> None:
        super().__setitem__(name, table)
        self.gramians.pop(name, None)

    def solved(self, name: str, table: jax.Array, gramian: jax.Array | None) -> None:
        """Write table `name` with its gramian when known."""
        self[name] = table
        if gramian is not None:
            self.gramians[name] = gramian

    def gramian(self, name: str, compute: Callable[[jax.Array], jax.Array]) -> jax.Array:
        """The gramian of table `name`'s current value, by `compute(table)` once per value."""
        if name not in self.gramians:
            self.gramians[name] = compute(self[name])
        return self.gramians[name]


@dataclasses.dataclass
class Run:
    """The state of a training run that callbacks see: tables (sharded, padded), history, where."""

    config: TrainConfig
    dataset: Dataset
    mesh: Any
    tables: Tables
    start_epoch: int
    # metrics records of the epochs done (restored ones first)
    history: list[dict]
    # how the run executes (`alx_trainer.execution`)
    plan: ExecutionPlan
    _model: Model | None = None

    def model(self, epoch: int) -> Model:
        """The tables as a `Model` (trimmed once per epoch; its metrics are the history so far)."""
        if self._model is None or self._model.epoch != epoch:
            row = trim(self.tables["row"], self.dataset.num_rows)
            col = row if self.config.tied else trim(self.tables["col"], self.dataset.num_cols)
            self._model = Model(row, col, self.config, epoch, plan=self.plan)
        self._model.metrics = list(self.history)
        return self._model

    def is_last(self, epoch: int) -> bool:
        return epoch == self.config.epochs


class Callback:
    """Hooks of the epoch loop; each does nothing unless overridden."""

    def on_train_begin(self, run: Run) -> None:
        pass

    def on_half_epoch_begin(self, run: Run, epoch: int, side: str, total_steps: int) -> None:
        pass

    def on_steps(self, steps: int, rows: int) -> None:
        """After each compiled call: `steps` dense batches solving `rows` rows (from device threads,
        one at a time)."""

    def on_half_epoch_end(self, run: Run, epoch: int, side: str) -> None:
        pass

    def on_epoch_end(self, run: Run, epoch: int, record: dict) -> None:
        pass

    def on_train_end(self, run: Run) -> None:
        pass


class Evaluator(Callback):
    """Recall@K (and NDCG@`ndcg_k` when there are at least that many columns) on the test split
    (the validation split when tuning) every `every` epochs and the last, on the plan's evaluation
    devices and top-K block, its rows folded in as the plan's `for_fold_in` says."""

    def __init__(self, every: int):
        self.every = every
        self.fold_in_plan: ExecutionPlan | None = None

    def on_train_begin(self, run: Run) -> None:
        """Something to evaluate, before epoch 1: the test rows are read (and kept for the
        evaluations) and counted against stats.json."""
        # the evaluation's modules: only for a run that evaluates
        from alx_trainer import loading

        self.fold_in_plan = run.plan.for_fold_in(run.config)
        dataset = run.dataset
        if "test" not in dataset.files:
            log.warning("%s has no test split: training without evaluation", dataset.name)
            return
        # (`eval_data` checks the count against stats.json)
        counted, how = len(loading.eval_data(dataset).known), "read before epoch 1"
        if counted == 0:
            raise DataError(
                f"{dataset.name}: no test rows to evaluate ({how}); pass --eval_every 0 to train "
                "without evaluation, or build the dataset with a --test_fraction above 0"
            )

    def on_epoch_end(self, run: Run, epoch: int, record: dict) -> None:
        if "test" not in run.dataset.files or not (epoch % self.every == 0 or run.is_last(epoch)):
            return
        # the evaluation's modules only for a run that evaluates (a second of imports)
        from alx_trainer.evaluation import evaluate

        dataset, config, plan = run.dataset, run.config, run.plan
        ndcg_k = config.ndcg_k if 0 < config.ndcg_k <= dataset.num_cols else None
        model = run.model(epoch)
        rows, cols = plan.topk_block
        ranking = evaluate.Ranking(
            ks=config.recall_ks(),
            ndcg_k=ndcg_k,
            mesh=plan.eval_device_list(),
            rows_per_batch=rows,
            cols_per_block=cols,
        )
        began = time.perf_counter()
        with (
            phase_times.timed("eval", f"epoch {epoch}"),
            _details_at_debug("alx_trainer.evaluation"),
        ):
            result = evaluate.evaluate_dataset(
                model,
                dataset,
                ranking=ranking,
                baseline=dataset.eval_split == "test",
                max_rows=config.eval_rows or None,
                fold_in_fn=functools.partial(fold_in, plan=self.fold_in_plan),
            )
        record.update(result)
        record["eval_seconds"] = time.perf_counter() - began


@contextlib.contextmanager
def _details_at_debug(name: str) -> Iterator[None]:
    """The INFO lines of logger `name` held back for the block unless debugging: an epoch's
    evaluation is one figure of the epoch's line, its set-up and speed are for `eval`'s log."""
    logger = logging.getLogger(name)
    level = logger.level
    if not logger.isEnabledFor(logging.DEBUG):
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


class MetricsLogger(Callback):
    """Per-epoch records to `<model_dir>/metrics.jsonl`, TensorBoard and the log (process 0 only).

    At the start the file is replaced whole (temporary file, then rename) by the restored epochs'
    records, cut back to the checkpoint; then each epoch appends its line to a local file, so no
    write ever truncates the history, and each costs one line. An object store (gs://) cannot
    append: there the file is replaced whole each epoch, as one new object.
    """

    def __init__(self, model_dir: str):
        self.path = os.path.join(model_dir, METRICS_FILE)
        self.tensorboard_dir = os.path.join(model_dir, "tensorboard")
        self.enabled = jax.process_index() == 0
        self.writer: SummaryWriter | None = None

    def on_train_begin(self, run: Run) -> None:
        if self.enabled:
            if run.history or fileio.exists(self.path):
                fileio.write_atomic(self.path, _json_lines(run.history))
            self.writer = SummaryWriter(self.tensorboard_dir)

    def on_epoch_end(self, run: Run, epoch: int, record: dict) -> None:
        if not self.enabled:
            return
        if fileio.is_local(self.path):
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(_json_lines([record]))
        else:
            fileio.write_atomic(self.path, _json_lines(run.history))
        for key, value in record.items():
            if key != "epoch" and isinstance(value, (int, float)):
                self.writer.add_scalar(key, value, record["epoch"])
        self.writer.flush()
        log.info("%s", epoch_line(record, run.config.epochs))
        log.debug("epoch %d: %s", epoch, json.dumps(record, sort_keys=True))

    def on_train_end(self, run: Run) -> None:
        if self.writer is not None:
            self.writer.close()


def _json_lines(records: Sequence[dict]) -> str:
    """One JSON object per line."""
    return "".join(json.dumps(r) + "\n" for r in records)


def epoch_line(record: dict, epochs: int) -> str:
    """An epoch's record in under a terminal line: time, rows and columns solved, loss (when
    computed) and the first Recall@K; the whole record is in metrics.jsonl and TensorBoard
    (compile time included: `compile_seconds`, summed in `train`'s closing line)."""
    parts = [
        f"epoch {record['epoch']}/{epochs} {record.get('seconds', 0.0):.2f} s: "
        f"{record.get('rows_solved', 0):,} rows + {record.get('cols_solved', 0):,} cols solved"
    ]
    if "loss" in record:
        parts.append(f"loss {record['loss']:.5g}")
    recall = next((k for k in record if k.startswith("recall@")), None)
    if recall:
        parts.append(f"{recall} {record[recall]:.4f}")
    return ", ".join(parts)


class Stopped(Exception):
    """A multi-process run stopped at an epoch boundary because a process got SIGTERM; the epoch's
    checkpoint is saved (the message says which epoch and how to go on)."""


class Checkpointer(Callback):
    """An orbax checkpoint every `every` epochs (0: only the last) and after the last epoch.

    In a multi-process run JAX's preemption service takes SIGTERM (any process's) and agrees on an
    epoch every process reaches (`multihost_utils.reached_preemption_sync_point`, asked after each
    epoch): there every process saves the checkpoint and raises `Stopped`, so all stop together
    (a one-process run is ended by SIGTERM as Python's default has it, resuming from its last
    checkpoint)."""

    def __init__(self, mgr, every: int):
        self.mgr, self.every = mgr, every

    def on_epoch_end(self, run: Run, epoch: int, record: dict) -> None:
        stop = jax.process_count() > 1 and _preempted(epoch)
        if stop or (self.every and epoch % self.every == 0) or run.is_last(epoch):
            with phase_times.timed("checkpoint", f"epoch {epoch}"):
                checkpoint.save(self.mgr, epoch, run.tables, checkpoint_meta(run, epoch))
        if stop and not run.is_last(epoch):
            raise Stopped(
                f"stopped after epoch {epoch} of {run.config.epochs}: a process got SIGTERM; "
                f"epoch {epoch} is checkpointed in {run.config.model_dir}, run the same command "
                "to resume"
            )


def _preempted(epoch: int) -> bool:
    """Whether every process has reached the epoch JAX's preemption service chose after a SIGTERM
    (False when the service is off)."""
    if not jax_compat.preemption_service_on():
        return False
    return multihost_utils.reached_preemption_sync_point(epoch)


def checkpoint_meta(run: Run, epoch: int) -> dict:
    """The JSON saved beside the tables: epoch, config, execution plan, real sizes, padded shapes
    and dtype."""
    return {
        "epoch": epoch,
        "config": run.config.to_dict(),
        "plan": run.plan.to_dict(),
        "num_rows": run.dataset.num_rows,
        "num_cols": run.dataset.num_cols,
        "table_shapes": {k: list(v.shape) for k, v in run.tables.items()},
        "table_dtype": str(next(iter(run.tables.values())).dtype),
        "dataset_fingerprint": run.dataset.fingerprint,
    }


class ProgressBar(Callback):
    """A tqdm bar per half-epoch on stderr with rows per second (process 0 only)."""

    def __init__(self):
        self.bar: tqdm | None = None
        self.start, self.rows = 0.0, 0

    def on_half_epoch_begin(self, run: Run, epoch: int, side: str, total_steps: int) -> None:
        self.bar = tqdm(
            total=total_steps,
            desc=f"epoch {epoch} {side}s",
            unit="step",
            file=sys.stderr,
            leave=False,
        )
        self.start, self.rows = time.perf_counter(), 0

    def on_steps(self, steps: int, rows: int) -> None:
        self.rows += rows
        self.bar.update(steps)
        rate = self.rows / max(time.perf_counter() - self.start, 1e-9)
        self.bar.set_postfix(rows_per_s=f"{rate:.0f}", refresh=False)

    def on_half_epoch_end(self, run: Run, epoch: int, side: str) -> None:
        self.bar.close()


class CostReport(Callback):
    """XLA's cost analysis of an epoch's programs (`ops.cost.epoch_cost`) in the debug log before
    epoch 1: per launch and per epoch and device. `train` adds it when its log is at debug level."""

    def __init__(self, runners: Mapping[str, Any], sides: Sequence):
        self.runners, self.sides = runners, sides

    def on_train_begin(self, run: Run) -> None:
        costs = cost.epoch_cost(self.runners, self.sides, run.tables)
        for c in costs["programs"]:
            log.debug(
                "%s side, %s: %.4g GFLOP, %.4g GB accessed per launch (XLA cost analysis, loops "
                "unrolled), %d per half-epoch",
                c["side"],
                c["name"],
                c["flops"] / 1e9,
                c["bytes_accessed"] / 1e9,
                c["times"],
            )
        log.debug(
            "per epoch and device: %.4g GFLOP, %.4g GB accessed, %d compiled calls",
            costs["flops_per_epoch"] / 1e9,
            costs["bytes_per_epoch"] / 1e9,
            costs["launches_per_epoch"],
        )


class LambdaCallback(Callback):
    """`fn(epoch, model)` after every epoch (the model's metrics include that epoch's record)."""

    def __init__(self, fn: Callable[[int, Model], None]):
        self.fn = fn

    def on_epoch_end(self, run: Run, epoch: int, record: dict) -> None:
        self.fn(epoch, run.model(epoch))


def default_callbacks(config: TrainConfig, mgr, checkpoints: bool = True) -> list[Callback]:
    """Evaluation, metrics, checkpoints (unless `checkpoints` is False) and progress as `config`
    asks, in that order."""
    callbacks: list[Callback] = [Evaluator(config.eval_every)] if config.eval_every else []
    callbacks.append(MetricsLogger(config.model_dir))
    if checkpoints:
        callbacks.append(Checkpointer(mgr, config.checkpoint_every))
    # in a log: the epoch lines
    if config.progress and jax.process_index() == 0 and sys.stderr.isatty():
        callbacks.append(ProgressBar())
    return callbacks
