"""Both top-K engines (`evaluation.block_loop`, `evaluation.threshold_scan`) and the `Ranker`
against a brute-force float64 NumPy ranking, ties included (the lower id first)."""

import jax
import numpy as np
import pytest

from alx_trainer.evaluation import block_loop, engine, threshold_scan, topk
from alx_trainer.evaluation.engine import BlockShape
from alx_trainer.evaluation.ranking import Ranker
from webgraph_contract.ragged import RaggedRows


def engine_of(table, devices, rows=None, cols=None, scan=None, **options):
    """The engine `make_engine` picks (`scan`: forced), in blocks of rows x cols when given."""
    default = engine.default_block_shape(devices[0].platform)
    shape = BlockShape(rows or default.rows, cols or default.cols)
    return topk.make_engine(table, devices, shape, scan=scan, **options)


def ranked(scorer, queries, exclude, k):
    return scorer.top_k(queries, RaggedRows.from_lists(exclude), k)


def brute(queries, table, exclude, k):
    """ids and scores of a stable sort of float64 scores (ties: lower id first), -1 / -inf pads."""
    scores = np.asarray(queries, np.float64) @ np.asarray(table, np.float64).T
    for i, e in enumerate(exclude):
        scores[i, np.asarray(e, np.int64)] = -np.inf
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    top = np.take_along_axis(scores, order, axis=1)
    ids = np.where(np.isfinite(top), order, -1)
    width = k - ids.shape[1]
    return np.pad(ids, ((0, 0), (0, width)), constant_values=-1), np.pad(
        top, ((0, 0), (0, width)), constant_values=-np.inf
    )


def random_exclusions(rng, n, num_cols, most):
    return [
        rng.choice(num_cols, size=int(rng.integers(0, most + 1)), replace=False) for _ in range(n)
    ]


@pytest.mark.parametrize("scan", [True, False])
@pytest.mark.parametrize("devices,cols,rows", [(1, 64, 16), (8, 32, 7), (3, 96, 50)])
def test_exact_equals_brute_force_across_blocks_and_devices(devices, cols, rows, scan):
    rng = np.random.default_rng(devices)
    table = rng.normal(size=(1003, 8)).astype(np.float32)  # not a multiple of blocks or devices
    queries = rng.normal(size=(45, 8)).astype(np.float32)
    exclude = random_exclusions(rng, len(queries), len(table), 40)
    # longer lists than K and than a block, one of every column; 7 rows a batch carry 896 ids: a
    # longer list widens every batch's
    exclude[3] = rng.choice(len(table), size=300, replace=False)
    exclude[5] = np.arange(len(table))
    scorer = engine_of(table, jax.devices()[:devices], rows=rows, cols=cols, scan=scan)
    got = ranked(scorer, queries, exclude, 150)
    want_ids, want_scores = brute(queries, table, exclude, 150)
    np.testing.assert_array_equal(got.ids, want_ids)
    np.testing.assert_allclose(got.scores, want_scores, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("scan", [True, False])
def test_ties_keep_the_lower_id_across_blocks_and_devices(scan):
    # integer scores, exact in float32: many equal scores, spread over blocks and devices
    rng = np.random.default_rng(5)
    table = rng.integers(-2, 3, size=(517, 3)).astype(np.float32)
    queries = rng.integers(-2, 3, size=(30, 3)).astype(np.float32)
    exclude = random_exclusions(rng, len(queries), len(table), 20)
    want_ids, want_scores = brute(queries, table, exclude, 60)
    for devices, cols in ((1, 32), (4, 32), (8, 64), (2, 4096)):
        got = engine_of(table, jax.devices()[:devices], rows=8, cols=cols, scan=scan)
        got = ranked(got, queries, exclude, 60)
        np.testing.assert_array_equal(
            got.ids, want_ids, err_msg=f"{devices} devices, {cols} columns a block"
        )
        np.testing.assert_array_equal(got.scores, want_scores)


@pytest.mark.parametrize("scan", [True, False])
def test_cheap_tiers_are_taken_and_stay_exact(scan):
    # one query, columns by ascending score: each block beats the last (the whole block's top K),
    # then descending: no group beats the running K-th (the gathered tier); a zero query ranks by id
    table = np.concatenate([np.arange(2000), np.arange(2000)[::-1]]).astype(np.float32)[:, None]
    queries = np.array([[1.0], [-1.0], [0.0]], np.float32)
    exclude = [np.array([1999]), np.array([], np.int64), np.array([0, 2, 3])]
    got = engine_of(table, jax.devices()[:2], rows=2, cols=256, scan=scan)
    got = ranked(got, queries, exclude, 25)
    want_ids, _ = brute(queries, table, exclude, 25)
    np.testing.assert_array_equal(got.ids, want_ids)


@pytest.mark.parametrize("scan", [True, False])
@pytest.mark.parametrize("devices", [1, 3])
def test_scan_stops_at_the_norm_bound_and_stays_exact(devices, scan):
    # a few long columns among many short ones (the norm bound ends the scan early), columns of
    # norm zero, signed one-dimensional columns whose scores equal the bound (ties with it), and
    # a query that every column scores below zero; both searches (the host's threshold scan and
    # the device's block loop) stop at the bound
    rng = np.random.default_rng(7)
    table = rng.normal(size=(6000, 4)).astype(np.float32) * 1e-3
    table[rng.choice(6000, 300, replace=False)] *= 1e3
    table[rng.choice(6000, 500, replace=False)] = 0.0
    queries = rng.normal(size=(20, 4)).astype(np.float32)
    queries[0] = -np.abs(queries[0])
    table[:, :] = np.where(queries[0] < 0, np.abs(table), table)  # row 0: every score <= 0
    exclude = random_exclusions(rng, len(queries), len(table), 30)
    scorer = engine_of(table, jax.devices()[:devices], rows=8, cols=64, scan=scan)
    want_ids, want_scores = brute(queries, table, exclude, 40)
    got = ranked(scorer, queries, exclude, 40)
    np.testing.assert_array_equal(got.ids, want_ids)
    # the scan re-scores in float64; the block loop's scores are the device's float32 products
    tolerance = {"rtol": 1e-6, "atol": 1e-12} if scan else {"rtol": 1e-5, "atol": 1e-6}
    np.testing.assert_allclose(got.scores, want_scores, **tolerance)
    signed = np.round(rng.normal(size=(3000, 1)) * 4).astype(np.float32)
    ones = np.array([[1.0], [-1.0], [2.0]], np.float32)
    got = engine_of(signed, jax.devices()[:devices], rows=4, cols=128, scan=scan)
    want_ids, _ = brute(ones, signed, [[], [5], [7, 8]], 70)
    np.testing.assert_array_equal(ranked(got, ones, [[], [5], [7, 8]], 70).ids, want_ids)


@pytest.mark.parametrize("devices", [1, 2])
def test_block_loop_scores_only_blocks_that_can_reach_the_kth_best(devices):
    # 300 long columns among 6,000 short ones: they fill the first 5 of 94 blocks (3 of 47 on
    # each of 2 devices); every row's 40th best is a long column's, far above any short one's
    rng = np.random.default_rng(8)
    table = rng.normal(size=(6000, 4)).astype(np.float32) * 1e-3
    table[rng.choice(6000, 300, replace=False)] *= 1e3
    queries = rng.normal(size=(16, 4)).astype(np.float32)
    exclude = random_exclusions(rng, len(queries), len(table), 10)
    scorer = engine_of(table, jax.devices()[:devices], rows=8, cols=64, scan=False)
    assert isinstance(scorer, block_loop.BlockLoop)
    # the layout now, not at the first query
    scorer.place()
    assert "_shares" in vars(scorer)
    got = ranked(scorer, queries, exclude, 40)
    np.testing.assert_array_equal(got.ids, brute(queries, table, exclude, 40)[0])
    assert scorer.blocks == [2 * 5 if devices == 1 else 2 * 2 * 3, 2 * 94]


def test_running_topk_merges_candidates_best_first_ties_by_lower_id():
    top = threshold_scan.RunningTopK(2, 3)
    top.merge(np.array([0, 0, 1]), np.array([1.0, 2.0, 5.0]), np.array([10, 11, 12]))
    top.merge(np.array([0, 0, 0]), np.array([2.0, 2.0, 0.5]), np.array([9, 13, 1]))
    np.testing.assert_array_equal(top.ids, [[9, 11, 13], [12, -1, -1]])
    np.testing.assert_array_equal(top.kth(), [2.0, -np.inf])


def test_shared_ranking_equals_brute_force():
    rng = np.random.default_rng(4)
    counts = rng.integers(0, 6, size=400)  # many ties: the lower id first
    exclude = random_exclusions(rng, 50, len(counts), 120)
    # fewer admissible columns than k
    exclude[0] = np.arange(395)
    got = topk.top_k_shared(counts, 30, RaggedRows.from_lists(exclude))
    want_ids, want_scores = brute(np.ones((50, 1)), counts[:, None], exclude, 30)
    np.testing.assert_array_equal(got.ids, want_ids)
    np.testing.assert_array_equal(got.scores, want_scores)


def test_shared_ranking_of_rows_taken_in_several_chunks_equals_brute_force():
    # a row excluding 30,000 columns widens every row's mask: the rows go in chunks of 69
    rng = np.random.default_rng(5)
    counts = rng.integers(0, 50, size=40_000)
    exclude = random_exclusions(rng, 200, len(counts), 300)
    exclude[3] = rng.choice(len(counts), size=30_000, replace=False)
    got = topk.top_k_shared(counts, 20, RaggedRows.from_lists(exclude))
    want_ids, want_scores = brute(np.ones((200, 1)), counts[:, None], exclude, 20)
    np.testing.assert_array_equal(got.ids, want_ids)
    np.testing.assert_array_equal(got.scores, want_scores)


def test_more_k_than_admissible_columns_gives_padding():
    table = np.arange(10, dtype=np.float32)[:, None]
    for devices in (1, 8):
        scorer = engine_of(table, jax.devices()[:devices])
        got = ranked(scorer, np.ones((1, 1), np.float32), [np.arange(5)], 8)
        np.testing.assert_array_equal(got.ids[0], [9, 8, 7, 6, 5, -1, -1, -1])
        assert np.isneginf(got.scores[0, 5:]).all()
        got = ranked(scorer, np.ones((1, 1), np.float32), [[0]], 20)
        np.testing.assert_array_equal(got.ids[0], list(range(9, 0, -1)) + [-1] * 11)


def test_block_shape_bounds_the_score_buffer_not_the_column_count():
    scorer = engine_of(
        np.zeros((1_000_003, 2), np.float32),
        jax.devices()[:1],
        rows=64,
        cols=2048,
    )
    assert scorer.shape.score_bytes() == 4 * 64 * 2048
    assert "64 rows x 2048 columns" in scorer.describe(20)
    # a block no wider than a device's share (13 columns): one group of 32, or two flag groups of 8
    small = engine_of(np.zeros((100, 2), np.float32), jax.devices()[:8], scan=False)
    assert small.shape.cols == 32
    assert engine_of(np.zeros((100, 2), np.float32), jax.devices()[:8], scan=True).shape.cols == 16


@pytest.mark.parametrize("recall_target", [0.8, 0.95])
def test_approximate_topk_recall_is_measured_against_exact(recall_target):
    rng = np.random.default_rng(1)
    table = rng.normal(size=(3000, 16)).astype(np.float32)
    queries = rng.normal(size=(40, 16)).astype(np.float32)
    exclude = [np.array([i]) for i in range(len(queries))]
    exact_engine = engine_of(table, jax.devices()[:2], cols=512, scan=False)
    exact_engine.place()
    exact = ranked(exact_engine, queries, exclude, 50)
    scorer = engine_of(table, jax.devices()[:2], cols=512, approx=True, recall_target=recall_target)
    approx = ranked(scorer, queries, exclude, 50)
    # the same approximate top K on the exact engine's layout
    shared = exact_engine.approximate(recall_target)
    np.testing.assert_array_equal(ranked(shared, queries, exclude, 50).ids, approx.ids)
    assert shared._shares is exact_engine._shares and not exact_engine.approx
    assert recall_target <= topk.approx_recall(approx.ids, exact.ids) <= 1
    assert not any(np.isin(a, e).any() for a, e in zip(approx.ids, exclude))
    assert topk.approx_recall(exact.ids[:, ::-1], exact.ids) == 1.0


def test_approx_recall_is_the_mean_share_of_each_rows_exact_ids_found():
    approx = np.array([[1, 2, 3, 4], [6, 5, -1, -1], [7, 8, 9, 10], [-1, -1, -1, -1]])
    exact = np.array([[1, 2, 9, 8], [5, 6, -1, -1], [-1, -1, -1, -1], [3, 4, -1, -1]])
    # row 0 finds 2 of its 4 exact ids, row 1 both of 2 (padding aside), row 2 has no admissible
    # column (left out), row 3 finds none of 2
    assert topk.approx_recall(approx, exact) == pytest.approx((2 / 4 + 2 / 2 + 0 / 2) / 3)
    assert topk.approx_recall(approx[2:3], exact[2:3]) == 1.0


def np_fold_in(col_table, rows, alpha, reg):
    """Eq. 4 in float64: (H_S^T H_S + alpha H^T H + reg I) w = H_S^T 1 for each row."""
    h = np.asarray(col_table, np.float64)
    base = alpha * h.T @ h + reg * np.eye(h.shape[1])
    return np.stack([np.linalg.solve(base + h[c].T @ h[c], h[c].sum(axis=0)) for c in rows])


def test_ranker_folds_in_or_takes_trained_rows_and_excludes_known_and_self():
    rng = np.random.default_rng(3)
    cols = rng.normal(size=(700, 6)).astype(np.float32)
    known = random_exclusions(rng, 90, len(cols), 12)
    row_ids = rng.integers(0, 700, size=90)
    fold = lambda table, lists, config: np_fold_in(table, lists, *config)
    ranker = Ranker(cols, (0.1, 0.5), fold_in_fn=fold, batch_size=16, cols_per_block=64)
    got = ranker.rank(RaggedRows.from_lists(known, row_ids), 30, exclude_self=True)
    want_ids, _ = brute(
        np_fold_in(cols, known, 0.1, 0.5),
        cols,
        [np.append(k, r) for k, r in zip(known, row_ids)],
        30,
    )
    np.testing.assert_array_equal(got.ids, want_ids)
    rows = rng.normal(size=(700, 6)).astype(np.float32)
    ranker = Ranker(cols, cols_per_block=64, mesh=jax.devices()[:3])
    got = ranker.rank(RaggedRows.from_lists(known, row_ids), 30, row_table=rows)
    queries = np.where(np.array([len(k) > 0 for k in known])[:, None], rows[row_ids], 0.0)
    want_ids, want_scores = brute(queries, cols, known, 30)
    np.testing.assert_array_equal(got.ids, want_ids)
    np.testing.assert_allclose(got.scores, want_scores, rtol=1e-5, atol=1e-5)


def test_ranker_rejects_bad_input():
    cols = np.zeros((5, 2), np.float32)
    ranker = Ranker(cols)
    with pytest.raises(ValueError, match="row 1 names column 7 outside the table's 0..4"):
        ranker.rank(RaggedRows.from_lists([[0], [7]]), 3, row_table=cols)
    with pytest.raises(ValueError, match="row 0 names column -1 outside the table's 0..4"):
        ranker.top_k(np.ones((1, 2), np.float32), [[-1]], 3)
    with pytest.raises(ValueError, match="row ids outside the row table"):
        ranker.rank(RaggedRows.from_lists([[0]], [9]), 3, row_table=cols)
    with pytest.raises(ValueError, match="config"):
        ranker.rank(RaggedRows.from_lists([[0]]), 3)


def test_one_merge_ranks_best_first_ties_by_lower_id():
    rng = np.random.default_rng(6)
    vals = rng.integers(0, 4, size=(50, 30)).astype(np.float64)
    vals[rng.random(vals.shape) < 0.1] = -np.inf
    ids = np.stack([rng.permutation(1000)[:30] for _ in range(50)])
    got_vals, got_ids = engine.merge(vals, ids, 12)
    order = np.lexsort((ids, -vals), axis=1)[:, :12]
    want_vals = np.take_along_axis(vals, order, axis=1)
    np.testing.assert_array_equal(got_vals, want_vals)
    finite = np.isfinite(want_vals)
    np.testing.assert_array_equal(got_ids[finite], np.take_along_axis(ids, order, axis=1)[finite])


def test_block_loop_batches_hold_at_most_its_rows_and_excluded_ids():
    lengths = np.array([3, 0, 5, 9, 1, 1, 1, 8, 2])
    spans = block_loop.batches(lengths, 3, 9)
    assert spans == [(0, 3), (3, 4), (4, 7), (7, 8), (8, 9)]
    for lo, hi in spans:
        assert hi - lo <= 3 and lengths[lo:hi].sum() <= 9


@pytest.mark.parametrize("scan", [True, False])
def test_everything_excluded_and_more_k_than_admissible(scan):
    rng = np.random.default_rng(9)
    table = rng.normal(size=(300, 5)).astype(np.float32)
    queries = rng.normal(size=(6, 5)).astype(np.float32)
    queries[4] = 0
    exclude = [
        np.arange(300),
        np.arange(1, 300),
        rng.choice(300, 250, replace=False),
        np.array([], np.int64),
        np.arange(0, 300, 2),
        np.arange(300)[::-1],
    ]
    got = ranked(
        engine_of(table, jax.devices()[:2], rows=4, cols=64, scan=scan), queries, exclude, 80
    )
    want_ids, want_scores = brute(queries, table, exclude, 80)
    np.testing.assert_array_equal(got.ids, want_ids)
    np.testing.assert_allclose(got.scores, want_scores, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("integer", [False, True], ids=["random", "ties"])
def test_wide_blocks_take_the_k_best_groups_and_stay_exact(integer):
    """Blocks of many groups (k below their count): where more than the cheap tiers' groups can
    enter, a block's best K groups are merged; random scores and integer ones (ties everywhere)."""
    rng = np.random.default_rng(int(integer))
    shape = (9000, 4)
    table = (rng.integers(-3, 4, size=shape) if integer else rng.normal(size=shape)).astype(
        np.float32
    )
    queries = (rng.integers(-3, 4, size=(20, 4)) if integer else rng.normal(size=(20, 4))).astype(
        np.float32
    )
    queries[0] = 0  # a zero query: every score ties
    exclude = random_exclusions(rng, len(queries), len(table), 30)
    want_ids, want_scores = brute(queries, table, exclude, 40)
    for devices, cols in ((1, 4096), (2, 2048)):  # 128 and 64 groups of 32 a block
        got = engine_of(table, jax.devices()[:devices], rows=8, cols=cols, scan=False)
        got = ranked(got, queries, exclude, 40)
        np.testing.assert_array_equal(got.ids, want_ids, err_msg=f"{devices} x {cols}")
        np.testing.assert_allclose(got.scores, want_scores, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("scan", [True, False])
def test_tables_of_no_one_or_only_zero_columns(scan):
    ones = np.ones((2, 3), np.float32)
    for num_cols, exclude in ((0, [[], []]), (1, [[], [0]]), (5, [[], [0]])):
        table = np.ones((num_cols, 3), np.float32)
        got = ranked(engine_of(table, jax.devices()[:3], scan=scan), ones, exclude, 4)
        np.testing.assert_array_equal(got.ids, brute(ones, table, exclude, 4)[0], str(num_cols))
    zeros = np.zeros((50, 3), np.float32)  # every score 0, every bound 0: the lowest ids
    scorer = engine_of(zeros, jax.devices()[:2], cols=32, scan=scan)
    got = ranked(scorer, ones, [[1], [0]], 4)
    np.testing.assert_array_equal(got.ids, [[0, 2, 3, 4], [1, 2, 3, 4]])
    np.testing.assert_array_equal(got.scores, np.zeros((2, 4)))
