"""Training configuration: the `TrainConfig` dataclass, its sections and their checks.

Each field carries a `help` in its metadata; `alx_trainer.cli.common` turns the class
into a command line (one `--field` flag per field, plus `--config FILE`). The sections data,
model, solver, evaluation and run hold the objective and what a user sets; `ExecutionConfig`
(the advanced section) holds the knobs of how a run executes, which `alx_trainer.execution`
resolves into the run's `ExecutionPlan` (their defaults, 'auto' and 0, let it decide).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar, TypeVar

T = TypeVar("T")

SOLVERS = ("cg", "cholesky", "lu", "qr", "block")
# Solvers whose CPU programs call LAPACK's batched potrf: jaxlib 0.10 splits the batch over XLA's
# intra-op pool and blocks on it, so per-core devices calling it at once wait on each other
# forever.
POTRF_SOLVERS = ("cholesky", "block")
STATS_MODES = ("gather", "local")
CG_FORMS = ("auto", "matvec", "explicit")
# The Pallas CG kernel ('pallas') was removed: 2.9x slower than 'xla' on an H200 at 25M pairs
# (0.280 against 0.097 s/epoch) and slower at Gowalla d=64 (docs/figures.md).
CG_KERNELS = ("xla",)
TABLE_DTYPES = ("auto", "bfloat16", "float32")
LAYOUTS = ("auto", "sharded", "replicated", "owner")
LOG_LEVELS = ("debug", "info", "warning", "error")
# `piece_len` 0: the candidates, in order (see `data.batching.choose_piece_len`)
PIECE_LENS = (16, 8)
# `batch_pieces` 0: ids per device batch (the per-core CPU path)
BATCH_IDS = 4096
# `batch_pieces` 0 on the accelerator path: this many ids a batch, and off CPU for the forms
# without d x d statistics per row ('matvec' CG, 'block') ACCELERATOR_BATCH_BYTES of gathered
# float32 rows; either cut to even batches of the data (`data.batching.make_plan`)
ACCELERATOR_BATCH_IDS = 1 << 16
ACCELERATOR_BATCH_BYTES = 1 << 29
SWITCHES = ("auto", "on", "off")
MATMUL_PRECISIONS = ("auto", "float32", "tf32", "bfloat16")


class ConfigError(ValueError):
    """A bad configuration value (a usage error: the command line exits with status 2)."""


def _field(default: Any, help: str) -> Any:  # noqa: A002 - mirrors argparse's name
    return dataclasses.field(default=default, metadata={"help": help})


@dataclasses.dataclass
class DataConfig:
    """Where the training data is and how it is read."""

    data: str = _field(
        "", "Dataset directory in the WebGraph contract, or a TFDS name such as web_graph/de-dense."
    )
    tfds_data_dir: str = _field(
        "", "TFDS data_dir used when --data is a TFDS name (empty: the TFDS default)."
    )
    chunk_rows: int = _field(2048, "Records parsed per tf.data batch when streaming the input.")
    validation: bool = _field(
        False,
        "Tuning: train on the validation_train split and evaluate on the validation split (a "
        "dataset made "
        "with the pipeline's --validation_fraction); the test split is not read.",
    )


@dataclasses.dataclass
class ModelConfig:
    """The objective (paper Eq. 3) and the tables."""

    dim: int = _field(64, "Embedding dimension d.")
    alpha: float = _field(0.1, "Weight of the unobserved pairs (paper Eq. 3, alpha).")
    reg: float = _field(0.1, "L2 regularization lambda (paper Eq. 3).")
    reg_exponent: float = _field(
        0.0,
        "Frequency-scaled regularization: a row with n observations gets "
        "reg * (n + alpha * num_columns) ** reg_exponent; 0 gives plain reg (as does a row "
        "with no observation at alpha 0: it is solved to 0).",
    )
    init_stddev: float = _field(
        0.0,
        "Standard deviation of the normal initial embeddings; 0 (the default) is 0.1/sqrt(dim), "
        "the iALS papers' "
        "start (rows of norm about 0.1 at any dim; a fixed 0.1 gives norm 3.2 at dim 1024, which a "
        "few CG steps "
        "per epoch do not wash out).",
    )
    seed: int = _field(0, "Random seed of the initial tables.")
    tied: bool = _field(
        False, "One shared table for rows and columns (square data only, e.g. a web graph)."
    )


@dataclasses.dataclass
class SolverConfig:
    """How each row's system is solved."""

    solver: str = _field(
        "cg",
        f"Linear solver per row, one of {SOLVERS}; 'block' is iALS++ (one sweep of exact solves "
        "over "
        "blocks of --block_size coordinates per half-epoch; block_size >= dim is the exact solve).",
    )
    block_size: int = _field(
        32,
        "Coordinates per block of the 'block' solver (iALS++), capped at dim; 32 was the fastest "
        "on CPU at d=1024.",
    )
    cg_iters: int = _field(
        3, "Conjugate-gradient iterations per half-epoch, warm-started from the current row."
    )


@dataclasses.dataclass
class ExecutionConfig:
    """Advanced: how a run executes (devices, layout, batches, solve form). The defaults let
    `alx_trainer.execution` decide per backend; the run's decisions are its `ExecutionPlan`,
    logged in one line and saved as plan.json in the model directory."""

    table_dtype: str = _field(
        "auto",
        "Embedding table dtype: bfloat16, float32, or auto (bfloat16 on GPU/TPU, float32 on CPU). "
        "Solves are float32.",
    )
    cg_form: str = _field(
        "auto",
        "How CG applies the normal matrix: 'matvec' (O(|S| d) per iteration, never builds it), "
        "'explicit' (builds the d x d matrices, O(|S| d^2), suits matrix units); "
        "'auto' = the form measured fastest on the backend: matvec on CPU and GPU at every "
        "measured d "
        "(DESIGN.md, trainer section).",
    )
    cg_kernel: str = _field(
        "xla",
        "What runs the matrix-free CG of a batch: 'xla' (XLA's fusions), the only one; the "
        "Pallas kernel ('pallas') was removed, 2.9x slower on an H200 at 25M pairs.",
    )
    stats: str = _field(
        "gather",
        "'gather': sharded gather of embeddings (paper 4.2); 'local': per-shard partial "
        "statistics, "
        "then a reduce-scatter (the paper's alternative). Both give the same tables.",
    )
    layout: str = _field(
        "auto",
        "How steps reach the tables: 'sharded' (paper 4.2: sharded gather and scatter every step); "
        "'replicated' (the fixed table copied whole to every device once per half-epoch, so it "
        "must fit one); "
        "'owner' (replicated, and each device solves only the rows of its own shard: no collective "
        "per step; "
        "one process, packed batches held in memory); 'auto' = owner for a one-process CPU run, "
        "else sharded.",
    )
    steps_per_call: int = _field(
        8,
        "Dense batches each device runs per compiled call (a lax.scan) on the per-core CPU path: "
        "fewer dispatches.",
    )
    accelerator: str = _field(
        "auto",
        "The accelerator path: batches of 65536 ids (on a GPU or TPU up to 512 MiB of gathered "
        "float32 rows for the matrix-free forms; cut to the data; unless --batch_pieces), the "
        "packed batches of both sides kept on the devices when they fit (--resident_batches), a "
        "half-epoch's normal rows in at most --calls_per_half_epoch compiled calls, long rows "
        "solved on the devices, gramian and replica by collectives. 'auto' = on for GPU/TPU, off "
        "on CPU (the per-core layout) except for a small problem (at most 200,000 links: one CPU "
        "device, one program an epoch); 'on' forces it on CPU devices (tests, `python -m "
        "benchmarks.profile --sections proxies`). Layouts 'sharded' or 'replicated' ('auto': "
        "sharded).",
    )
    resident_batches: str = _field(
        "auto",
        "Accelerator path: 'on' keeps both sides' packed batches in device memory after planning "
        "(later epochs "
        "copy no input), 'off' copies them each half-epoch double-buffered ahead of the steps, "
        "'auto' keeps them "
        "when they take at most half the device's free memory (device.memory_stats(); host memory "
        "on CPU).",
    )
    calls_per_half_epoch: int = _field(
        8,
        "Accelerator path: compiled calls over a half-epoch's normal rows (each a lax.scan over "
        "its batches).",
    )
    matmul_precision: str = _field(
        "auto",
        "Explicit normal matrices (cg_form 'explicit', exact solvers): precision of the h h^T "
        "products, summed "
        "in float32: 'float32', 'tf32' (float32 inputs on matrix units), 'bfloat16' (inputs "
        "rounded to "
        "bfloat16); 'auto' = float32 on CPU, tf32 on GPU/TPU. The solve (CG, Cholesky) stays "
        "float32.",
    )
    piece_len: int = _field(
        0,
        "Dense batching: length L of one piece of a row (paper 4.3); 0: per side, 16, or 8 where "
        "16 would pad "
        "that side's ids to more than 1.2x.",
    )
    batch_pieces: int = _field(
        0,
        "Dense batching: pieces B per device per step (0: 4096 ids, 4096 / piece_len; at least "
        "256).",
    )
    batch_rows: int = _field(
        0,
        "Dense batching: row slots per device per step (0: auto, 1.25 x batch_pieces / mean pieces "
        "per row).",
    )
    cache_batches: bool = _field(
        False,
        "Keep the packed batches of this host in memory after the first epoch instead of "
        "re-reading the files.",
    )
    stream_batches: bool = _field(
        False,
        "'owner' layout: build the dense batches from the TFRecords every half-epoch (bounded host "
        "memory) "
        "instead of holding them all in memory; for matrices whose packed batches do not fit.",
    )
    cpu_devices: int = _field(
        0,
        "CPU runs of the command line: split the host into this many JAX devices, each running its "
        "own steps "
        "(0: one per core). Ignored on GPU/TPU and when XLA_FLAGS sets "
        "--xla_force_host_platform_device_count.",
    )


@dataclasses.dataclass
class EvaluationConfig:
    """Evaluation during training."""

    eval_every: int = _field(
        1, "Evaluate on the test split every this many epochs when it exists (0: never)."
    )
    train_loss_every: int = _field(
        1,
        "Compute the observed training loss (sum over the training pairs of (1 - w.h)^2: one more "
        "pass over the "
        "column side's pairs) every this many epochs (0: never); other epochs record no "
        "loss_observed and no loss.",
    )
    eval_k: str = _field(
        "20,50", "Comma-separated cut-offs K of Recall@K for the per-epoch evaluation."
    )
    ndcg_k: int = _field(
        100, "Cut-off of the per-epoch NDCG (0: none; none when there are fewer columns)."
    )
    eval_rows: int = _field(
        0,
        "Per-epoch evaluation on the first N rows of the split only (0: all). Row ids are ranked "
        "by a hash of "
        "the name, so this is a fixed random sample (cheaper tuning; the sweep's final test run "
        "uses all rows).",
    )


@dataclasses.dataclass
class RunConfig:
    """Where the run writes, how long it runs, and its processes."""

    model_dir: str = _field(
        "", "Directory for checkpoints, metrics.jsonl, TensorBoard logs and config.json."
    )
    epochs: int = _field(
        8, "Number of epochs (one epoch = a row half-epoch and a column half-epoch)."
    )
    checkpoint_every: int = _field(
        1, "Save an orbax checkpoint every this many epochs (0: only at the end)."
    )
    keep_checkpoints: int = _field(3, "How many most recent checkpoints to keep.")
    progress: bool = _field(
        True,
        "A progress bar per half-epoch with rows per second, on a terminal (logs get epoch lines).",
    )
    log_level: str = _field(
        "info",
        "Diagnostics (per-epoch metrics, sweep progress) on stderr from this level, one of "
        f"{LOG_LEVELS}.",
    )
    compile_cache: str = _field(
        "auto",
        "JAX's persistent compilation cache: 'auto' (this user's $XDG_CACHE_HOME/alx/jax, default "
        "~/.cache/alx/jax), a directory, or 'off'; a later run on the same shapes then compiles "
        "nothing. JAX "
        "runs what it finds there, so a directory other users can write is refused.",
    )
    distributed: bool = _field(
        False,
        "Call jax.distributed.initialize() first (multi-host, e.g. every worker of a TPU VM "
        "slice).",
    )
    coordinator_address: str = _field(
        "", "host:port of process 0 for jax.distributed (empty: auto-detect, e.g. on TPU)."
    )
    num_processes: int = _field(0, "Number of processes for jax.distributed (0: auto-detect).")
    process_id: int = _field(-1, "This process's id for jax.distributed (-1: auto-detect).")
    distributed_timeout: int = _field(
        120,
        "Seconds jax.distributed waits for every process to join (a missing process, a wrong "
        "--process_id or --coordinator_address then ends the run with one line).",
    )


SECTIONS: dict[str, type] = {
    "data": DataConfig,
    "model": ModelConfig,
    "solver": SolverConfig,
    "evaluation": EvaluationConfig,
    "run": RunConfig,
    "execution": ExecutionConfig,
}


@dataclasses.dataclass
class TrainConfig(
    ExecutionConfig, RunConfig, EvaluationConfig, SolverConfig, ModelConfig, DataConfig
):
    """Every knob of `python -m alx_trainer train`; each field is also a flag of the same name.

    The fields come from the six sections (`SECTIONS`: data, model, solver, evaluation, run, and
    the advanced execution), and read flat (`config.dim`) as the flags and config files name
    them; `section(name)` gives one section as its own dataclass and `to_dict(nested=True)`
    groups them.
    """

    sections: ClassVar[dict[str, type]] = SECTIONS

    def validate(self) -> "TrainConfig":
        """Raise ConfigError with a one-line message naming the first bad field; return self."""
        checks = [
            (bool(self.data), "data: required (a dataset directory or a TFDS name)"),
            (bool(self.model_dir), "model_dir: required"),
            (self.dim > 0, f"dim: must be positive, got {self.dim}"),
            (
                self.process_id < 0
                or self.num_processes <= 0
                or self.process_id < self.num_processes,
                f"process_id: must be below num_processes ({self.num_processes}), got "
                f"{self.process_id} (ids are 0 to num_processes - 1)",
            ),
            (
                self.distributed_timeout > 0,
                f"distributed_timeout: must be positive, got {self.distributed_timeout}",
            ),
            (self.epochs >= 0, f"epochs: must be >= 0, got {self.epochs}"),
            (
                math.isfinite(self.alpha) and self.alpha >= 0,
                f"alpha: must be a finite number >= 0, got {self.alpha}",
            ),
            (
                math.isfinite(self.reg) and self.reg >= 0,
                f"reg: must be a finite number >= 0, got {self.reg}",
            ),
            (
                math.isfinite(self.reg_exponent),
                f"reg_exponent: must be a finite number, got {self.reg_exponent}",
            ),
            (
                math.isfinite(self.init_stddev) and self.init_stddev >= 0,
                "init_stddev: must be a finite number >= 0 (0: 0.1/sqrt(dim)), got "
                f"{self.init_stddev}",
            ),
            (self.solver in SOLVERS, f"solver: must be one of {SOLVERS}, got {self.solver!r}"),
            (self.cg_iters > 0, f"cg_iters: must be positive, got {self.cg_iters}"),
            (self.block_size > 0, f"block_size: must be positive, got {self.block_size}"),
            (self.cg_form in CG_FORMS, f"cg_form: must be one of {CG_FORMS}, got {self.cg_form!r}"),
            (
                self.cg_kernel in CG_KERNELS,
                "cg_kernel: 'pallas' was removed (2.9x slower than 'xla' on an H200 at 25M pairs); "
                "use 'xla', the default"
                if self.cg_kernel == "pallas"
                else f"cg_kernel: must be one of {CG_KERNELS}, got {self.cg_kernel!r}",
            ),
            (self.stats in STATS_MODES, f"stats: must be one of {STATS_MODES}, got {self.stats!r}"),
            (self.layout in LAYOUTS, f"layout: must be one of {LAYOUTS}, got {self.layout!r}"),
            (
                self.stats == "gather" or self.layout in ("auto", "sharded"),
                "stats: 'local' needs layout 'sharded' (the fixed table stays sharded), got "
                f"layout {self.layout!r}",
            ),
            (
                self.steps_per_call > 0,
                f"steps_per_call: must be positive, got {self.steps_per_call}",
            ),
            (
                self.accelerator in SWITCHES,
                f"accelerator: must be one of {SWITCHES}, got {self.accelerator!r}",
            ),
            (
                self.resident_batches in SWITCHES,
                f"resident_batches: must be one of {SWITCHES}, got {self.resident_batches!r}",
            ),
            (
                self.calls_per_half_epoch > 0,
                f"calls_per_half_epoch: must be positive, got {self.calls_per_half_epoch}",
            ),
            (
                self.matmul_precision in MATMUL_PRECISIONS,
                f"matmul_precision: must be one of {MATMUL_PRECISIONS}, got "
                f"{self.matmul_precision!r}",
            ),
            (
                self.accelerator != "on" or self.layout != "owner",
                "accelerator: 'on' takes layout 'sharded' or 'replicated' ('owner' is the per-core "
                "CPU layout)",
            ),
            (self.cpu_devices >= 0, f"cpu_devices: must be >= 0, got {self.cpu_devices}"),
            (
                self.cpu_devices <= 1 or self.solver not in POTRF_SOLVERS,
                f"cpu_devices: solver {self.solver!r} calls LAPACK potrf, which deadlocks when "
                "several CPU devices "
                f"run it at once (jaxlib 0.10); use --cpu_devices 1, got {self.cpu_devices}",
            ),
            (
                self.table_dtype in TABLE_DTYPES,
                f"table_dtype: must be one of {TABLE_DTYPES}, got {self.table_dtype!r}",
            ),
            (self.piece_len >= 0, f"piece_len: must be >= 0 (0: auto), got {self.piece_len}"),
            (
                self.batch_pieces >= 0,
                f"batch_pieces: must be >= 0 (0: auto), got {self.batch_pieces}",
            ),
            (
                0 <= self.batch_rows <= (self.batch_pieces or BATCH_IDS // max(PIECE_LENS)),
                f"batch_rows: must be in [0, batch_pieces], got {self.batch_rows}",
            ),
            (self.chunk_rows > 0, f"chunk_rows: must be positive, got {self.chunk_rows}"),
            (
                self.checkpoint_every >= 0,
                f"checkpoint_every: must be >= 0, got {self.checkpoint_every}",
            ),
            (
                self.keep_checkpoints > 0,
                f"keep_checkpoints: must be positive, got {self.keep_checkpoints}",
            ),
            (self.eval_every >= 0, f"eval_every: must be >= 0, got {self.eval_every}"),
            (
                self.train_loss_every >= 0,
                f"train_loss_every: must be >= 0, got {self.train_loss_every}",
            ),
            (self.ndcg_k >= 0, f"ndcg_k: must be >= 0, got {self.ndcg_k}"),
            (self.eval_rows >= 0, f"eval_rows: must be >= 0, got {self.eval_rows}"),
            (bool(self.compile_cache), "compile_cache: give 'auto', 'off' or a directory"),
            (
                self.log_level in LOG_LEVELS,
                f"log_level: must be one of {LOG_LEVELS}, got {self.log_level!r}",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)
        self.recall_ks()
        return self

    def start_stddev(self) -> float:
        """The standard deviation the initial tables are drawn with (`init_stddev`, or 0.1/sqrt(dim)
        for 0)."""
        return self.init_stddev or 0.1 / math.sqrt(self.dim)

    def recall_ks(self) -> list[int]:
        """The parsed `eval_k` cut-offs."""
        try:
            ks = [int(k) for k in self.eval_k.split(",") if k.strip()]
        except ValueError:
            raise ConfigError(
                f"eval_k: expected comma-separated integers, got {self.eval_k!r}"
            ) from None
        if not ks or min(ks) <= 0:
            raise ConfigError(f"eval_k: expected positive integers, got {self.eval_k!r}")
        return ks

    def section(self, name: str) -> Any:
        """One section (`data`, `model`, `solver`, `evaluation`, `run`, `execution`) as its own
        dataclass."""
        cls = SECTIONS[name]
        return cls(**{f.name: getattr(self, f.name) for f in dataclasses.fields(cls)})

    def to_dict(self, nested: bool = False) -> dict[str, Any]:
        """The fields by name, or with `nested` grouped by section (both forms load as a config
        file)."""
        if nested:
            return {name: dataclasses.asdict(self.section(name)) for name in SECTIONS}
        return dataclasses.asdict(self)
