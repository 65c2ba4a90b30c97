"""Measure and reconstruct: unbiased answers with the predicted variances, a clean release file,
and strict data validation."""

import json

import h5py
import numpy as np
import pandas as pd
import pytest
from bruteforce import explicit_variances, full_privacy_gram, marginal_map, pinv, true_histogram, view_queries
from scipy.stats import chi2

from querysmasher.accounting import Budget
from querysmasher.data import load_records
from querysmasher.errors import InputError
from querysmasher.measure import make_rng, measure, measure_iter, plan_digest, save_measurements
from querysmasher.planfile import save_plan
from querysmasher.planning import make_plan
from querysmasher.reconstruct import query_variances, reconstruct, view_variances
from querysmasher.schema import parse_schema

DRAWS = 2000
METHODS = ["rp", "wff", "qs", "rpplus", "qs-lowrank"]
# "qs-lowrank": qs with every several-term view in factored form (lowrank mechanisms, r noisy values)
OPTIONS = {"qs-lowrank": ("qs", {"lowrank": "always"})}


@pytest.fixture(scope="module")
def small(tiny_schema, tiny_records):
    return tiny_schema, tiny_records


def _truth(schema, records, workload, v):
    return view_queries(workload, v) @ (
        marginal_map(schema.sizes, v.attrs) @ true_histogram(records.codes, schema.sizes)
    )


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("spec", ["prefix:1,2", "range:1+affine:2", "marginal:2+abs:2@2", "random:2"])
def test_monte_carlo_unbiased_with_predicted_variance(small, method, spec):
    schema, records = small
    name, options = OPTIONS.get(method, (method, None))
    plan = make_plan(schema, spec, name, Budget.from_rho(0.5), solver_options=options)
    if method == "qs-lowrank" and "affine" in spec:
        assert any(s.mechanism.kind == "lowrank" for s in plan.solutions.values())
    rec = reconstruct(plan, measure(plan, records, np.random.default_rng(5), draws=DRAWS))
    xp = pinv(full_privacy_gram(plan))
    sq_err, pred, weights = [], [], []
    for v in plan.workload.views:
        truth = _truth(schema, records, plan.workload, v)
        a = rec.view_answers(v)
        var = view_variances(plan, v)
        assert np.allclose(var, explicit_variances(plan, v, xp), rtol=1e-7)  # the explicit least-squares estimator's
        assert np.allclose(query_variances(plan, v.attrs, view_queries(plan.workload, v)), var, rtol=1e-7)
        m = len(var) * len(plan.workload.views)
        # means within 4 standard errors of the truth
        assert np.all(np.abs(a.mean(axis=1) - truth) <= 4 * np.sqrt(var / DRAWS))
        # empirical variances within a Bonferroni chi-square band around the predicted ones
        ratio = a.var(axis=1, ddof=1) / var
        lo, hi = chi2.ppf(1e-3 / m, DRAWS - 1) / (DRAWS - 1), chi2.ppf(1 - 1e-3 / m, DRAWS - 1) / (DRAWS - 1)
        assert np.all((ratio > lo) & (ratio < hi))
        sq_err.append(((a - truth[:, None]) ** 2).mean(axis=1))
        pred.append(var)
        weights.append(np.full(len(var), v.weight))
    w = np.concatenate(weights)
    empirical_rmse = np.sqrt(np.concatenate(sq_err) @ w / w.sum())
    assert np.sqrt(np.concatenate(pred) @ w / w.sum()) == pytest.approx(plan.rmse, rel=1e-9)
    assert empirical_rmse == pytest.approx(plan.rmse, rel=0.05)


def test_release_holds_no_true_count(small, tmp_path):
    schema, records = small
    plan = make_plan(schema, "hybrid:1,2,3", "wff", Budget.from_beta(1.0))
    save_plan(plan, tmp_path / "p.h5")
    rng, seeded = make_rng(None)
    save_measurements(
        tmp_path / "m.h5",
        plan,
        measure_iter(plan, records, rng),
        seeded=seeded,
        plan_sha256=plan_digest(tmp_path / "p.h5"),
        sampler="numpy",
    )
    true_vectors = []
    for a in plan.views:
        from querysmasher.data import marginal

        x = marginal(records, a, schema.sizes)
        true_vectors += [x, (plan.solutions[plan.keys[plan.views.index(a)]].mechanism).sqrt_apply(x)]
    n = float(len(records))
    with h5py.File(tmp_path / "m.h5") as f:
        assert not f.attrs["seeded"]
        assert set(f.keys()) == {"index", "offsets", "y"}
        assert f.attrs["plan_sha256"] == plan_digest(tmp_path / "p.h5")  # the plan file's digest: no record enters it
        for name, value in f.attrs.items():
            if name != "plan_sha256":  # a hex digest holds any 3-digit string about once in 16 plans
                assert str(int(n)) not in str(value), f"attribute {name} mentions the record count"
        y, offs = f["y"][()], f["offsets"][()]
        for k in range(len(offs) - 1):
            seg = y[offs[k] : offs[k + 1]]
            assert not any(t.shape == seg.shape and np.allclose(t, seg, atol=1e-6) for t in true_vectors)
        assert not np.any(np.isclose(y, n, rtol=0, atol=1e-9))  # the exact record count appears nowhere
        # structural integers only: which views were measured and where each starts, both known
        # from the plan alone (nothing derived from the records)
        measured = np.flatnonzero(np.isfinite(plan.allocation.sigma2))
        assert f["index"].dtype == np.int64 and f["offsets"].dtype == np.int64
        assert np.array_equal(f["index"][()], measured)
        cells = [int(np.prod([schema.sizes[a] for a in plan.views[i]])) for i in measured]
        assert np.array_equal(f["offsets"][()], np.concatenate([[0], np.cumsum(cells)]))


def test_seeded_release_is_marked_and_reproducible(small, tmp_path):
    schema, records = small
    plan = make_plan(schema, "prefix:1", "wff", Budget.from_beta(1.0))
    save_plan(plan, tmp_path / "p.h5")
    for name in ("a", "b"):
        rng, seeded = make_rng(42)
        save_measurements(
            tmp_path / f"{name}.h5",
            plan,
            measure_iter(plan, records, rng),
            seeded=seeded,
            plan_sha256="x",
            sampler="numpy",
        )
    with h5py.File(tmp_path / "a.h5") as fa, h5py.File(tmp_path / "b.h5") as fb:
        assert fa.attrs["seeded"] and np.array_equal(fa["y"][()], fb["y"][()])
    assert make_rng(42)[1] and make_rng(42)[0].random() == np.random.default_rng(42).random()


def test_unseeded_release_noise_comes_from_os_entropy(monkeypatch):
    """Without a seed the generator is seeded with 128 fresh bits from the OS (``secrets``), a
    different seed each time, and the release is not marked seeded."""
    import querysmasher.measure as measure_module

    drawn = []

    def randbits(k):
        drawn.append(secrets_randbits(k))
        return drawn[-1]

    secrets_randbits = measure_module.secrets.randbits
    monkeypatch.setattr(measure_module.secrets, "randbits", randbits)
    (r1, s1), (r2, s2) = make_rng(None), make_rng(None)
    assert not s1 and not s2
    assert len(drawn) == 2 and drawn[0] != drawn[1]
    assert [r.bit_generator.seed_seq.entropy for r in (r1, r2)] == drawn
    assert np.array_equal(r1.random(4), np.random.default_rng(drawn[0]).random(4))
    assert not np.array_equal(r1.random(4), r2.random(4))


@pytest.mark.parametrize(
    "column, values, message",
    [
        ("a0", ["0", "1", "", "2", "3"], "1 rows are empty or NaN (first data rows: 3)"),
        ("a1", ["0", "1", "2", "9", "7"], "2 rows are outside the domain 0..3 (first data rows: 4, 5)"),
        ("a2", ["0", "1.5", "2", "x", "1"], "1 rows are not numbers (first data rows: 4)"),
    ],
)
def test_bad_data_names_column_count_and_rows(tmp_path, tiny_schema, column, values, message):
    schema = tiny_schema
    frame = pd.DataFrame({c: ["1"] * 5 for c in schema.names})
    frame[column] = values
    path = tmp_path / "d.csv"
    frame.to_csv(path, index=False)
    with pytest.raises(InputError) as e:
        load_records(path, schema)
    assert column in str(e.value) and message in str(e.value)
    dropped = load_records(path, schema, on_invalid="drop")
    assert (
        dropped.dropped == sum(1 for v in values if v not in ("0", "1", "2", "3"))
        and len(dropped) == 5 - dropped.dropped
    )


def test_non_integer_codes_and_missing_columns(tmp_path):
    schema = parse_schema("synthetic:n=4,d=2")
    path = tmp_path / "d.csv"
    pd.DataFrame({"a0": ["1", "2.5"], "a1": ["0", "0"]}).to_csv(path, index=False)
    with pytest.raises(InputError, match="1 rows are not integer codes"):
        load_records(path, schema)
    pd.DataFrame({"a0": ["1"]}).to_csv(path, index=False)
    with pytest.raises(InputError, match="missing column.*'a1'"):
        load_records(path, schema)


def test_encoding_from_categories_and_bins(tmp_path):
    dom = tmp_path / "dom.yaml"
    dom.write_text("color: {categories: [red, green, blue]}\nage: {bins: [0, 18, 65, 120]}\n")
    schema = parse_schema(str(dom))
    data = tmp_path / "d.csv"
    pd.DataFrame({"color": ["blue", "red", "green"], "age": ["17", "18", "120"]}).to_csv(data, index=False)
    r = load_records(data, schema, domain_file=dom)
    assert r.codes.tolist() == [[2, 0], [0, 1], [1, 2]]
    pd.DataFrame({"color": ["pink"], "age": ["130"]}).to_csv(data, index=False)
    with pytest.raises(InputError, match="color.*not in the category list"):
        load_records(data, schema, domain_file=dom)


def test_parquet_input(tmp_path, small):
    schema, records = small
    path = tmp_path / "d.parquet"
    pd.DataFrame(records.codes, columns=schema.names).to_parquet(path)
    assert np.array_equal(load_records(path, schema).codes, records.codes)


def test_cli_end_to_end_and_bad_data(tmp_path, small, cli):
    schema, records = small
    data = tmp_path / "d.csv"
    pd.DataFrame(records.codes, columns=schema.names).to_csv(data, index=False)
    plan = tmp_path / "p.h5"
    assert (
        cli(
            "plan", "--schema", "synthetic:n=4,d=3", "--workload", "prefix:1,2", "--method", "wff", "--out", plan
        ).returncode
        == 0
    )
    r = cli("measure", "--plan", plan, "--data", data, "--out", tmp_path / "m.h5", "--seed", "1")
    assert r.returncode == 0 and "experiments only" in r.stderr
    r = cli(
        "reconstruct",
        "--plan",
        plan,
        "--measurements",
        tmp_path / "m.h5",
        "--out",
        tmp_path / "a.h5",
        "--csv",
        tmp_path / "csv",
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["answers_written"] is True
    assert (tmp_path / "csv" / "a0__a1.csv").is_file()
    bad = tmp_path / "bad.csv"
    pd.DataFrame({"a0": [0, 5], "a1": [0, 0], "a2": [1, 1]}).to_csv(bad, index=False)
    r = cli("measure", "--plan", plan, "--data", bad, "--out", tmp_path / "m2.h5")
    assert r.returncode == 2 and "a0" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "m2.h5").exists()
    r = cli("reconstruct", "--plan", plan, "--measurements", tmp_path / "nope.h5", "--out", tmp_path / "a2.h5")
    assert r.returncode == 2 and "does not exist" in r.stderr


@pytest.mark.parametrize("method", ["rp", "wff", "qs", "qs-lowrank"])
@pytest.mark.parametrize("perturb", [False, True])
def test_view_variance_memo_equals_per_view_variances(method, perturb):
    """The memo shares a computation between views with equal queries, mechanisms and noise; with
    noise scales made unequal between symmetric views it must tell them apart."""
    import dataclasses

    from querysmasher.variances import ViewVarianceMemo

    name, options = OPTIONS.get(method, (method, {}))
    plan = make_plan(
        parse_schema("synthetic:n=5,d=4"),
        "prefix:1+affine:2+marginal:3",
        name,
        Budget.from_beta(1.0),
        solver_options=options,
    )
    if perturb:
        s2 = plan.allocation.sigma2 * np.linspace(1.0, 2.0, len(plan.views))
        plan = dataclasses.replace(plan, allocation=dataclasses.replace(plan.allocation, sigma2=s2))
    memo = ViewVarianceMemo(plan)
    for v in plan.workload.views:
        assert np.array_equal(memo(v), view_variances(plan, v))
    assert memo.hits + memo.misses == len(plan.workload.views)
    if perturb:
        assert memo.hits == 0  # every residual view has its own noise scale now
    else:
        assert memo.hits > 0


@pytest.mark.parametrize("sizes", [(5,), (4, 3), (3, 2, 4)])
def test_fourier_query_variances_are_those_of_the_applied_root(sizes):
    """One FFT per query gives |Re(X^(+1/2)) q|^2, what reconstruct's root applies, also for weights
    that are not symmetric under f -> -f (WFF's are; a plug-in's need not be). Reference: X = F^H
    diag(w) F with F the unnormalised DFT matrix (built from its entries exp(-2 pi i j k / n)), so
    X^(+1/2) = F^H diag(w^(+1/2)) F / c^(3/2)."""
    from querysmasher.solvers import ViewMechanism

    rng = np.random.default_rng(1)
    w = rng.random(sizes)
    w.flat[3] = 0.0
    mech = ViewMechanism("fourier", sizes, (w,))
    q = rng.standard_normal((7, mech.cells))
    f = np.ones((1, 1))
    for n in sizes:
        f = np.kron(f, np.exp(-2j * np.pi * np.outer(np.arange(n), np.arange(n)) / n))
    c = mech.cells
    root = (f.conj().T * np.where(w.ravel() > 0, 1 / np.sqrt(np.where(w.ravel() > 0, w.ravel(), 1)), 0)) @ f / c**1.5
    want = np.sum((q @ root.real.T) ** 2, axis=1)
    np.testing.assert_allclose(mech.rows_pinv_quadratic(q), want, rtol=1e-10)
    np.testing.assert_allclose(np.sum(mech.pinv_sqrt_apply(q.T) ** 2, axis=0), want, rtol=1e-10)
