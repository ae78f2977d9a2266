"""`alx_trainer`'s public API: each name in `__all__` is the documented object of its module,
imported on first use (a bare `import alx_trainer` imports no JAX), and usable end to end."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import numpy as np

import alx_trainer

from conftest import REPO

# the modules each public name comes from, written out here (not read from the package)
HOMES = {
    "train": ("alx_trainer.train", "train"),
    "TrainConfig": ("alx_trainer.config", "TrainConfig"),
    "load_model": ("alx_trainer.model", "load_model"),
    "fold_in": ("alx_trainer.model", "fold_in"),
    "in_memory": ("alx_trainer.data.dataset", "in_memory"),
    "top_k": ("alx_trainer.evaluation.ranking", "top_k"),
    "evaluate": ("alx_trainer.evaluation.evaluate", "evaluate_dataset"),
}
HEAVY = ("jax", "jaxlib", "numpy", "orbax", "tensorflow", "matplotlib")


def _fresh(code: str) -> str:
    """stdout of `python -c code` in a new process (nothing imported yet)."""
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    return run.stdout


def test_every_public_name_resolves_to_its_documented_object():
    assert sorted(alx_trainer.__all__) == sorted(HOMES)
    for name, (module, attribute) in HOMES.items():
        value = getattr(alx_trainer, name)
        assert value is getattr(importlib.import_module(module), attribute), name
        assert (value.__doc__ or "").strip(), f"{name} has no docstring"
        assert name in dir(alx_trainer)


def test_train_stays_the_function_once_its_module_is_imported():
    # importing the submodule `alx_trainer.train` binds it to the package by default
    train_module = importlib.import_module("alx_trainer.train")
    assert alx_trainer.train is train_module.train
    from alx_trainer import train

    assert train is train_module.train and callable(train)


def test_an_unknown_name_is_an_attribute_error():
    try:
        alx_trainer.no_such_name  # noqa: B018 - the lookup is the test
    except AttributeError as e:
        assert "no_such_name" in str(e)
    else:
        raise AssertionError("alx_trainer.no_such_name resolved")


def test_importing_the_package_imports_no_jax():
    code = (
        "import json, sys, alx_trainer\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})))"
    )
    assert json.loads(_fresh(code)) == []
    code = (
        "import json, sys, alx_trainer\n"
        "alx_trainer.TrainConfig\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})))"
    )
    assert json.loads(_fresh(code)) == []


def test_the_public_api_trains_loads_folds_in_and_ranks(tmp_path):
    """The package docstring's walk on a small random matrix; the top K agree with a NumPy ranking
    of the folded-in rows."""
    rng = np.random.default_rng(0)
    num_rows, num_cols = 40, 30
    lists = [
        np.sort(rng.choice(num_cols, size=rng.integers(2, 8), replace=False)) for _ in range(40)
    ]
    indptr = np.concatenate([[0], np.cumsum([len(r) for r in lists])])
    cols = np.concatenate(lists)
    config = alx_trainer.TrainConfig(
        data="random", model_dir=str(tmp_path / "m"), dim=4, epochs=2, progress=False, eval_every=0
    )
    trained = alx_trainer.train(
        config, dataset=alx_trainer.in_memory("random", indptr, cols, num_cols)
    )
    model = alx_trainer.load_model(config.model_dir)
    assert model.epoch == trained.epoch == 2
    np.testing.assert_allclose(model.col_table, trained.col_table)
    assert model.row_table.shape == (num_rows, 4)

    known = [np.array([3, 17]), np.array([5]), np.array([0, 1, 2])]
    queries = alx_trainer.fold_in(model.col_table, known, model.config)
    assert queries.shape == (3, 4)
    best = alx_trainer.top_k(model.col_table, 5, known, config=model.config)
    scores = queries @ model.col_table.T
    for i, row in enumerate(known):
        scores[i, row] = -np.inf
        expected = np.argsort(-scores[i], kind="stable")[:5]
        np.testing.assert_array_equal(best.ids[i], expected)
        np.testing.assert_allclose(best.scores[i], scores[i, expected], rtol=1e-4, atol=1e-5)
