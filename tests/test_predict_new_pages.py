"""`predict --links/--rows` (pages not in the vocabulary), `export --topk`: real data (hollins)."""

import json
import subprocess
import sys

import numpy as np
import pytest
from alx_cli import run_cli

from alx_trainer.cli.commands import main_predict
from alx_trainer.config import TrainConfig
from alx_trainer.evaluation import metrics
from alx_trainer.evaluation.evaluate import Ranking, evaluate_dataset, evaluate_rows
from alx_trainer.tools import topk_export, topk_records
from alx_trainer.tools.predict import predict_outlinks
from alx_trainer.train import train
from tests import reference_ials
from webgraph_contract import fileio
from webgraph_contract.dataset_reader import read_split, read_vocab
from webgraph_contract.ragged import RaggedRows

from pipeline_data import hollins_dataset

K = 20


@pytest.fixture(scope="module")
def hollins(tmp_path_factory):
    """hollins.edu as a graph with a test split, and a model whose fold-in solves exactly."""
    root = tmp_path_factory.mktemp("hollins_new_pages")
    data = str(root / "data")
    hollins_dataset(data, test_fraction=0.1, num_shards=2)
    config = TrainConfig(
        data=data,
        model_dir=str(root / "model"),
        dim=16,
        epochs=4,
        alpha=0.01,
        reg=0.1,
        solver="cholesky",
        eval_every=0,
        checkpoint_every=4,
        progress=False,
    )
    return data, train(config)


def reference_top(
    query: np.ndarray, col_table: np.ndarray, exclude, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """float64 NumPy: every column scored, `exclude` left out, the k best (ties by lower id)."""
    scores = np.asarray(col_table, np.float64) @ np.asarray(query, np.float64)
    scores[np.asarray(exclude, np.int64)] = -np.inf
    top = np.argsort(-scores, kind="stable")[:k]
    return top, scores


def assert_same_ranking(
    ids, scores, ref_scores: np.ndarray, want: np.ndarray, tol: float = 1e-4
) -> None:
    """The ids are the reference's top k up to near-ties: same length, each id's reference score
    matches its reported score, and the scores fall as the reference's sorted scores do."""
    ids, scores = np.asarray(ids), np.asarray(scores, np.float64)
    assert len(ids) == len(want) and len(set(ids.tolist())) == len(ids)
    np.testing.assert_allclose(scores, ref_scores[want], atol=tol, rtol=tol)
    np.testing.assert_allclose(ref_scores[ids], scores, atol=tol, rtol=tol)
    clear = ref_scores[want] > ref_scores[want[-1]] + 10 * tol  # above any near-tie at the cut
    assert set(want[clear].tolist()) <= set(ids.tolist())


def exact_fold_in(model, cols) -> np.ndarray:
    """Eq. 4 solved in float64 against the trained column table (the model's solver is Cholesky)."""
    config = model.config
    return reference_ials.solve_rows(
        model.col_table,
        {0: cols},
        np.zeros((1, config.dim)),
        config.alpha,
        config.reg,
        config.reg_exponent,
    )[0]


def test_links_of_a_held_out_row_rank_as_eval_folds_it_in(hollins):
    data, model = hollins
    vocab = read_vocab(data)
    row, kept, gt = max(read_split(data, "test"), key=lambda r: len(r[1]) + len(r[2]))
    links = [vocab[c] for c in kept]
    rc, out, err = run_cli(
        [
            "predict",
            "--data",
            data,
            "--model_dir",
            model.config.model_dir,
            "--k",
            str(K),
            "--links",
            *links,
            "--name",
            vocab[row],
            "--json",
        ]
    )
    assert rc == 0, err
    got = json.loads(out)
    ids = [p["id"] for p in got["predictions"]]
    assert got["name"] == vocab[row] and got["known"] == len(kept) and got["unknown"] == 0
    assert not set(ids) & set(kept.tolist()) and row not in ids
    assert [p["url"] for p in got["predictions"]] == [vocab[i] for i in ids]
    want, ref = reference_top(exact_fold_in(model, kept), model.col_table, np.append(kept, row), K)
    assert_same_ranking(ids, [p["score"] for p in got["predictions"]], ref, want)
    # eval of this one row counts the same hits
    hits = len(set(ids) & set(gt.tolist())) / min(K, len(gt))
    assert (
        evaluate_rows(
            model,
            RaggedRows.from_lists([kept], [row]),
            RaggedRows.from_lists([gt], [row]),
            None,
            Ranking(ks=(K,), ndcg_k=None),
            exclude_self=True,
        )["recall@20"]
        == hits
    )
    # the table lists the same URLs; a URL written otherwise is normalized; an unknown one reported
    odd = links[0].replace("http://", "HTTP://", 1)
    rc, table, err = run_cli(
        [
            "predict",
            "--data",
            data,
            "--model_dir",
            model.config.model_dir,
            "--k",
            str(K),
            "--links",
            odd,
            *links[1:],
            "http://nowhere.example/",
            "--name",
            vocab[row],
        ]
    )
    assert rc == 0, err
    assert [line.split()[-1] for line in table.splitlines()[1:]] == [vocab[i] for i in ids]
    assert "1 of" in err and "http://nowhere.example/ (not_in_vocabulary)" in err


def test_rows_over_the_test_split_give_evals_recall(hollins, tmp_path):
    data, model = hollins
    vocab = read_vocab(data)
    test = read_split(data, "test")
    lines = []
    for n, (row, kept, _) in enumerate(test):
        lines.append(f"{vocab[row]}\t{' '.join(vocab[c] for c in kept)}")
        if n % 7 == 3:  # lines that are not test rows, in between: they must not shift the batches
            lines += [
                "no tab here",
                "\thttp://www.hollins.edu/",
                f"page-{n}\thttp://nowhere.example/{n}",
            ]
    path = tmp_path / "rows.tsv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    rc, out, err = run_cli(
        [
            "predict",
            "--data",
            data,
            "--model_dir",
            model.config.model_dir,
            "--k",
            str(K),
            "--rows",
            str(path),
        ]
    )
    assert rc == 0, err
    answers = [json.loads(line) for line in out.splitlines()]
    by_name = {a["name"]: a for a in answers}
    assert len(answers) == len(test) + sum(1 for n in range(len(test)) if n % 7 == 3)
    unknown = [a for a in answers if a["name"].startswith("page-")]
    assert all(a["predictions"] == [] and "none of its 1 links" in a["reason"] for a in unknown)
    topk = np.full((len(test), K), -1, np.int64)
    for i, (row, kept, _) in enumerate(test):
        ids = [p["id"] for p in by_name[vocab[row]]["predictions"]]
        assert len(ids) == K and not set(ids) & (set(kept.tolist()) | {row})
        topk[i] = ids
    recall = metrics.mean_metric(metrics.recall_at_k(topk, [g for _, _, g in test], K))
    assert recall == pytest.approx(
        evaluate_dataset(model, data, ranking=Ranking(ks=(K,), ndcg_k=None))["recall@20"], abs=1e-6
    )
    bad = sum(1 for n in range(len(test)) if n % 7 == 3)
    assert f"{len(answers)} pages answered, {bad} without a known link" in err
    assert (
        f"no_tab: {bad} (first at line 5)" in err and f"empty_name: {bad} (first at line 6)" in err
    )


@pytest.fixture(scope="module")
def numeric(tmp_path_factory):
    """hollins.edu without its URLs: a graph whose names are the crawl's integer node ids (most
    of them another node's internal id), and a model of it."""
    root = tmp_path_factory.mktemp("hollins_numeric")
    data = str(root / "data")
    hollins_dataset(data, test_fraction=0.1, num_shards=1, urls=False)
    config = TrainConfig(
        data=data,
        model_dir=str(root / "model"),
        dim=16,
        epochs=2,
        alpha=0.01,
        reg=0.1,
        solver="cholesky",
        eval_every=0,
        progress=False,
    )
    return data, train(config)


def test_rows_named_by_numbers_give_evals_recall(numeric, tmp_path):
    data, model = numeric
    vocab = read_vocab(data)
    test = read_split(data, "test")
    assert all(name.isdigit() for name in vocab.values())
    assert sum(int(vocab[c]) != c for _, kept, _ in test for c in kept) > len(test)
    path = tmp_path / "rows.tsv"
    path.write_text(
        "".join(f"{vocab[r]}\t{' '.join(vocab[c] for c in kept)}\n" for r, kept, _ in test)
    )
    rc, out, err = run_cli(
        ["predict", "--data", data, "--model_dir", model.config.model_dir, "--k", str(K)]
        + ["--rows", str(path)]
    )
    assert rc == 0, err
    assert "links not found" not in err
    answers = [json.loads(line) for line in out.splitlines()]
    assert [a["name"] for a in answers] == [vocab[r] for r, _, _ in test]
    topk = np.full((len(test), K), -1, np.int64)
    for i, a in enumerate(answers):
        topk[i, : len(a["predictions"])] = [p["id"] for p in a["predictions"]]
    recall = metrics.mean_metric(metrics.recall_at_k(topk, [g for _, _, g in test], K))
    assert recall == pytest.approx(
        evaluate_dataset(model, data, ranking=Ranking(ks=(K,), ndcg_k=None))["recall@20"], abs=1e-6
    )
    # the answers' own names (`url`) fed back as links find the same columns
    urls = [p["url"] for p in answers[0]["predictions"]]
    rc, out, err = run_cli(
        ["predict", "--data", data, "--model_dir", model.config.model_dir, "--json"]
        + ["--links", *urls]
    )
    assert rc == 0, err
    assert json.loads(out)["known"] == len(urls) and json.loads(out)["unknown"] == 0


def test_a_number_that_is_a_name_is_that_name_and_id_n_is_an_id(numeric):
    data, model = numeric
    vocab = read_vocab(data)
    train_rows = {r for r, _, _ in read_split(data, "train")}
    # a training row whose name is the id of another training row
    row = next(r for r in sorted(train_rows) if int(vocab[r]) != r and int(vocab[r]) in train_rows)
    other = int(vocab[row])

    def outlinks(node: str) -> list[str]:
        rc, out, err = run_cli(
            ["predict", "--data", data, "--model_dir", model.config.model_dir, "--k", "5", node]
        )
        assert rc == 0, err
        return [line.split()[2] for line in out.splitlines()[1:]]

    by_name = outlinks(vocab[row])
    assert by_name == outlinks(f"id:{row}")
    assert by_name != outlinks(f"id:{other}")
    assert [int(i) for i in by_name] == [p.id for p in predict_outlinks(model, data, row, 5)]
    # a number that is no name of a numeric vocabulary is not taken as an id
    missing = str(max(int(n) for n in vocab.values()) + 1)
    rc, out, err = run_cli(
        ["predict", "--data", data, "--model_dir", model.config.model_dir, missing]
    )
    assert rc == 1 and out == "" and f"'{missing}' is not in the vocabulary" in err
    rc, out, _ = run_cli(
        ["predict", "--data", data, "--model_dir", model.config.model_dir, "--json"]
        + ["--links", vocab[row], missing, f"id:{other}"]
    )
    got = json.loads(out)
    assert rc == 0 and got["known"] == 2 and got["unknown"] == 1


def test_bad_lines_of_rows_are_counted_by_reason(hollins, tmp_path):
    data, model = hollins
    url = read_vocab(data)[read_split(data, "train")[0][0]]
    path = tmp_path / "rows.tsv"
    path.write_bytes(
        b"\n".join(
            [
                f"a\t{url} ftp://x.example/ mailto:me@x.example 123456789".encode(),  # 3 unknown
                b"no tab",
                b"",  # blank: passed over
                b"\t" + url.encode(),
                b"b\t  ",
                b"c\t\xff\xfe" + url.encode(),
                b"also no tab",
                b"d\thttp://nowhere.example/ not-a-url",
            ]
        )
        + b"\n"
    )
    rc, out, err = run_cli(
        ["predict", "--data", data, "--model_dir", model.config.model_dir, "--rows", str(path)]
    )
    assert rc == 0, err
    first, last = (json.loads(line) for line in out.splitlines())
    assert first["known"] == 1 and first["unknown"] == 3 and len(first["predictions"]) == 10
    assert last["predictions"] == [] and last["unknown"] == 2 and "reason" in last
    summary = err.strip().splitlines()[-1]
    assert "2 pages answered, 1 without a known link" in summary
    assert (
        "5 links not found" in summary
        and "not_in_vocabulary: 1" in summary
        and "no_scheme: 1" in summary
    )
    assert (
        "ftp_scheme: 1" in summary
        and "mailto_scheme: 1" in summary
        and "id_out_of_range: 1" in summary
    )
    assert "5 lines skipped" in summary and "no_tab: 2 (first at line 2)" in summary
    assert (
        "empty_name: 1 (first at line 4)" in summary and "no_links: 1 (first at line 5)" in summary
    )
    assert "not_utf8: 1 (first at line 6)" in summary
    # nothing usable at all: one line, exit 1
    path.write_text("just words\nmore words\n")
    rc, out, err = run_cli(
        ["predict", "--data", data, "--model_dir", model.config.model_dir, "--rows", str(path)]
    )
    assert rc == 1 and out == "" and len(err.strip().splitlines()) == 1 and "no_tab: 2" in err
    rc, _, err = run_cli(
        [
            "predict",
            "--data",
            data,
            "--model_dir",
            model.config.model_dir,
            "--rows",
            str(tmp_path / "none.tsv"),
        ]
    )
    assert rc == 1 and "no such file" in err
    rc, _, err = run_cli(
        ["predict", "--data", data, "--model_dir", model.config.model_dir, "--rows", str(tmp_path)]
    )
    assert rc == 1 and f"--rows {tmp_path}: is a directory" in err
    for text in ("", "\n  \n"):
        path.write_text(text)
        rc, out, err = run_cli(
            ["predict", "--data", data, "--model_dir", model.config.model_dir, "--rows", str(path)]
        )
        assert rc == 1 and out == "" and len(err.strip().splitlines()) == 1, err
        assert "no page to answer" in err


def test_batch_size_is_capped_at_the_rows_to_score(hollins, tmp_path):
    data, model = hollins
    test = read_split(data, "test")
    exported = len(read_split(data, "train")) + len(test)
    common = ["--data", data, "--model_dir", model.config.model_dir, "--batch_size", "5000"]
    rc, _, err = run_cli(["eval", *common, "--k", "20"])
    assert rc == 0 and f"top-k of {len(test)} rows: " in err, err
    assert f"in blocks of {len(test)} rows x" in err
    url = read_vocab(data)[int(test[0][1][0])]
    path = tmp_path / "rows.tsv"
    path.write_text(f"a\t{url}\nb\t{url}\n\nc\t{url}\n")
    rc, out, err = run_cli(["predict", *common, "--rows", str(path), "--log_level", "debug"])
    assert rc == 0 and len(out.splitlines()) == 3 and "in blocks of 4 rows x" in err, err
    rc, _, err = run_cli(["export", *common, "--output", str(tmp_path / "t"), "--topk", "3"])
    assert rc == 0 and f"in blocks of {exported} rows x" in err, err


def test_predict_refuses_nodes_and_links_together(hollins, capsys):
    data, model = hollins
    with pytest.raises(SystemExit) as e:
        main_predict(["--data", data, "--model_dir", model.config.model_dir, "1", "--links", "2"])
    assert e.value.code == 2 and "one of them" in capsys.readouterr().err


def test_export_topk_reads_back_as_brute_force(hollins, tmp_path):
    data, model = hollins
    out = tmp_path / "topk"
    rc, printed, err = run_cli(
        [
            "export",
            "--model_dir",
            model.config.model_dir,
            "--data",
            data,
            "--output",
            str(out),
            "--topk",
            "15",
            "--num_shards",
            "3",
            "--batch_size",
            "64",
        ]
    )
    assert rc == 0, err
    files = sorted(out.glob("topk.tfr-*"))
    assert [f.name for f in files] == [f"topk.tfr-0000{i}-of-00003" for i in range(3)]
    assert printed.split() == [str(f) for f in files] + [str(out / "topk.json")]
    assert "export: top 15 of" in err
    got = topk_export.read_export(str(out))
    train_rows = {r: c for r, c, _ in read_split(data, "train")}
    test_rows = {r: c for r, c, _ in read_split(data, "test")}
    assert sorted(got.rows.tolist()) == sorted(list(train_rows) + list(test_rows))
    vocab = read_vocab(data)
    for i, row in enumerate(got.rows.tolist()):
        known = train_rows.get(row, test_rows.get(row))
        query = model.row_table[row] if row in train_rows else exact_fold_in(model, known)
        want, ref = reference_top(query, model.col_table, np.append(known, row), 15)
        ids = got.ids[i][got.ids[i] >= 0]
        assert_same_ranking(ids, got.scores[i][: len(ids)], ref, want)
        assert got.row_urls[i] == vocab[row] and got.urls[i] == [vocab[c] for c in ids]
    manifest = json.loads((out / "topk.json").read_text())
    assert manifest["rows"] == len(got.rows) and manifest["folded_in_rows"] == len(test_rows)


def test_export_joins_the_readers_short_chunks_into_full_ones():
    """The reader cuts a chunk at each file's end: the export ranks full chunks of the ranker's
    rows a call, the rows and their ids in order (one call, one program shape, per full chunk)."""
    rng = np.random.default_rng(0)
    lists = [rng.integers(0, 50, rng.integers(0, 6)).tolist() for _ in range(23)]
    cuts = [0, 3, 3, 4, 11, 12, 23]
    read = [
        RaggedRows.from_lists(lists[lo:hi], row_ids=np.arange(lo, hi) + 100)
        for lo, hi in zip(cuts, cuts[1:])
    ]
    for rows in (1, 5, 8, 23, 40):
        got = list(topk_export.full_chunks(read, rows))
        assert [len(c) for c in got] == [min(rows, 23 - lo) for lo in range(0, 23, rows)]
        assert [r for c in got for r in c.row_ids.tolist()] == list(range(100, 123))
        assert [ids.tolist() for c in got for ids in c.lists()] == lists


def killed_writer(path) -> None:
    """A process killed (SIGKILL) while it writes the TFRecord file `path`, as an export killed
    mid-shard: what it leaves behind stays."""
    script = (
        "import sys\n"
        "from webgraph_contract import fileio\n"
        "with fileio.record_writer(sys.argv[1]) as write:\n"
        "    write([b'partial'] * 100)\n"
        "    print('writing', flush=True)\n"
        "    sys.stdin.read()\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline() == "writing\n"
    proc.kill()
    proc.wait()
    proc.stdin.close()
    proc.stdout.close()


def test_export_again_leaves_only_its_own_shards(hollins, tmp_path):
    data, model = hollins
    out = tmp_path / "topk"
    export = ["export", "--model_dir", model.config.model_dir, "--data", data, "--output", str(out)]
    rc, _, err = run_cli([*export, "--topk", "5", "--num_shards", "3"])
    assert rc == 0, err
    assert len(list(out.glob("topk.tfr-*"))) == 3
    killed_writer(out / "topk.tfr-00000-of-00002")
    (out / "topk.tfr-00001-of-00003.tmp-0123456789abcdef0123456789abcdef").write_bytes(b"old")
    (out / "topk.tfr-notes.txt").write_text("mine")
    (out / "row_embeddings.tfr-00000-of-00004").write_bytes(b"a table export's")
    assert [p.name for p in out.glob("topk.tfr-*-of-00002")] == []  # the temp file is hidden
    assert [p.name for p in out.glob(".topk.tfr-00000-of-00002.tmp-*")] != []
    rc, printed, err = run_cli([*export, "--topk", "5", "--num_shards", "1"])
    assert rc == 0, err
    assert sorted(p.name for p in out.iterdir()) == [
        "row_embeddings.tfr-00000-of-00004",
        "topk.json",
        "topk.tfr-00000-of-00001",
        "topk.tfr-notes.txt",
    ]
    assert "removed 5 file(s) of an earlier or killed export" in err
    rows = sum(1 for f in out.glob("topk.tfr-*-of-*") for _ in fileio.read_records(str(f)))
    assert rows == len(topk_export.read_export(str(out)).rows)
    # the tables: the same, with their own shard names
    tables = tmp_path / "tables"
    export = ["export", "--model_dir", model.config.model_dir, "--output", str(tables)]
    rc, _, err = run_cli([*export, "--num_shards", "3"])
    assert rc == 0, err
    killed_writer(tables / "col_embeddings.tfr-00000-of-00002")
    (tables / "topk.tfr-00000-of-00001").write_bytes(b"a top-k export's")
    rc, printed, err = run_cli(export)
    assert rc == 0, err
    assert sorted(p.name for p in tables.iterdir()) == [
        "col_embeddings.tfr-00000-of-00001",
        "col_table.npy",
        "embeddings.npz",
        "row_embeddings.tfr-00000-of-00001",
        "row_table.npy",
        "tables.json",
        "topk.tfr-00000-of-00001",
    ]
    col_records = fileio.read_records(str(tables / "col_embeddings.tfr-00000-of-00001"))
    assert sum(1 for _ in col_records) == len(model.col_table)


def test_topk_records_are_what_tensorflow_writes_and_parses():
    tf = pytest.importorskip("tensorflow")
    from webgraph_contract.record_codec import encode_example

    rng = np.random.default_rng(0)
    names = [f"http://p{i}.example/{'ü' * int(rng.integers(0, 90))}" for i in range(300)]
    ids = rng.integers(0, 300, (40, 9))
    ids[3, 5:] = -1
    ids[4] = -1
    scores = rng.normal(size=(40, 9)).astype(np.float32)
    rows = rng.integers(0, 300, 40)
    entries = topk_records.name_entries(names)
    encoded = topk_records.encode(rows, ids, scores, entries, entries)
    parsed = tf.io.parse_example(encoded, topk_records.feature_spec(named=True))
    dense = tf.sparse.to_dense(parsed["ids"], default_value=-1).numpy()
    for r in range(40):
        keep = ids[r] >= 0
        assert encoded[r] == encode_example(
            {
                "row": rows[r : r + 1],
                "ids": ids[r][keep],
                "scores": scores[r][keep],
                "row_url": [names[rows[r]].encode()],
                "urls": [names[i].encode() for i in ids[r][keep]],
            }
        )
        assert dense[r][: keep.sum()].tolist() == ids[r][keep].tolist()
        assert topk_records.parse_example(encoded[r])["urls"] == [
            names[i].encode() for i in ids[r][keep]
        ]
    assert parsed["row"].numpy().tolist() == rows.tolist()
    assert parsed["row_url"].numpy()[7].decode() == names[rows[7]]
