"""Plain-function tests of the WebGraph job's record logic (no Beam): filters, ids, splits,
parsing."""

from __future__ import annotations

import collections
import hashlib
import re
from urllib.parse import urljoin

import numpy as np
import pyarrow as pa
import pytest

from webgraph_contract.layout import shard_bounds, shard_of
from webgraph_contract.urls import normalize_url
from webgraph_pipeline import columnar, fingerprints, graph_config, ids, splits, tlds
from webgraph_pipeline.columnar import rank_nodes
from webgraph_pipeline.edges_input import parse_url_line
from webgraph_pipeline.filters import tld_of
from webgraph_pipeline.fingerprints import pack_names
from webgraph_pipeline.wat_writer import page_links, relative_link, synthetic_pages


def test_variants_match_paper_table_1():
    expected = {
        "sparse": ((), 10),
        "dense": ((), 50),
        "de-sparse": (("de",), 10),
        "de-dense": (("de",), 50),
        "in-sparse": (("in",), 10),
        "in-dense": (("in",), 50),
    }
    assert {n: (c.tlds, c.min_links) for n, c in graph_config.VARIANTS.items()} == expected
    assert all(
        c.degree_passes == 1 and c.test_fraction == 0.1 and c.holdout_fraction == 0.25
        for c in graph_config.VARIANTS.values()
    )
    with pytest.raises(ValueError, match="unknown variant 'de-medium'"):
        graph_config.get_variant("de-medium")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"min_links": -1}, "min_links"),
        ({"holdout_fraction": 1.0}, "holdout_fraction"),
        ({"test_fraction": 1.5}, "test_fraction"),
        ({"test_fraction": 1.0}, "no training row"),
        ({"tlds": ("De",)}, "top-level domain"),
        ({"tlds": ("xyzjunk",)}, "unknown top-level domain"),
        ({"tlds": ("de",), "bipartite": True}, "bipartite"),
        ({"degree_passes": 0}, "degree_passes"),
    ],
)
def test_graph_config_rejects_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        graph_config.GraphConfig(**kwargs)


def test_parse_tlds():
    assert tlds.parse_tlds(" IN, de,.de ,") == ("de", "in")
    assert tlds.parse_tlds("") == () and tlds.parse_tlds([]) == ()
    # IDN TLDs become the punycode the hosts carry (IANA: .рф is xn--p1ai), so the filter can match
    # them.
    assert tlds.parse_tlds(["РФ", "de"]) == ("de", "xn--p1ai") == tlds.parse_tlds("de,рф")
    url, _ = normalize_url("http://ПРИМЕР.РФ/")
    assert tld_of(url) == "xn--p1ai"


@pytest.mark.parametrize(
    "value, message",
    [
        ("ü", "unknown top-level domain 'ü' ('xn--tda')"),  # its punycode is no TLD
        ("de,xyzjunk", "unknown top-level domain 'xyzjunk'"),
        ("co.uk", "bad top-level domain 'co.uk'"),
        ("de", None),
        (5, "expected a comma-separated string or a list of strings, got 5"),
        (["de", 3], "got ['de', 3]"),
        ({"de": 1}, "got {'de': 1}"),
    ],
)
def test_parse_tlds_refuses_what_can_match_no_host(value, message):
    if message is None:
        assert tlds.parse_tlds(value, where="here") == ("de",)
        return
    with pytest.raises(ValueError, match=r"^here: .*" + re.escape(message)):
        tlds.parse_tlds(value, where="here")


def test_tld_filter_functions():
    assert tld_of("http://www.Example.DE./x") == "de"
    assert tld_of("https://xn--mnchen-3ya.de:8080/") == "de"
    assert tld_of("user42") == ""


def test_ids_are_dense_deterministic_and_ordered_by_bucket_then_name():
    names = [f"http://site{i % 37}.de/p{i}" for i in range(2000)]

    def blake2b_bucket(name, num_buckets):  # the documented rule, worked out here with hashlib
        return (
            int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big")
            % num_buckets
        )

    for num_buckets in (1, 7, 1024):
        buckets = ids.buckets_of(pack_names(names), num_buckets)
        assert buckets.tolist() == [blake2b_bucket(n, num_buckets) for n in names]
        groups = collections.defaultdict(list)
        for n, b in zip(names, buckets.tolist()):
            groups[b].append(n)
        offsets = ids.bucket_offsets((b, len(v)) for b, v in groups.items())
        assigned = {}
        for b, v in groups.items():  # each bucket numbered on its own, from its offset
            v = v[::-1]
            assigned.update(
                zip(
                    v,
                    rank_nodes(
                        np.full(len(v), b), pa.array(v, pa.large_string()), offsets[b]
                    ).tolist(),
                )
            )
        assert sorted(assigned.values()) == list(range(len(names)))
        # The documented order: by (bucket, name), worked out here without the module's numbering.
        order = sorted(names, key=lambda n: (blake2b_bucket(n, num_buckets), n))
        assert [assigned[n] for n in order] == list(range(len(names)))
    assert ids.buckets_of(b"", 7).tolist() == []
    with pytest.raises(ValueError, match="twice"):
        rank_nodes(np.zeros(2), pa.array(["x", "x"], pa.large_string()), 0)


def assign_rows(rows, seed, test_fraction, holdout_fraction):
    """{'train': [...], 'test': [...]} records of (row id, name, sorted cols) rows, by
    `splits.split_block`."""
    names = np.array([name for _, name, _ in rows], dtype=object)
    ptr = np.concatenate([[0], np.cumsum([len(c) for _, _, c in rows])]).astype(np.int64)
    cols = np.array([c for _, _, cs in rows for c in cs], dtype=np.int64)
    is_test, held = splits.split_block(names, ptr, cols, seed, test_fraction, holdout_fraction)
    out = {"train": [], "test": []}
    for i, (row_id, _, row_cols) in enumerate(rows):
        h = held[ptr[i] : ptr[i + 1]]
        if is_test[i]:
            out["test"].append(
                (
                    row_id,
                    tuple(np.array(row_cols)[~h].tolist()),
                    tuple(np.array(row_cols)[h].tolist()),
                )
            )
        else:
            assert not h.any()
            out["train"].append((row_id, tuple(row_cols), ()))
    return out


def test_split_rules_on_small_rows():
    assert assign_rows(
        [(5, "http://a.de/", (9,))], seed=0, test_fraction=1.0, holdout_fraction=0.25
    ) == {"train": [(5, (9,), ())], "test": []}
    rows = [(n, f"http://r{n}.de/", tuple(range(100, 100 + n))) for n in range(2, 30)]
    out = assign_rows(rows, 3, 1.0, 0.25)
    assert not out["train"] and [r for r, _, _ in out["test"]] == list(range(2, 30))
    for (n, kept, held), (_, _, cols) in zip(out["test"], rows):
        assert kept and held and sorted(kept + held) == list(cols) and not set(kept) & set(held)
        assert len(held) == min(
            max(int(0.25 * n + splits.unit_hashes(3, "round", [f"http://r{n}.de/"])[0]), 1), n - 1
        )
    assert assign_rows([(1, "x", (1, 2, 3))], 0, 0.0, 0.25)["test"] == []
    # The split depends on the seed.
    picks = {
        seed: bool(assign_rows([(0, "http://a.de/", (1, 2, 3, 4, 5))], seed, 0.5, 0.25)["test"])
        for seed in range(40)
    }
    assert 0 < sum(picks.values()) < 40
    # The row hash is blake2b-8 of "seed<US>row<US>name" over 2^64, worked out here with hashlib.
    digest = hashlib.blake2b("7\x1frow\x1fhttp://a.de/".encode(), digest_size=8).digest()
    assert (
        splits.unit_hashes(7, "row", ["http://a.de/"])[0] == int.from_bytes(digest, "big") / 2.0**64
    )


def _synthetic_rows(num_pages: int) -> list[tuple[int, str, tuple[int, ...]]]:
    pages = list(synthetic_pages(num_pages, mean_out=10, seed=7))
    index = {url: i for i, (url, _) in enumerate(pages)}
    return [
        (index[url], url, tuple(sorted(index[t] for t in links))) for url, links in pages if links
    ]


def test_strong_generalization_split_on_100k_nodes():
    """The split and transposition logic on a generated 100k-page graph (the Beam path runs on a
    smaller graph in test_pipeline_graph.py, to keep the DirectRunner within the test budget)."""
    rows = _synthetic_rows(100_000)
    assert len(rows) > 95_000
    out = assign_rows(rows, seed=11, test_fraction=0.1, holdout_fraction=0.25)
    eligible = sum(1 for r in rows if len(r[2]) >= 2)
    assert abs(len(out["test"]) / eligible - 0.10) < 0.01
    assert abs(len(out["test"]) / len(rows) - 0.10) < 0.01
    kept = sum(len(r[1]) for r in out["test"])
    held = sum(len(r[2]) for r in out["test"])
    assert abs(held / (kept + held) - 0.25) < 0.01
    # Rows with 2 or 3 links must still hold one out (50%, 33%): that is the whole bias; rows with
    # at least 4 links hold out 25% in expectation (stochastic rounding).
    big = [r for r in out["test"] if len(r[1]) + len(r[2]) >= 4]
    big_held = sum(len(r[2]) for r in big)
    assert abs(big_held / sum(len(r[1]) + len(r[2]) for r in big) - 0.25) < 0.005
    assert all(r[1] and r[2] for r in out["test"])
    # train_t (the Beam step's rule: columns' sorted rows) against a sparse matrix transpose.
    transposed = collections.defaultdict(list)
    for row_id, cols, _ in out["train"]:
        for c in cols:
            transposed[c].append(row_id)
    train_t = [(c, tuple(sorted(r)), ()) for c, r in sorted(transposed.items())]
    r_idx = np.array([r for r, cols, _ in out["train"] for _ in cols])
    c_idx = np.array([c for _, cols, _ in out["train"] for c in cols])
    import scipy.sparse as sp

    mt = sp.csr_matrix((np.ones(len(r_idx)), (r_idx, c_idx)), shape=(100_000, 100_000)).T.tocsr()
    expected = [
        (c, tuple(mt.indices[mt.indptr[c] : mt.indptr[c + 1]].tolist()), ())
        for c in range(100_000)
        if mt.indptr[c + 1] > mt.indptr[c]
    ]
    assert train_t == expected
    test_rows = {r for r, _, _ in out["test"]}
    assert not test_rows & {c for _, rs, _ in train_t for c in rs}


def test_records_parse_with_public_feature_spec():
    import tensorflow as tf

    from webgraph_contract import record_codec

    rows = [(3, (1, 2), ()), (7, (4,), (5, 6))]
    parsed = tf.io.parse_example(
        [record_codec.encode_row(*r) for r in rows], record_codec.feature_spec()
    )
    assert parsed["row_tag"].numpy().tolist() == [3, 7]
    assert tf.sparse.to_dense(parsed["gt_tag"]).numpy().tolist() == [[0, 0], [5, 6]]


def test_parse_url_line():
    assert parse_url_line("007 http://www1.hollins.edu/ \n") == (
        ("7", "http://www1.hollins.edu/"),
        None,
    )
    assert parse_url_line("link url") == (None, "bad_id")
    assert parse_url_line("x http://a/") == (None, "bad_id")
    assert parse_url_line("1 http://a/ extra") == (None, "bad_fields")


def test_shards_are_contiguous_id_ranges():
    got = [shard_of(i, 10, 3) for i in range(10)]
    assert got == sorted(got) and set(got) == {0, 1, 2}
    assert [shard_of(i, 2, 5) for i in range(2)] == [0, 2]


@pytest.mark.parametrize("num_ids, num_shards", [(3000, 7), (10, 3), (2, 5), (7, 7), (0, 2)])
def test_shard_bounds_are_where_shard_of_cuts(num_ids, num_shards):
    """Shard k of `shard_bounds` holds exactly the ids that `shard_of` puts in shard k."""
    bounds = shard_bounds(num_ids, num_shards)
    assert len(bounds) == num_shards + 1 and bounds[0] == 0 and bounds[-1] == num_ids
    for k in range(num_shards):
        ids = [i for i in range(num_ids) if i * num_shards // num_ids == k]
        assert list(range(bounds[k], bounds[k + 1])) == ids
        assert all(shard_of(i, num_ids, num_shards) == k for i in ids)


@pytest.mark.parametrize(
    "page, target, expected",
    [
        ("http://a.de/b/x.html", "http://a.de/b/y.html", "y.html"),
        ("http://a.de/b/x.html", "http://a.de/c/z.html?q=1", "/c/z.html?q=1"),
        ("http://a.de/b/x.html", "http://other.de/", "http://other.de/"),
        ("http://a.de/", "http://a.de/", "/"),
    ],
)
def test_relative_links_resolve_back(page, target, expected):
    assert relative_link(page, target) == expected
    assert urljoin(page, expected) == target


def test_page_links_resolve_with_base_and_skip_non_hyperlinks():
    pages = list(synthetic_pages(400, seed=1))
    with_base = 0
    for url, targets in pages:
        base, links = page_links(url, targets)
        with_base += base is not None
        start = urljoin(url, base) if base else url
        hrefs = [urljoin(start, link["url"]) for link in links if link["path"] == "A@/href"]
        assert [h for h in hrefs if "#" not in h] == list(targets)
        assert any(link["path"] == "IMG@/src" for link in links)
    assert 0 < with_base < len(pages)


@pytest.mark.parametrize("values", [[], [7], [3, 1, 3, 2, 1, 2**64 - 1, 0, 2**64 - 1]])
def test_distinct_is_sorted_set(values):
    arr = np.array(values, dtype=np.uint64)
    got = columnar.distinct(arr)
    assert got.dtype == np.uint64 and got.tolist() == sorted(set(values))


@pytest.mark.parametrize("values", [[], [7], [3, 1, 3, 2, 1, 2**64 - 1, 0, 2**64 - 1, 3]])
def test_counts_and_unique_values(values):
    arr = np.array(values, dtype=np.uint64)
    got, counts = columnar.count_values(arr)
    assert got.dtype == np.uint64 and dict(
        zip(got.tolist(), counts.tolist())
    ) == collections.Counter(values)
    assert columnar.unique(arr).tolist() == list(dict.fromkeys(values))


def test_rows_group_sorted_with_and_without_the_one_key_path():
    rows, cols = [5, 1, 5, 1, 0], [9, 4, 2, 3, 7]
    for big in (0, 2**40):  # ids from 2^31 take the lexsort path
        r, c = np.array(rows) + big, np.array(cols) + big
        got_rows, offsets, got_cols = columnar.group_rows(r, c)
        got = {
            int(x): got_cols[offsets[i] : offsets[i + 1]].tolist() for i, x in enumerate(got_rows)
        }
        assert got == {
            x + big: sorted(y + big for rr, y in zip(rows, cols) if rr == x) for x in rows
        }
        assert got_rows.tolist() == sorted(got)


def test_membership_and_lookup_in_a_sorted_table():
    table = np.array([2, 5, 9, 2**64 - 1], np.uint64)
    values = np.array([9, 1, 2**64 - 1, 10, 5, 2**63], np.uint64)
    assert columnar.is_member(values, table).tolist() == [
        v in set(table.tolist()) for v in values.tolist()
    ]
    assert columnar.is_member(values, table[:0]).tolist() == [False] * len(values)
    present = np.array([2**64 - 1, 2, 9, 9], np.uint64)
    assert columnar.lookup(present, table, "node").tolist() == [3, 0, 2, 2]
    with pytest.raises(RuntimeError, match="runner lost data: target 0xa is in the edges"):
        columnar.lookup(np.array([5, 10], np.uint64), table, "target")
    repeated = np.array([2, 5, 5, 9], np.uint64)  # not a hash table's keys: the binary-search path
    assert columnar.is_member(values, repeated).tolist() == [True, False, False, False, True, False]
    assert columnar.lookup(np.array([9, 2], np.uint64), repeated, "node").tolist() == [3, 0]


def test_narrow_only_ids_that_fit_int32():
    small, big, neg = np.array([0, 2**31 - 1]), np.array([0, 2**31]), np.array([-1, 3])
    out = columnar.narrow(small, big, neg, np.zeros(0, np.int64), np.array([1], np.uint64))
    assert [a.dtype for a in out] == [np.int32, np.int64, np.int64, np.int32, np.uint64]
    assert out[0].tolist() == small.tolist()


def test_names_pack_and_unpack():
    names = ["http://a.example/é", "b", "c d"]
    assert fingerprints.unpack_names(fingerprints.pack_names(names)).tolist() == names
    assert fingerprints.unpack_names(fingerprints.pack_names([])).tolist() == []
    with pytest.raises(ValueError, match="newline"):
        fingerprints.pack_names(["a", "b\nc"])
    with pytest.raises(ValueError, match="empty"):
        fingerprints.pack_names([""])
