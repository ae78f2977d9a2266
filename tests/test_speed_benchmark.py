"""`benchmarks.speed` and its core parts: implicit fed our objective, the on-device generator, the
solve forms and their labels, a toy run with the de-sparse section.

(a) The matrix handed to implicit (confidences in its values, implicit's alpha = 1, as its GPU `fit`
needs) trains our objective: implicit's CPU model on it matches the independent float64 NumPy iALS,
and matches implicit's own alpha handling; the binary matrix alone (what the GPU would train
unscaled) does not. (b) The benchmark runs on CPU at toy sizes in a subprocess and writes every
field, the solve-form comparison (each row labelled by its whole variant) and the de-sparse section
included. (c) The generator gives the nnz asked, ids in range,
distinct pairs and the power-law shares its rank distribution implies. (d) The forms: each is the
default config with only its solve fields changed, and the fastest candidate is picked with the
recall rule on hand-made figures.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import types

import numpy as np
import pytest
from benchmark_run import toy_run
from implicit.cpu.als import AlternatingLeastSquares

from benchmarks import speed as bench
from benchmarks.core import children, implicit_als, power_law, solve_forms
from benchmarks.core.speed_sizes import ours_config
from webgraph_contract import synthetic_matrix

import reference_ials as ref

REPO = pathlib.Path(__file__).resolve().parent.parent
NUM_USERS, NUM_ITEMS, DIM = 40, 30, 6


def _small_rows() -> dict[int, list[int]]:
    rows = ref.random_rows(5, NUM_USERS, NUM_ITEMS, max_len=10)
    for item in set(range(NUM_ITEMS)) - {c for cols in rows.values() for c in cols}:
        # every item observed: implicit solves every row, the reference too
        rows[0] = sorted(rows[0] + [item])
    return rows


def _csr(rows: dict[int, list[int]]) -> tuple[np.ndarray, np.ndarray]:
    lengths = [len(rows[r]) for r in range(NUM_USERS)]
    return np.concatenate([[0], np.cumsum(lengths)]), np.concatenate(
        [rows[r] for r in range(NUM_USERS)]
    )


def _fit(
    matrix, reg: float, alpha: float, use_cg: bool, start=None
) -> tuple[np.ndarray, np.ndarray]:
    model = AlternatingLeastSquares(
        factors=DIM,
        regularization=reg,
        alpha=alpha,
        iterations=3,
        use_cg=use_cg,
        num_threads=1,
        random_state=0,
    )
    if start is not None:
        model.user_factors, model.item_factors = (t.astype(np.float32) for t in start)
    model.fit(matrix, show_progress=False)
    return np.asarray(model.user_factors, np.float64), np.asarray(model.item_factors, np.float64)


@pytest.mark.parametrize("alpha,lam", [(0.01, 1.5), (0.3, 0.2)])
def test_implicit_fed_the_mapped_matrix_trains_our_objective(alpha, lam):
    rows = _small_rows()
    matrix, reg = implicit_als.implicit_problem(*_csr(rows), NUM_ITEMS, alpha, lam, 0.0)
    # the confidence is in the values
    assert np.allclose(matrix.data, 1 + 1 / alpha)
    rng = np.random.default_rng(6)
    w0, h0 = rng.normal(0, 0.3, (NUM_USERS, DIM)), rng.normal(0, 0.3, (NUM_ITEMS, DIM))
    want_w, want_h = ref.ials(rows, w0, h0, epochs=3, alpha=alpha, reg=lam)
    # implicit's embeddings are ours times this (benchmarks.core.implicit_als)
    scale = np.sqrt(1 + alpha)
    got_w, got_h = _fit(matrix, reg, 1.0, use_cg=False, start=(scale * w0, scale * h0))
    for got, want in ((got_w, want_w), (got_h, want_h)):
        assert np.linalg.norm(got / scale - want) <= 1e-4 * np.linalg.norm(want)


def test_scaled_matrix_is_implicits_own_alpha_and_the_unscaled_one_is_not():
    """The GPU model ignores alpha in `fit`: the scaled matrix at alpha 1 must be what alpha would
    do (CG)."""
    rows = _small_rows()
    matrix, reg = implicit_als.implicit_problem(*_csr(rows), NUM_ITEMS, 0.05, 0.5, 0.0)
    binary = matrix.copy()
    binary.data[:] = 1.0
    scaled = _fit(matrix, reg, 1.0, use_cg=True)
    own = _fit(binary, reg, float(matrix.data[0]), use_cg=True)
    unscaled = _fit(binary, reg, 1.0, use_cg=True)
    for got, want, wrong in zip(scaled, own, unscaled):
        assert np.linalg.norm(got - want) <= 1e-5 * np.linalg.norm(want)
        assert np.linalg.norm(wrong - want) > 0.1 * np.linalg.norm(want)


def test_generator_gives_distinct_pairs_in_range_with_power_law_shares():
    num_rows, num_cols, nnz = 50_000, 10_000, 100_000
    indptr, cols, facts = power_law.device_csr(3, num_rows, num_cols, nnz)
    assert indptr.shape == (num_rows + 1,) and indptr[0] == 0 and indptr[-1] == nnz == len(cols)
    lengths = np.diff(indptr)
    assert (lengths >= 0).all() and 0 <= cols.min() and cols.max() < num_cols
    keys = np.repeat(np.arange(num_rows), lengths) * num_cols + cols
    # sorted by (row, column) and no pair twice
    assert (np.diff(keys) > 0).all()
    assert facts["device_s"] >= 0 and facts["draws"][-1] >= nnz
    # the share of the pairs held by the top 1%, 10%, 50% of rows (columns), against the same shares
    # of a
    # NumPy multinomial over the pipeline generator's rank probabilities (its counts sorted the same
    # way)
    rng = np.random.default_rng(0)
    col_counts = np.bincount(cols, minlength=num_cols)
    for counts, s in ((lengths, power_law.ROW_EXPONENT), (col_counts, power_law.COL_EXPONENT)):
        want = rng.multinomial(nnz, synthetic_matrix.rank_probabilities(len(counts), s))
        for q in (0.01, 0.1, 0.5):
            top = int(q * len(counts))
            got_share, want_share = (
                np.sort(counts)[::-1][:top].sum() / nnz,
                np.sort(want)[::-1][:top].sum() / nnz,
            )
            assert abs(got_share - want_share) < 0.02, (s, q, got_share, want_share)
    # heavy-tailed
    assert lengths.max() > 20 * lengths.mean()
    again, _, _ = power_law.device_csr(3, num_rows, num_cols, nnz)
    assert np.array_equal(again, indptr)


def test_generator_refuses_a_dense_matrix():
    with pytest.raises(ValueError, match="nnz"):
        power_law.device_csr(0, 10, 10, 60)


def test_a_bad_override_fails_in_one_line_before_any_work(tmp_path, capsys):
    assert bench.main(["--sizes", "toy", "--work", str(tmp_path), "--ours", "no_such_field=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no_such_field" in err[0]
    assert not (tmp_path / "logs").exists()


def test_cost_analysis_is_skipped_in_one_line_when_it_would_outrun_the_child():
    from benchmarks.core import sections

    got = sections.xla_cost(None, None, estimate_s=120.4, left_s=30.2)
    assert got == {"xla_note": "XLA cost analysis skipped: about 120 s needed, 30 s left"}


def test_a_failing_child_is_one_line_and_the_run_goes_on(tmp_path):
    runner = children.Runner(
        bench.MODULE, tmp_path, dict(os.environ), deadline=1e18, section_timeout=60
    )
    lines, error, _ = runner("no_such_kind", "broken", {})
    assert lines == [] and error.startswith("exit 1: KeyError")
    # the traceback's end, kept for the report
    assert "Traceback" in runner.failures["broken"]


def test_a_childs_failure_line_is_its_exception_not_jaxs_closing_note(tmp_path):
    log = tmp_path / "child.log"
    log.write_text(
        'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n'
        "jax.errors.JaxRuntimeError: INTERNAL: Triton compilation failed\n"
        "--------------------\n"
        "For simplicity, JAX has removed its internal frames from the traceback of the "
        "following exception. Set JAX_TRACEBACK_FILTERING=off to include these.\n"
    )
    assert children.last_line(log) == (
        "jax.errors.JaxRuntimeError: INTERNAL: Triton compilation failed"
    )
    log.write_text("some output\nkilled by a signal\n")
    assert children.last_line(log) == "killed by a signal"


def test_implicit_memory_is_rmms_peak_plus_the_managed_csr_or_counted_when_rmm_saw_nothing():
    import scipy.sparse as sp

    matrix = sp.random(100, 50, density=0.1, format="csr", dtype=np.float32, random_state=0)
    managed = 2 * (4 * (100 + 50 + 2) + 8 * matrix.nnz)
    seen = types.SimpleNamespace(peak_bytes=10**6)
    assert (
        implicit_als.implicit_memory(seen, matrix, 8)["peak_device_gib"] * 2**30 == 10**6 + managed
    )
    counted = implicit_als.implicit_memory(types.SimpleNamespace(peak_bytes=0), matrix, 8)
    assert counted["peak_device_gib"] * 2**30 == 4 * 8 * (150 + 16) + managed
    assert counted["peak_device_source"] == "counted"


def test_default_config_is_the_accelerator_defaults_and_a_form_changes_only_its_solve(tmp_path):
    for size in ("gowalla", "25m"):
        config = ours_config(size, 64, None, str(tmp_path))
        assert (
            config.accelerator,
            config.cg_form,
            config.matmul_precision,
            config.resident_batches,
        ) == ("auto",) * 4
        for form, solve in (
            ("matvec", {"cg_form": "matvec"}),
            ("matvec:65536", {"cg_form": "matvec", "piece_len": 16, "batch_pieces": 4096}),
            ("explicit:bfloat16", {"cg_form": "explicit", "matmul_precision": "bfloat16"}),
        ):
            got = ours_config(size, 64, None, str(tmp_path), solve_forms.form_overrides(form))
            assert got == dataclasses.replace(config, **solve)


def _row(form: str, seconds, recall=None, error=None) -> dict:
    return {"form": form, "s_per_epoch": seconds, "recall_gt@20": recall, "error": error}


def test_fastest_form_is_the_fastest_within_the_recall_tolerance():
    rows = [
        _row("explicit:bfloat16", 1.0, 0.1500),
        _row("explicit:tf32", 2.0, 0.1510),
        _row("matvec", 3.0, 0.1525),
    ]
    choice = solve_forms.choose_form(rows, tolerance=0.002)
    assert (choice["fastest"], choice["s_per_epoch"], choice["recall_gt@20"]) == (
        "explicit:tf32",
        2.0,
        0.1510,
    )
    # 0.0025 below the best
    assert choice["why_not"]["explicit:bfloat16"].startswith("Recall@20")
    assert choice["why_not"]["matvec"] == "slower: 1.50x"
    assert solve_forms.choose_form(rows, tolerance=0.003)["fastest"] == "explicit:bfloat16"


def test_forms_without_recall_drop_those_lost_on_gowalla_and_untimed_ones():
    rows = [
        _row("explicit:bfloat16", 1.0),
        _row("explicit:tf32", None, error="exit 1: out of memory"),
        _row("matvec", 3.0),
    ]
    choice = solve_forms.choose_form(rows, excluded=["explicit:bfloat16"])
    assert (
        choice["fastest"] == "matvec"
        and choice["why_not"]["explicit:tf32"] == "exit 1: out of memory"
    )
    assert "Gowalla" in choice["why_not"]["explicit:bfloat16"]
    assert solve_forms.choose_form(rows[1:2])["fastest"] is None


@pytest.mark.parametrize(
    "flag,value",
    [
        ("--forms", "explicit:float16"),
        ("--forms", "cholesky"),
        ("--forms", "matvec:triton"),
        ("--forms", "matvec:pallas"),
        ("--forms_at", "nowhere:64"),
        ("--forms_at", "25m:d128"),
    ],
)
def test_a_bad_form_or_point_is_one_line(capsys, flag, value):
    with pytest.raises(SystemExit):
        bench.parse_args(["--sizes", "toy", flag, value])
    err = capsys.readouterr().err.strip().splitlines()
    # argparse's usage line, then the one error line
    assert "error: --forms" in err[-1] and value in err[-1]


def _write_gowalla(folder: pathlib.Path, users: int, items: int) -> None:
    rng = np.random.default_rng(0)
    folder.mkdir()
    with open(folder / "train.txt", "w") as train, open(folder / "test.txt", "w") as test:
        for u in range(users):
            liked = rng.choice(items, size=12, replace=False)
            train.write(" ".join(map(str, [u, *sorted(liked[:9])])) + "\n")
            test.write(" ".join(map(str, [u, *sorted(liked[9:])])) + "\n")


def test_a_verdict_names_each_form_whole_and_sets_auto_against_the_fastest():
    choice = solve_forms.choose_form(
        [_row("auto", 2.0, 0.15), _row("matvec", 2.2, 0.15), _row("matvec:65536", 1.0, 0.15)]
    )
    line = solve_forms.verdict(dict(choice, size="25m", dim=128, auto_s=2.0))
    assert line.startswith("25m d=128: fastest matvec:65536 1.0000 s/epoch")
    assert "(auto 2.0000 s/epoch, 2.00x the fastest)" in line
    assert "matvec: slower: 2.20x" in line and "auto: slower: 2.00x" in line


@pytest.mark.parametrize(
    "flag,value",
    [
        ("--de_sparse_scale", "0"),
        ("--de_sparse_scale", "2"),
        ("--ks", "20,x"),
        ("--holdout_fraction", "1"),
    ],
)
def test_a_bad_de_sparse_flag_is_one_line(capsys, flag, value):
    with pytest.raises(SystemExit):
        bench.parse_args(["--sizes", "de-sparse", flag, value])
    assert f"error: {flag}" in capsys.readouterr().err.strip().splitlines()[-1]


def test_device_cpu_runs_implicits_cpu_model_and_pins_the_platform(tmp_path):
    args = bench.parse_args(["--device", "cpu", "--sizes", "toy", "--wheels", str(tmp_path)])
    assert args.implicit == "cpu" and bench.device_env(args)["JAX_PLATFORMS"] == "cpu"
    args = bench.parse_args(["--device", "cpu", "--implicit", "off", "--sizes", "toy"])
    assert args.implicit == "off"


def _write_gowalla(folder: pathlib.Path, users: int, items: int) -> None:
    rng = np.random.default_rng(0)
    folder.mkdir()
    with open(folder / "train.txt", "w") as train, open(folder / "test.txt", "w") as test:
        for u in range(users):
            liked = rng.choice(items, size=12, replace=False)
            train.write(" ".join(map(str, [u, *sorted(liked[:9])])) + "\n")
            test.write(" ".join(map(str, [u, *sorted(liked[9:])])) + "\n")


DE_SPARSE_PHASES = [("data", n) for n in ("generate", "split", "to host", "save")] + [
    ("ours", n)
    for n in (
        "load",
        "transpose (in_memory)",
        "tables and plan",
        "epoch 1",
        "epoch 2",
        "checkpoint",
        "tables to host",
        "fold-in",
        "column table to the device",
        "top 100 (exact)",
        "metrics",
        "top 100 (approximate, sample)",
    )
]


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """One toy run on CPU: Gowalla and the toy size with implicit, one more form at Gowalla, then
    the de-sparse section at a tiny scale without implicit; its JSON report and stdout."""
    tmp_path = tmp_path_factory.mktemp("speed")
    _write_gowalla(tmp_path / "gowalla", users=80, items=60)
    return toy_run(
        bench.MODULE,
        tmp_path,
        "--device",
        "cpu",
        "--sizes",
        "toy,gowalla,de-sparse",
        "--dims",
        "8",
        "--epochs",
        "2",
        "--gowalla",
        str(tmp_path / "gowalla"),
        "--peak_n",
        "128",
        "--copy_mib",
        "4",
        "--implicit",
        "cpu",
        "--forms",
        "matvec:65536",
        "--forms_at",
        "gowalla",
        "--ours",
        "accelerator=on",
        "--de_sparse_scale",
        "0.0001",
        "--sample_rows",
        "64",
        "--implicit_s",
        "0",
    )


def test_toy_run_end_to_end_writes_every_figure(toy):
    report, stdout = toy
    peaks = report["device"]["peaks"]
    assert all(peaks[k] > 0 for k in ("matmul_bf16_flop_s", "matmul_f32_flop_s", "copy_bytes_s"))
    data = report["data"]["toy"]
    assert (data["rows"], data["cols"], data["nnz"]) == (2_000, 500, 6_000)
    assert report["data"]["gowalla"]["nnz"] == 80 * 9
    sections = {(r["size"], r["who"], r["form"]): r for r in report["sections"]}
    assert set(sections) == {
        ("toy", "ours", "auto"),
        ("toy", "implicit-cpu", None),
        ("gowalla", "ours", "auto"),
        ("gowalla", "implicit-cpu", None),
        ("gowalla", "ours", "matvec:65536"),
    }
    for (size, who, form), r in sections.items():
        assert r["error"] is None and r["dim"] == 8 and r["epochs"] == 2
        assert r["s_per_epoch"] > 0 and len(r["epochs_s"]) == r["epochs"]
        for key in ("ratio", "gflop_s", "gb_s", "pct_f32_peak", "pct_copy_bw", "peak_host_gib"):
            assert r[key] is not None and r[key] >= 0, (size, who, key)
        for key in ("flops_per_epoch", "bytes_per_epoch", "setup_s", "load_s", "child_s"):
            assert r[key] is not None and r[key] >= 0, (size, who, key)
        # None on CPU: JAX keeps no device statistics there
        assert "peak_device_gib" in r
        # XLA's cost analysis beside the counted minimum, at the default form only
        if form == "auto":
            assert r["xla_note"] is None and r["xla_bytes_per_epoch"] > 0
            # at least one call per epoch (one where the batches stay on the device)
            assert r["xla_launches_per_epoch"] >= 1
            assert r["xla_bytes_ratio"] == r["xla_bytes_per_epoch"] / r["bytes_per_epoch"]
            assert r["pct_copy_bw_xla"] == pytest.approx(
                100 * r["xla_bytes_per_epoch"] / r["s_per_epoch"] / peaks["copy_bytes_s"]
            )
        else:
            assert r["xla_bytes_per_epoch"] is None and r["pct_copy_bw_xla"] is None
        if size == "gowalla":
            assert 0 < r["recall_gt@20"] <= 1 and 0 < r["recall@20"] <= 1 and r["ndcg@20"] > 0
            implicit_s = sections[("gowalla", "implicit-cpu", None)]["s_per_epoch"]
            assert r["ratio"] == r["s_per_epoch"] / implicit_s
    assert "s/epoch" in stdout and "implicit-cpu" in stdout
    assert "XLA GB" in stdout and "the minimum)" in stdout


def test_toy_run_labels_every_form_whole_and_sets_auto_against_the_fastest(toy):
    report, stdout = toy
    rows = {r["form"]: r for r in report["sections"] if r["size"] == "gowalla" and r["form"]}
    # the matvec:65536 run is printed and reported as such, never as matvec
    assert set(rows) == {"auto", "matvec:65536"}
    assert "gowalla d=8 ours (matvec:65536):" in stdout
    assert "gowalla d=8 ours (matvec):" not in stdout
    [choice] = report["forms"]
    assert (choice["size"], choice["dim"], choice["auto_s"]) == (
        "gowalla",
        8,
        rows["auto"]["s_per_epoch"],
    )
    assert {f: v["s_per_epoch"] for f, v in choice["forms"].items()} == {
        f: r["s_per_epoch"] for f, r in rows.items()
    }
    best = max(r["recall_gt@20"] for r in rows.values())
    want = min(
        (f for f, r in rows.items() if r["recall_gt@20"] >= best - 0.002),
        key=lambda f: rows[f]["s_per_epoch"],
    )
    assert choice["fastest"] == want
    assert "solve forms" in stdout and f"fastest {want} " in stdout


def test_toy_run_de_sparse_section_writes_every_phase_and_figure(toy):
    report, stdout = toy
    section = report["de-sparse"]
    data, ours, implicit = section["data"], section["ours"], section["implicit"]
    assert (data["rows"], data["cols"], data["nnz"]) == (1970, 1970, 119_000)
    assert data["train_nnz"] + data["fold_in_links"] + data["held_links"] == 119_000
    # about 10% of the rows, about 20% of their links
    assert 0.05 < data["test_rows"] / 1970 < 0.15
    assert 0.2 < data["held_links"] / (data["fold_in_links"] + data["held_links"]) < 0.3
    assert [(p["step"], p["phase"]) for p in section["phases"]] == DE_SPARSE_PHASES
    assert all(p["seconds"] >= 0 and p["peak_host_gib"] > 0 for p in section["phases"])
    (plan,) = [p for p in section["phases"] if p["phase"] == "tables and plan"]
    assert all(plan[f"{n}_s"] >= 0 for n in ("init", "read", "plan", "pack"))
    assert ours["error"] is None and len(ours["epochs_s"]) == 2
    assert ours["rows"] == ours["test_rows"] == data["test_rows"] and ours["topk"] == "exact"
    for name in ("recall@20", "recall@50", "recall_gt@20", "recall_gt@50", "ndcg@100"):
        assert 0 < ours[name] <= 1, name
    assert ours["recall@50"] >= ours["recall_gt@20"] and 0.9 <= ours["approx_recall"] <= 1
    # implicit runs at the other sizes, not at this one (--implicit_s 0)
    assert implicit == {"skipped": "not run (--implicit_s 0)"}
    assert "recall@50" in stdout and "implicit: not run (--implicit_s 0)" in stdout
    assert "INCOMPLETE" not in stdout


def test_a_cpu_run_gets_a_cpu_sized_budget_unless_given():
    """The default budget fits a GPU's 10-minute window; 2 CPU cores need minutes for one 25M
    size, so `--device cpu` defaults to a larger one; a given budget stays."""
    cpu = bench.parse_args(["--device", "cpu", "--sizes", "25m"])
    gpu = bench.parse_args(["--device", "gpu", "--sizes", "25m"])
    assert cpu.budget_s > gpu.budget_s and cpu.section_timeout > gpu.section_timeout
    given = bench.parse_args(["--device", "cpu", "--budget_s", "50", "--section_timeout", "9"])
    assert (given.budget_s, given.section_timeout) == (50, 9)
