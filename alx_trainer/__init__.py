"""ALX: sharded implicit alternating least squares in JAX.

The public API, the names a user calls (each imported on first use, so that `import alx_trainer`
and `python -m alx_trainer --help` stay cheap):

    import alx_trainer as alx
    config = alx.TrainConfig(data="/tmp/hollins", model_dir="/tmp/model", dim=64, epochs=8)
    alx.train(config)  # or alx.train(config, dataset=alx.in_memory(name, indptr, cols, n))
    model = alx.load_model("/tmp/model")
    metrics = alx.evaluate(model, "/tmp/hollins")  # Recall@K / NDCG on the test split
    rows = alx.fold_in(model.col_table, [[3, 17], [5]], model.config)  # new rows' embeddings
    best = alx.top_k(model.col_table, 10, [[3, 17], [5]], config=model.config)  # .ids, .scores

Layout: `config` (TrainConfig) -> `execution` (the execution plan decided once: devices, mesh,
layout, CPU threads) -> `data/` (a dataset opened, checked and read; dense batches planned and
packed) -> `ops/` (step kernels, solvers, half-epoch runner) -> `model` (tables, fold-in, load)
-> `train` (epoch loop) with `callbacks` (evaluation, metrics, checkpoints, progress) and
`checkpoint` (the model directory's lock and checkpoints); `loading` (a model and its dataset),
`evaluation/` (two top-K engines behind one interface, `ranking.top_k`), `tools/` (sweep,
predict, export), `cli/` (`python -m alx_trainer`: `commands`, and `common` with every command's
flags); `jax_compat` the one importer of JAX's private modules.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

__version__ = "0.1.0"

# public name -> (module, attribute) it is imported from on first use
_PUBLIC: dict[str, tuple[str, str]] = {
    "train": ("alx_trainer.train", "train"),
    "TrainConfig": ("alx_trainer.config", "TrainConfig"),
    "load_model": ("alx_trainer.model", "load_model"),
    "fold_in": ("alx_trainer.model", "fold_in"),
    "in_memory": ("alx_trainer.data.dataset", "in_memory"),
    "top_k": ("alx_trainer.evaluation.ranking", "top_k"),
    "evaluate": ("alx_trainer.evaluation.evaluate", "evaluate_dataset"),
}
__all__ = list(_PUBLIC)


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use (PEP 562) and kept."""
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = _PUBLIC[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """This package's module type: the public function `train` keeps its name when the submodule
    `alx_trainer.train` is imported (the import system would bind the submodule to the package's
    attribute `train`; the submodule stays importable by its full name)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _PUBLIC and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
