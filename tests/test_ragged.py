"""`webgraph_contract.ragged.RaggedRows` against plain Python lists."""

import numpy as np

from webgraph_contract.ragged import RaggedRows

LISTS = [[3, 1], [], [7], [2, 2, 9], []]


def _as_lists(r: RaggedRows) -> list[list[int]]:
    return [list(map(int, r.ids[r.indptr[k] : r.indptr[k + 1]])) for k in range(len(r))]


def test_from_lists_round_trip_and_lengths():
    r = RaggedRows.from_lists(LISTS, row_ids=[10, 11, 12, 13, 14], dtype=np.int32)
    assert _as_lists(r) == LISTS
    assert r.ids.dtype == np.int32
    assert r.lengths.tolist() == [len(x) for x in LISTS]
    assert r.nnz == sum(len(x) for x in LISTS)
    assert [(i, list(ids)) for i, ids in r] == list(zip([10, 11, 12, 13, 14], LISTS))


def test_take_select_concat_agree_with_lists():
    r = RaggedRows.from_lists(LISTS)
    r.values = np.arange(r.nnz, dtype=np.float32)
    part = r.take(1, 4)
    assert _as_lists(part) == LISTS[1:4] and part.row_ids.tolist() == [1, 2, 3]
    assert part.values.tolist() == [2.0, 3.0, 4.0, 5.0]
    picked = r.select(np.array([3, 0, 2]))
    assert _as_lists(picked) == [LISTS[3], LISTS[0], LISTS[2]]
    assert picked.values.tolist() == [3.0, 4.0, 5.0, 0.0, 1.0, 2.0]
    mask = np.array([True, False, False, True, True])
    assert _as_lists(r.select(mask)) == [LISTS[0], LISTS[3], LISTS[4]]
    # a view whose indptr does not start at 0 concatenates like any other
    joined = RaggedRows.concat([r.take(2, 4), r.take(0, 1), RaggedRows.empty()])
    assert _as_lists(joined) == [LISTS[2], LISTS[3], LISTS[0]]
    assert joined.row_ids.tolist() == [2, 3, 0]
    assert joined.values.tolist() == [2.0, 3.0, 4.0, 5.0, 0.0, 1.0]


def test_with_ids():
    r = RaggedRows.from_lists(LISTS)
    grown = r.take(1, 4).with_ids(np.array([5, 6, 8]))
    assert _as_lists(grown) == [[5], [7, 6], [2, 2, 9, 8]]


def _random_lists(seed: int, n: int, max_len: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 50, size=int(rng.integers(0, max_len + 1))).tolist() for _ in range(n)]


def test_random_rows_survive_take_select_and_concat():
    rows = _random_lists(0, 40, 6)
    r = RaggedRows.from_lists(rows, row_ids=np.arange(40) + 100)
    want = [(100 + k, x) for k, x in enumerate(rows)]
    assert [(i, list(map(int, ids))) for i, ids in r] == want
    assert r.take(5, 17).indptr[0] == 0
    keep = np.arange(40) % 3 == 1
    parts = [r.take(0, 9), r.take(9, 9), r.take(9, 30), r.select(np.arange(40) >= 30)]
    joined = RaggedRows.concat(parts)
    assert [(i, list(map(int, ids))) for i, ids in joined] == want
    assert _as_lists(r.select(keep)) == [x for x, k in zip(rows, keep) if k]


def test_concat_of_views_into_one_ids_array():
    """Parts whose `indptr` starts past 0 and whose `ids` is the whole array (a reader's view)."""
    rows = _random_lists(1, 10, 4)
    whole = RaggedRows.from_lists(rows)
    views = [
        RaggedRows(whole.row_ids[lo:hi], whole.indptr[lo : hi + 1], whole.ids)
        for lo, hi in [(0, 3), (3, 10)]
    ]
    got = RaggedRows.concat(views)
    assert got.indptr[0] == 0 and len(got.ids) == got.indptr[-1] == sum(map(len, rows))
    assert _as_lists(got) == rows and got.row_ids.tolist() == list(range(10))


def test_concat_of_nothing_and_of_empty_rows():
    assert len(RaggedRows.concat([])) == 0 and RaggedRows.concat([]).indptr.tolist() == [0]
    empty_rows = RaggedRows.from_lists([[], []], row_ids=[7, 8])
    got = RaggedRows.concat([RaggedRows.empty(), empty_rows, RaggedRows.from_lists([[3]], [9])])
    assert got.row_ids.tolist() == [7, 8, 9] and _as_lists(got) == [[], [], [3]]
