"""implicit at the parameters `benchmarks.core.implicit_als` maps ours to (nu = 0) trains our
objective.

The mapping (that module's docstring): implicit with confidence 1 + 1/alpha and L2 weight
lambda (1 + alpha) / alpha is our iALS at (alpha, lambda) with every embedding scaled by
sqrt(1 + alpha). Checked against the independent float64 NumPy iALS (`reference_ials.py`), exact
solves on both sides, several epochs from the same (scaled) start.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from implicit.cpu.als import AlternatingLeastSquares

from benchmarks.core.implicit_als import implicit_params

import reference_ials as ref

NUM_USERS, NUM_ITEMS, DIM = 40, 30, 6


@pytest.mark.parametrize("alpha,lam", [(0.01, 1.5), (0.3, 0.2)])
def test_implicit_at_the_mapped_point_trains_our_objective(alpha, lam):
    rows = ref.random_rows(3, NUM_USERS, NUM_ITEMS, max_len=10)
    for item in set(range(NUM_ITEMS)) - {c for cols in rows.values() for c in cols}:
        # every item observed: implicit solves every row, the reference too
        rows[0] = sorted(rows[0] + [item])
    rng = np.random.default_rng(4)
    w0, h0 = rng.normal(0, 0.3, (NUM_USERS, DIM)), rng.normal(0, 0.3, (NUM_ITEMS, DIM))
    want_w, want_h = ref.ials(rows, w0, h0, epochs=3, alpha=alpha, reg=lam)

    mean_row = np.mean([len(c) for c in rows.values()])
    confidence, reg = implicit_params(alpha, lam, 0.0, mean_row, NUM_ITEMS)
    pairs = [(r, c) for r, cols in rows.items() for c in cols]
    user_items = sp.csr_matrix(
        (np.ones(len(pairs), np.float32), tuple(np.array(pairs).T)), (NUM_USERS, NUM_ITEMS)
    )
    scale = np.sqrt(1 + alpha)
    model = AlternatingLeastSquares(
        factors=DIM,
        regularization=reg,
        alpha=confidence,
        iterations=3,
        use_cg=False,
        num_threads=1,
        random_state=0,
    )
    model.user_factors = (scale * w0).astype(np.float32)
    model.item_factors = (scale * h0).astype(np.float32)
    model.fit(user_items, show_progress=False)

    for got, want in ((model.user_factors, want_w), (model.item_factors, want_h)):
        got = np.asarray(got, np.float64) / scale
        assert np.linalg.norm(got - want) <= 1e-4 * np.linalg.norm(want)


def test_mapping_at_nu_above_zero_is_ours_at_the_mean_row():
    """nu > 0: one L2 weight, ours lambda (n + alpha N)^nu at the mean row n, in implicit's
    units."""
    confidence, reg = implicit_params(0.01, 0.004, 1.0, 27.0, 40000)
    assert confidence == pytest.approx(101.0)
    assert reg == pytest.approx(0.004 * (27.0 + 400.0) * 1.01 / 0.01)
