"""The column layout of the exact top-K searches (`evaluation.norm_order`)."""

import numpy as np
import pytest

from alx_trainer.evaluation import norm_order


@pytest.mark.parametrize("parts,cols", [(1, 64), (3, 50), (8, 1024)])
def test_shares_hold_every_column_once_under_bounds_that_never_rise(parts, cols):
    rng = np.random.default_rng(parts)
    table_norms = rng.pareto(1.5, 5000)
    table_norms[rng.choice(5000, 300, replace=False)] = 0.0  # zero norms: last
    table_norms[:40] = table_norms[40]  # ties
    shares = norm_order.deal(table_norms, parts, cols)
    ids = np.concatenate([s.ids for s in shares])
    np.testing.assert_array_equal(np.sort(ids[ids >= 0]), np.arange(5000))
    for share in shares:
        blocks = share.ids.reshape(-1, cols)
        assert len(blocks) == len(share.block_norms)
        assert np.all(np.diff(share.block_norms) <= 0)
        for j, block in enumerate(blocks):
            real = block[block >= 0]
            assert np.all(np.diff(real) > 0)  # ascending ids inside a block
            later = np.concatenate([b[b >= 0] for b in blocks[j:]])
            assert np.all(table_norms[later] <= share.block_norms[j])  # float32, rounded up
    part, where = norm_order.positions(shares, 5000)
    for i in rng.choice(5000, 50):
        assert shares[part[i]].ids[where[i]] == i
    assert part[-1] == -1  # where a padding id (-1) looks
    # the first block of one share holds the largest norms (the quantized order is close)
    first = norm_order.deal(table_norms, 1, 500)[0].ids[:500]
    assert np.sort(table_norms[first]).min() >= np.sort(table_norms)[-500] * (1 - 1e-3)


def test_norms_and_gather_rows():
    rng = np.random.default_rng(0)
    table = rng.normal(size=(3000, 5)).astype(np.float32)
    np.testing.assert_allclose(
        norm_order.norms(table), np.linalg.norm(table.astype(np.float64), axis=1), rtol=1e-12
    )
    ids = np.array([5, -1, 2999, 0, -1])
    got = norm_order.gather_rows(table, ids)
    np.testing.assert_array_equal(got, np.where(ids[:, None] >= 0, table[np.maximum(ids, 0)], 0))
