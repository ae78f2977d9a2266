"""The epoch loop of sharded implicit ALS (paper Eq. 3, Algorithm 2); everything else is a callback.

`train(config, callbacks=(), mesh=None) -> Model` trains, resuming from the latest checkpoint in
`config.model_dir`. How it executes is decided once, by `alx_trainer.execution` (its
`ExecutionPlan`, logged in one line and saved as plan.json beside the checkpoints). Each epoch is
a row half-epoch and a column half-epoch, each run by an `ops.side_runner.SideRunner` (solve every
row of one side with the other table fixed); where both sides' batches stay on the devices (the
accelerator path) the epoch is one compiled call (`side_runner.run_epoch`), and what the record
needs of it comes to the host in one copy after it. Rows
that never occur in a split keep their initial embedding, and count as such in the other side's
gramian (alpha G: a ridge of about alpha x their number x the initial variance); an in-memory
matrix (`dataset.in_memory`) has a record for every row, so its rows without links are solved
(to 0 by the exact solvers). With tied tables the row and column
half-epochs both update the one table, each reading a snapshot of it taken at the start of the
half-epoch. Evaluation, metrics, checkpoints and progress are `alx_trainer.callbacks`.

Per-epoch metrics (`Model.metrics`, `metrics.jsonl`, TensorBoard): `loss_observed` (sum over
training pairs of (1 - w.h)^2, from the column half-epoch, i.e. with the final tables when untied;
only in the epochs of `train_loss_every`, as `loss`; with tied tables it pairs the column
half-epoch's solutions with the row half-epoch's snapshot, and `loss_reg_row` is of the row
half-epoch's solutions, which the column half-epoch then overwrites: `loss` is then no objective of
the returned table, only a trend), `loss_unobserved` (alpha * sum over all pairs of (w.h)^2 = alpha
<W^T W, H^T H>), `loss_reg_row`, `loss_reg_col` (lambda_r |x_r|^2 over the solved rows), `loss`,
`seconds`, `row_seconds`, `col_seconds` (an epoch in one call, the accelerator path's resident
batches: all in `row_seconds`), `compile_seconds` (tracing, lowering, and compiling programs or
loading them from the persistent cache, summed over the threads doing it: per-core devices compile
at once), `compiles` (programs XLA compiled), `rows_solved`, `cols_solved`, and `recall@K` (+
`ndcg@100`, popularity baseline) from `alx_trainer.evaluation.evaluate.evaluate_dataset` when the
dataset has a test split, with `eval_seconds` (its wall seconds).

Runs that differ only in `PER_RUN` fields (a sweep's points of one d) can share the dataset and
both sides' planned batches: `prepare(config)` opens and plans once, `train(config,
prepared=...)` then runs with its own alpha, lambda and nu (`Prepared.runners_for`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import time
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from alx_trainer import checkpoint, compile_cache, execution, jax_compat, phase_times
from alx_trainer.callbacks import Callback, CostReport, Run, Tables, default_callbacks
from alx_trainer.config import TrainConfig
from alx_trainer.data.dataset import (
    Dataset,
    check_dataset,
    check_outside_data,
    check_rows,
    check_trainable,
    open_dataset,
    split_reader,
    validation_view,
)
from alx_trainer.execution import ExecutionPlan, make_mesh
from alx_trainer.model import METRICS_FILE, Model, init_tables, read_metrics
from alx_trainer.ops import cost
from alx_trainer.ops.side_runner import (
    LossTerms,
    ReplicaBuffer,
    SideRunner,
    one_call_epoch,
    plan_side,
    run_epoch,
)
from webgraph_contract import fileio

log = logging.getLogger(__name__)


class TrainingCollapse(FloatingPointError):
    """The tables became non-finite (paper 4.4); the message names the epoch and the side."""


@dataclasses.dataclass(frozen=True)
class Side:
    """One half-epoch: solve table `table` from split `split` with table `other` fixed."""

    name: str
    split: str
    table: str
    other: str


def sides(tied: bool) -> tuple[Side, Side]:
    """The row and the column half-epoch (with tied tables both solve and read the one table)."""
    if tied:
        return Side("row", "train", "row", "row"), Side("col", "train_t", "row", "row")
    return Side("row", "train", "row", "col"), Side("col", "train_t", "col", "row")


def train(
    config: TrainConfig,
    callbacks: Sequence[Callback] = (),
    mesh=None,
    tables: bool = True,
    dataset: Dataset | None = None,
    prepared: Prepared | None = None,
    checkpoints: bool = True,
) -> Model:
    """Train (or resume) per `config`; returns the final `Model`.

    The callbacks `config` asks for run first (evaluation, metrics, checkpoints, progress), then
    `callbacks` (`callbacks.LambdaCallback(fn)` calls `fn(epoch, model)` after each epoch).
    `mesh`: the devices (None: every device). `tables=False` returns the Model without its tables
    (None): its float32 copies would double the memory of bfloat16 tables (the command line
    reports metrics only). `dataset` (e.g. `dataset.in_memory(...)`) replaces opening `config.data`
    (then just its name). `prepared` (`prepare`; then no `mesh` or `dataset`): the dataset opened
    and both sides planned once for runs that differ only in `PER_RUN` fields, each run with its
    own alpha, lambda and nu. `checkpoints=False` saves none (a sweep's point whose model is not
    kept).
    """
    config.validate()
    phase_times.begin_run()
    if prepared is None:
        mesh, dataset, plan = _opened(config, mesh, dataset)
        runners = None
    else:
        if mesh is not None or dataset is not None:
            raise ValueError("train: give prepared, or mesh and dataset, not both")
        prepared.check(config)
        mesh, dataset, plan = prepared.mesh, prepared.dataset, prepared.plan
        check_outside_data(config.data, config.model_dir)
        if jax.process_count() > 1:
            same_run_everywhere(config, dataset.fingerprint)
        runners = prepared.runners_for(config)
    if fileio.exists(config.model_dir) and not fileio.isdir(config.model_dir):
        raise ValueError(
            f"--model_dir {config.model_dir} is a file, not a directory; choose a directory"
        )
    fileio.makedirs(config.model_dir)
    # one writer per model directory (process 0 speaks for a multi-host run)
    lock = (
        checkpoint.hold_lock(config.model_dir)
        if jax.process_index() == 0
        else contextlib.nullcontext()
    )
    with lock:
        return _train(config, plan, dataset, mesh, list(callbacks), tables, runners, checkpoints)


def _opened(
    config: TrainConfig, mesh, dataset: Dataset | None
) -> tuple[object, Dataset, ExecutionPlan]:
    """The mesh (None: every device), the dataset opened (unless given), checked and pointed at
    the validation splits when `config.validation`, and the execution plan."""
    mesh = mesh if mesh is not None else make_mesh()
    with phase_times.timed("open"):
        if dataset is None:
            dataset = open_dataset(config.data, config.tfds_data_dir)
        check_dataset(dataset)
        check_outside_data(config.data, config.model_dir)
        if config.validation:
            dataset = validation_view(dataset)
        check_trainable(config.data, dataset.num_rows, dataset.num_cols, dataset.splits)
    if jax.process_count() > 1:
        same_run_everywhere(config, dataset.fingerprint)
    if config.tied and dataset.num_rows != dataset.num_cols:
        raise ValueError(
            f"tied: needs a square matrix, {config.data} is {dataset.num_rows} x {dataset.num_cols}"
        )
    return mesh, dataset, _plan(config, dataset, mesh)


def _plan(config: TrainConfig, dataset: Dataset, mesh) -> ExecutionPlan:
    """The execution plan of `config` for `dataset` (its links as its stats count them) on
    `mesh`."""
    links = execution.dataset_links(dataset.stats)
    return execution.current(config, dataset.num_rows, dataset.num_cols, mesh, links)


# TrainConfig fields in which runs sharing one `Prepared` may differ: the kernels' alpha, lambda
# and nu (runtime arguments, `SideRunner.hyper`), the initial tables (made by each run), the
# epochs, the evaluation, the checkpoints and where the run writes and what it prints
PER_RUN = frozenset(
    {
        "alpha",
        "reg",
        "reg_exponent",
        "seed",
        "init_stddev",
        "epochs",
        "eval_every",
        "train_loss_every",
        "eval_k",
        "ndcg_k",
        "eval_rows",
        "model_dir",
        "checkpoint_every",
        "keep_checkpoints",
        "progress",
        "log_level",
    }
)


@dataclasses.dataclass(frozen=True)
class Prepared:
    """What `prepare` made once for several `train` runs: the dataset opened and checked (its
    validation view for `config.validation`), the mesh, the execution plan and both sides' runners
    (their batches read, planned and packed; on the devices where the plan keeps them)."""

    config: TrainConfig
    mesh: object
    dataset: Dataset
    plan: ExecutionPlan
    runners: dict[str, SideRunner]

    def check(self, config: TrainConfig) -> None:
        """A ValueError naming the first field outside `PER_RUN` in which `config` differs from
        the config these runners were planned for."""
        for field in dataclasses.fields(config):
            mine, theirs = getattr(self.config, field.name), getattr(config, field.name)
            if field.name not in PER_RUN and mine != theirs:
                raise ValueError(
                    f"train: prepared for --{field.name} {mine!r}, this run has {theirs!r}; "
                    f"runs sharing prepared data differ only in {', '.join(sorted(PER_RUN))}"
                )

    def runners_for(self, config: TrainConfig) -> dict[str, SideRunner]:
        """Both sides' runners with `config`'s alpha, lambda and nu: new `SideRunner`s over the
        planned batches and sources (a runner keeps the hyperparameters it was made with)."""
        return {
            name: SideRunner(
                config, r.exe, r.mesh, r.spec, r.plan, r.source, r.shard, r.one_call, r.replica
            )
            for name, r in self.runners.items()
        }


def prepare(config: TrainConfig, mesh=None, dataset: Dataset | None = None) -> Prepared:
    """Open and check the dataset (or take `dataset`), make the execution plan and plan both
    sides (`_runners`) once, for `train(..., prepared=)` runs that differ from `config` only in
    `PER_RUN` fields (a sweep's points of one d). The sides are planned beside initial tables,
    as `train` plans them: whether batches stay on the devices depends on the memory left free."""
    config.validate()
    mesh, dataset, plan = _opened(config, mesh, dataset)
    with phase_times.timed("init", "tables"):
        dtype = execution.table_dtype(plan)
        tables = init_tables(config, dataset.num_rows, dataset.num_cols, mesh, dtype)
    runners = _runners(config, plan, dataset, mesh)
    del tables
    return Prepared(config, mesh, dataset, plan, runners)


# Fields a process may set for itself; the data is compared by its fingerprint (a local copy each).
HOST_FIELDS = (
    "process_id",
    "progress",
    "log_level",
    "cpu_devices",
    "compile_cache",
    "coordinator_address",
    "data",
    "tfds_data_dir",
)
_runs_checked = 0


def same_run_everywhere(config: TrainConfig, fingerprint: object) -> None:
    """Raise ValueError (the same on every process) unless every process of a multi-process run
    has this config and dataset: each puts its own in JAX's distributed key-value store and reads
    the others' (no device collective, which a mismatch in shapes would abort in C++)."""
    global _runs_checked
    client = jax_compat.distributed_client()
    if client is None:
        return
    _runs_checked += 1
    mine = {k: v for k, v in config.to_dict().items() if k not in HOST_FIELDS}
    mine["dataset"] = fingerprint
    key = f"alx_trainer/train{_runs_checked}/config/"
    client.key_value_set(key + str(jax.process_index()), json.dumps(mine, sort_keys=True))
    timeout_ms = 1000 * max(config.distributed_timeout, 1)
    for other in range(jax.process_count()):
        theirs = json.loads(client.blocking_key_value_get(key + str(other), timeout_ms))
        for name in sorted(set(mine) | set(theirs)):
            if mine.get(name) != theirs.get(name):
                what = "the dataset (its fingerprint)" if name == "dataset" else f"--{name}"
                raise ValueError(
                    f"process {jax.process_index()} and process {other} differ in {what}: "
                    f"{_shown(mine.get(name))} here, {_shown(theirs.get(name))} there; every "
                    "process must run the same command and data (only --process_id differs)"
                )


def _shown(value: object) -> str:
    return json.dumps(value)[:80]


def _train(
    config: TrainConfig,
    plan: ExecutionPlan,
    dataset: Dataset,
    mesh,
    extra: list[Callback],
    with_tables: bool,
    planned: dict[str, SideRunner] | None = None,
    checkpoints: bool = True,
) -> Model:
    """`train` once the data is open, the plan made and the model directory is this run's;
    `planned`: both sides' runners when prepared already."""
    with phase_times.timed("init", "tables"):
        dtype = execution.table_dtype(plan)
        tables = Tables(init_tables(config, dataset.num_rows, dataset.num_cols, mesh, dtype))
    mgr = checkpoint.manager(config.model_dir, keep=config.keep_checkpoints)
    try:
        with phase_times.timed("init", "resume"):
            start = checkpoint.resume(
                mgr, tables, config.model_dir, config.data, dataset.fingerprint
            )
        if start >= config.epochs:
            runners = {}
        elif planned is not None:
            runners = planned
        else:
            runners = _runners(config, plan, dataset, mesh)
    except BaseException:
        mgr.close()
        raise
    # the restored epochs' records
    history = [
        r
        for r in read_metrics(os.path.join(config.model_dir, METRICS_FILE))
        if r.get("epoch", 0) <= start
    ]
    # nothing to train: the model and its files stay as they are
    if start >= config.epochs:
        mgr.close()
        log.info("%s is at epoch %d already (epochs %d)", config.model_dir, start, config.epochs)
        run = Run(config, dataset, mesh, tables, start, history, plan)
        if with_tables:
            return run.model(start)
        return Model(None, None, config, start, history, plan=plan)
    if jax.process_index() == 0:
        with fileio.open_file(os.path.join(config.model_dir, "config.json"), "w") as f:
            f.write(json.dumps(config.to_dict(), indent=2, sort_keys=True) + "\n")
        execution.save_plan(config.model_dir, plan)
    run = Run(config, dataset, mesh, tables, start, history, plan)
    hooks = default_callbacks(config, mgr, checkpoints) + extra
    if log.isEnabledFor(logging.DEBUG):
        hooks.insert(0, CostReport(runners, sides(config.tied)))
    try:
        for hook in hooks:
            hook.on_train_begin(run)
        for epoch in range(start + 1, config.epochs + 1):
            wall, cpu = time.perf_counter(), time.process_time()
            record = _epoch(run, runners, hooks, epoch)
            # summed over threads: at most the epoch's
            compiling = min(record.get("compile_seconds", 0.0), time.perf_counter() - wall)
            phase_times.add("compile", compiling)
            phase_times.add(
                "epochs", time.perf_counter() - wall - compiling, time.process_time() - cpu
            )
            run.history.append(record)
            if epoch == start + 1:
                # after an epoch, before its line: an error before stays a failed run's only line
                log.info("%s", plan.describe())
            for hook in hooks:
                hook.on_epoch_end(run, epoch, record)
    finally:
        for hook in hooks:
            hook.on_train_end(run)
        mgr.close()
    # a failed run's error stays its only line
    log.info("%s", phase_times.summary())
    model = (
        run.model(config.epochs)
        if with_tables
        else Model(None, None, config, config.epochs, list(run.history), plan=plan)
    )
    model.epochs_trained = config.epochs - start
    return model


def _runners(
    config: TrainConfig, plan: ExecutionPlan, dataset: Dataset, mesh
) -> dict[str, SideRunner]:
    """Both sides' runners (`sides`), each side's rows, as its planning pass counted them, checked
    against stats.json."""
    size = {"row": dataset.num_rows, "col": dataset.num_cols}
    runners = {}
    # one fixed-table replica at a time, in memory kept between them
    replica = ReplicaBuffer()
    for side in sides(config.tied):
        n_this, n_other = (
            (size["row"], size["col"]) if side.name == "row" else (size["col"], size["row"])
        )
        reader = split_reader(
            dataset,
            side.split,
            config.chunk_rows,
            n_this,
            n_other,
            jax.process_index(),
            jax.process_count(),
        )
        # The observed loss is reported from the last half-epoch (the column side) only.
        spec = plan.step_spec(config, n_other, observed_loss=side.name == "col")
        runner = plan_side(config, plan, mesh, spec, reader, n_this, replica, side.name)
        # the planning pass read every row once
        how = "counted by the pass that plans the batches"
        check_rows(config.data, side.split, runner.plan.rows, dataset.splits, how)
        runners[side.name] = runner
    return runners


def _epoch(run: Run, runners: dict[str, SideRunner], hooks: Sequence[Callback], epoch: int) -> dict:
    """One epoch (row then column half-epoch) on `run.tables`; its metrics record.

    `run.tables` keeps the gramian of each table's current value (`Tables`): a solved table's
    gramian serves its finiteness check, then the other side's half-epoch (its fixed table) or the
    epoch's unobserved loss and the next epoch's row side: two gramians an epoch instead of four.
    """
    config, tables = run.config, run.tables
    t0, compiled0 = time.perf_counter(), compile_cache.counts()
    record: dict = {"epoch": epoch}

    def progress(steps: int, rows: int) -> None:
        for hook in hooks:
            hook.on_steps(steps, rows)

    def gramian(name: str) -> jax.Array:
        return tables.gramian(name, runners["row"].gramian)

    if one_call_epoch(runners["row"], runners["col"]):
        g_row, g_col = _one_call_epoch(run, runners, hooks, epoch, record, progress)
        return _closed(record, config, g_row, g_col, t0, compiled0)
    for side in sides(config.tied):
        ts = time.perf_counter()
        runner = runners[side.name]
        for hook in hooks:
            hook.on_half_epoch_begin(run, epoch, side.name, runner.total_steps)
        src_gram = gramian(side.other)
        src = jnp.copy(tables[side.other]) if config.tied else tables[side.other]
        # the observed loss comes from the last half-epoch
        observed = side.name == "col" and _observed_loss(config, epoch)
        result = runner.run(src, tables[side.table], progress, src_gram, observed)
        # (the one-call half-epoch computed the gramian of its result)
        tables.solved(side.table, result.table, result.gramian)
        for hook in hooks:
            hook.on_half_epoch_end(run, epoch, side.name)
        _check_finite(gramian(side.table), epoch, side.name)
        record[f"{side.name}_seconds"] = time.perf_counter() - ts
        _record_terms(record, side.name, result.terms, observed)
    g_row = np.asarray(gramian("row"))
    return _closed(
        record, config, g_row, g_row if config.tied else np.asarray(gramian("col")), t0, compiled0
    )


def _one_call_epoch(
    run: Run,
    runners: dict[str, SideRunner],
    hooks: Sequence[Callback],
    epoch: int,
    record: dict,
    progress,
) -> tuple[np.ndarray, np.ndarray]:
    """`_epoch` as one compiled call (`side_runner.run_epoch`): nothing copies to the host until
    the call is done, then its loss terms and gramians come back in one transfer. The half-epoch
    hooks run in order around the call (the tables are written once, before the row side's
    end); its whole time is `row_seconds` (`col_seconds` 0). Returns the gramians (host) of the
    final row and column tables."""
    config, tables = run.config, run.tables
    row, col = runners["row"], runners["col"]
    ts = time.perf_counter()
    for hook in hooks:
        hook.on_half_epoch_begin(run, epoch, "row", row.total_steps)
    names = ("row",) if config.tied else ("row", "col")
    observed = _observed_loss(config, epoch)
    # the gramian of the table the row side reads, kept from the last epoch (computed once at the
    # start): the epoch then computes only those of the two tables it solves
    other_gram = tables.gramian(names[-1], row.gramian)
    result = run_epoch(row, col, tuple(tables[n] for n in names), other_gram, observed)
    row.report_one_call(progress)
    final_grams = result.gramians[-1:] if config.tied else result.gramians
    for name, table, gram in zip(names, result.tables, final_grams):
        tables.solved(name, table, gram)
    for hook in hooks:
        hook.on_half_epoch_end(run, epoch, "row")
    for hook in hooks:
        hook.on_half_epoch_begin(run, epoch, "col", col.total_steps)
    col.report_one_call(progress)
    for hook in hooks:
        hook.on_half_epoch_end(run, epoch, "col")
    # the epoch's one device-to-host copy
    terms, g_row, g_col = jax.device_get((result.terms, *result.gramians))
    record["row_seconds"], record["col_seconds"] = time.perf_counter() - ts, 0.0
    for k, (name, gram) in enumerate((("row", g_row), ("col", g_col))):
        _check_finite(gram, epoch, name)
        sums = LossTerms.of(np.asarray(terms[k], np.float64))
        _record_terms(record, name, sums, name == "col" and observed)
    return (g_col, g_col) if config.tied else (g_row, g_col)


def _observed_loss(config: TrainConfig, epoch: int) -> bool:
    """Whether epoch `epoch` reports the observed loss (its column half-epoch computes it)."""
    return config.train_loss_every > 0 and epoch % config.train_loss_every == 0


def _record_terms(record: dict, side: str, terms: LossTerms, observed: bool) -> None:
    """A half-epoch's loss terms in the epoch's record: `side`'s regularization and rows solved,
    and its observed loss when `observed` (the column side of an epoch that reports it)."""
    if observed:
        record["loss_observed"] = terms.observed
    record[f"loss_reg_{side}"] = terms.reg
    record[f"{side}s_solved"] = terms.rows


def _closed(
    record: dict, config: TrainConfig, g_row: np.ndarray, g_col: np.ndarray, t0: float, compiled0
) -> dict:
    """An epoch's record completed from the final tables' gramians (host arrays): the unobserved
    and total loss, seconds and compilations."""
    g_row, g_col = np.asarray(g_row, np.float64), np.asarray(g_col, np.float64)
    record["loss_unobserved"] = float(config.alpha * np.sum(g_row * g_col))
    if "loss_observed" in record:
        record["loss"] = (
            record["loss_observed"]
            + record["loss_unobserved"]
            + sum(record.get(f"loss_reg_{s}", 0.0) for s in ("row", "col"))
        )
    record["seconds"] = time.perf_counter() - t0
    compiled = compile_cache.counts().since(compiled0)
    record["compile_seconds"], record["compiles"] = compiled.seconds, compiled.compiled
    return record


def _check_finite(gram: jax.Array, epoch: int, side: str) -> None:
    """Raise `TrainingCollapse` when the solved table has a NaN/Inf: its gramian's diagonal (the
    sums of squares of its columns, replicated to every process) is then not finite either."""
    if not np.isfinite(np.diagonal(np.asarray(gram))).all():
        raise TrainingCollapse(
            f"epoch {epoch}, {side} half-epoch: the {side} table has NaN/Inf values (numerical "
            "collapse); raise --reg or use --table_dtype float32"
        )


def epoch_cost(config: TrainConfig, dataset: Dataset, mesh=None) -> dict:
    """XLA's cost analysis of one epoch of training `config` on `dataset` (`ops.cost.epoch_cost`:
    bytes accessed, FLOPs and compiled calls per epoch and device, and every program): both sides
    planned as `train` plans them (one pass over the data); nothing is trained."""
    mesh = mesh if mesh is not None else make_mesh()
    plan = _plan(config, dataset, mesh)
    tables = init_tables(
        config, dataset.num_rows, dataset.num_cols, mesh, execution.table_dtype(plan)
    )
    runners = _runners(config, plan, dataset, mesh)
    return cost.epoch_cost(runners, sides(config.tied), tables)
