"""Method qsplus (querysmasher.marginal_family as a method): CLI round trip plan -> measure ->
reconstruct, the plan file (saved = loaded, edited to spend more is refused), the loaded plan's
applied operators' privacy cost by brute force on the full domain, and the API."""

import math

import h5py
import numpy as np
import pandas as pd
import pytest

import querysmasher as qs
from querysmasher.accounting import Budget
from querysmasher.fulldomain import cell_index
from querysmasher.marginal_family import MarginalPlan, applied_privacy_cost, measurement_operators, plan
from querysmasher.marginal_family.files import load_marginal_plan, save_marginal_plan
from querysmasher.plankinds import kind_of
from querysmasher.reconstruct import released_answers

SCHEMA, WORKLOAD = "synthetic:n=3,d=3", "affine:2"
MIXED = "prefix:3+affine:2"  # three marginal views and one residual-only subset (the 3-way view)


@pytest.fixture(scope="module")
def small_plan():
    p = plan(SCHEMA, MIXED, Budget.from_beta(0.8), target_gap=1e-3)
    assert p.views and p.residual_views
    return p


def _data(tmp_path):
    data = tmp_path / "d.csv"
    pd.DataFrame(np.random.default_rng(0).integers(0, 3, (150, 3)), columns=["a0", "a1", "a2"]).to_csv(
        data, index=False
    )
    return data


def test_cli_round_trip(cli, tmp_path):
    data, p, m, a = _data(tmp_path), tmp_path / "p.h5", tmp_path / "m.h5", tmp_path / "a.h5"
    r = cli(
        "plan",
        "--schema",
        SCHEMA,
        "--workload",
        WORKLOAD,
        "--method",
        "qsplus",
        "--out",
        str(p),
        "--option",
        "target_gap=1e-3",
    )
    assert r.returncode == 0, r.stderr
    assert cli("measure", "--plan", str(p), "--data", str(data), "--out", str(m), "--seed", "1").returncode == 0
    r = cli("reconstruct", "--plan", str(p), "--measurements", str(m), "--out", str(a), "--csv", str(tmp_path / "csv"))
    assert r.returncode == 0, r.stderr
    assert a.exists() and (tmp_path / "csv" / "tables.json").exists() and list((tmp_path / "csv").glob("*.csv"))
    with h5py.File(a) as f:
        assert f.attrs["method"] == "qsplus"
        n = f["views/answer_offsets"][-1]
        assert f["views/answers"].shape == (n,) == f["views/variances"].shape and n > 0
        assert np.all(np.isfinite(f["views/answers"][()])) and np.all(f["views/variances"][()] > 0)
    # released answers: one (view, answers, variances) per workload view
    loaded = load_marginal_plan(p)
    rel = list(released_answers(loaded, a))
    assert len(rel) == len(loaded.workload.views)


def test_saved_plan_loads_equal(small_plan, tmp_path):
    path = tmp_path / "p.h5"
    save_marginal_plan(small_plan, path)
    back = load_marginal_plan(path)
    assert isinstance(back, MarginalPlan) and kind_of(back).file_kind == "marginal-plan"
    assert back.rmse == small_plan.rmse
    assert back.privacy_cost() == pytest.approx(small_plan.privacy_cost(), rel=1e-12)
    assert applied_privacy_cost(measurement_operators(back)) == pytest.approx(
        applied_privacy_cost(measurement_operators(small_plan)), rel=1e-12
    )
    s = back.summary()
    assert {"rmse", "queries", "views"} <= set(s)


@pytest.mark.parametrize("field, scale", [("shares", 1.001), ("residual_sigma2", 1 / 1.001), ("factors/0", 1.001)])
def test_edited_plan_spending_more_is_refused(cli, small_plan, tmp_path, field, scale):
    path, m = tmp_path / "p.h5", tmp_path / "m.h5"
    save_marginal_plan(small_plan, path)
    with h5py.File(path, "r+") as f:
        f[field][...] = f[field][()] * scale
    r = cli("measure", "--plan", str(path), "--data", str(_data(tmp_path)), "--out", str(m), "--seed", "1")
    assert r.returncode == 2 and not m.exists()


def test_loaded_plan_privacy_by_brute_force(small_plan, tmp_path):
    path = tmp_path / "p.h5"
    save_marginal_plan(small_plan, path)
    p = load_marginal_plan(path)
    ops = measurement_operators(p)
    sizes = p.schema.sizes
    b = np.vstack([m.operator[:, cell_index(sizes, m.attrs)] / math.sqrt(m.sigma2) for m in ops])
    brute = float(np.max(np.sum(b * b, axis=0)))
    assert brute <= p.budget.beta
    assert brute == pytest.approx(applied_privacy_cost(ops), rel=1e-12)


def test_api_make_plan():
    p = qs.make_plan(SCHEMA, WORKLOAD, method="qsplus")
    assert isinstance(p, MarginalPlan) and p.method == "qsplus"
    assert p.rmse <= p.qs_rmse * (1 + 1e-12)


@pytest.mark.parametrize(
    "field, edit", [("shares", lambda d: -d), ("residual_sigma2", lambda d: d * np.nan), ("factor_of", lambda d: d + 5)]
)
def test_corrupt_plan_field_is_one_input_error_naming_it(small_plan, tmp_path, field, edit):
    from querysmasher.errors import InputError

    path = tmp_path / "p.h5"
    save_marginal_plan(small_plan, path)
    with h5py.File(path, "r+") as f:
        data = f[field][()]
        del f[field]
        f[field] = edit(data)
    with pytest.raises(InputError, match=field):
        load_marginal_plan(path)


def test_measurements_of_the_wrong_length_are_refused(small_plan, tmp_path):
    from querysmasher.data import validate_records
    from querysmasher.errors import InputError
    from querysmasher.measure import measure_plan_to_file
    from querysmasher.noise import make_noise
    from querysmasher.reconstruct import reconstruct_plan_to_file

    records = validate_records(pd.read_csv(_data(tmp_path)), small_plan.schema)
    m = tmp_path / "m.h5"
    measure_plan_to_file(small_plan, records, make_noise(0), m, plan_sha256="x")
    with h5py.File(m, "r+") as f:  # the first vector one value short
        offs = f["offsets"][()]
        y = f["y"][()]
        del f["y"], f["offsets"]
        f["y"] = np.delete(y, offs[1] - 1)
        f["offsets"] = np.concatenate([[0], offs[1:] - 1])
    with pytest.raises(InputError, match="one vector per measurement"):
        reconstruct_plan_to_file(small_plan, m, tmp_path / "a.h5", plan_sha256="x")
    assert not (tmp_path / "a.h5").exists()
    with pytest.raises(InputError, match="different plan"):
        reconstruct_plan_to_file(small_plan, m, tmp_path / "a.h5", plan_sha256="y")


def test_csv_tables_are_the_gls_tables_with_their_exact_standard_errors(small_plan, tmp_path):
    """reconstruct --csv for qsplus: one CSV per workload view table whose cells are estimable, its
    estimates the GLS table and its std_error the square root of the exact cell variances; the
    index names every table (omitted ones with why)."""
    import json

    from querysmasher.data import validate_records
    from querysmasher.marginal_family import reconstruct
    from querysmasher.marginal_family.gls import table_estimable
    from querysmasher.measure import load_measurements, measure_plan_to_file
    from querysmasher.noise import make_noise
    from querysmasher.reconstruct import reconstruct_plan_to_file

    records = validate_records(pd.read_csv(_data(tmp_path)), small_plan.schema)
    m, out = tmp_path / "m.h5", tmp_path / "csv"
    measure_plan_to_file(small_plan, records, make_noise(0), m, plan_sha256="x")
    info = reconstruct_plan_to_file(small_plan, m, tmp_path / "a.h5", plan_sha256="x", csv_dir=str(out))
    with load_measurements(m, "x", small_plan) as meas:
        ys = [np.asarray(y) for y in meas.y]
    ans = reconstruct(small_plan, ys, cell_variances=True)
    index = json.loads((out / "tables.json").read_text())
    views = list(dict.fromkeys(v.attrs for v in small_plan.workload.views))
    assert len(index["tables"]) == len(views)
    written = 0
    for entry, attrs in zip(index["tables"], views):
        k = next(i for i, v in enumerate(small_plan.workload.views) if v.attrs == attrs)
        if not table_estimable(small_plan, attrs)[0]:
            assert entry["file"] is None and entry["omitted"]
            continue
        frame = pd.read_csv(out / entry["file"])
        assert len(frame) == math.prod(small_plan.schema.sizes[a] for a in attrs)
        np.testing.assert_allclose(frame["estimate"], ans.tables[k], rtol=1e-12, atol=1e-9)
        np.testing.assert_allclose(frame["std_error"], np.sqrt(ans.cell_variances[k]), rtol=1e-12)
        written += 1
    assert written == info["csv_tables"] > 0


@pytest.fixture(scope="module")
def replace_plan():
    p = plan(SCHEMA, MIXED, Budget.from_beta(0.8).with_neighbours("replace"), target_gap=1e-3)
    assert p.budget.neighbours == "replace" and p.views and p.residual_views
    return p


def test_replace_plan_privacy_by_brute_force(replace_plan, tmp_path):
    """Under replace, the loaded plan's applied operators (B over the full domain: one column per
    record value) cost at most beta for every pair of record values, and the accounted cost (a sum
    of per-measurement worst pairs) is never below the exact one."""
    path = tmp_path / "p.h5"
    save_marginal_plan(replace_plan, path)
    p = load_marginal_plan(path)
    assert p.budget.neighbours == "replace"
    ops = measurement_operators(p)
    sizes = p.schema.sizes
    b = np.vstack([m.operator[:, cell_index(sizes, m.attrs)] / math.sqrt(m.sigma2) for m in ops])
    norms = np.sum(b * b, axis=0)
    brute = float(np.max(norms[:, None] + norms[None, :] - 2 * b.T @ b))  # every (u, v) record pair
    accounted = applied_privacy_cost(ops, "replace")
    assert brute <= p.budget.beta
    assert accounted >= brute * (1 - 1e-12) and accounted <= p.budget.beta
    assert p.privacy_cost() == pytest.approx(accounted, rel=1e-12)
    # the same operators under add-remove would be accounted differently: the relation is read
    assert applied_privacy_cost(ops) != pytest.approx(accounted, rel=1e-6)


def test_replace_plan_is_the_add_remove_optimum_rescaled_and_uncertified(replace_plan):
    ar = plan(SCHEMA, MIXED, Budget.from_beta(0.8), target_gap=1e-3)
    ratio = replace_plan.total_variance / ar.total_variance
    assert ratio > 0 and replace_plan.shares == pytest.approx(ar.shares / ratio, rel=1e-9)
    assert replace_plan.lower_bound == 0.0 and replace_plan.gap == 1.0
    assert any("replace" in n for n in replace_plan.notes)


def test_replace_plan_measures_through_the_cli(cli, tmp_path):
    data, p, m, a = _data(tmp_path), tmp_path / "p.h5", tmp_path / "m.h5", tmp_path / "a.h5"
    r = cli(
        "plan",
        "--schema",
        SCHEMA,
        "--workload",
        WORKLOAD,
        "--method",
        "qsplus",
        "--neighbours",
        "replace",
        "--out",
        str(p),
        "--option",
        "target_gap=1e-3",
    )
    assert r.returncode == 0, r.stderr
    assert load_marginal_plan(p).budget.neighbours == "replace"
    assert cli("measure", "--plan", str(p), "--data", str(data), "--out", str(m), "--seed", "1").returncode == 0
    assert cli("reconstruct", "--plan", str(p), "--measurements", str(m), "--out", str(a)).returncode == 0
    # spending more than the replace budget is refused before any record is read
    with h5py.File(p, "r+") as f:
        f["shares"][...] = f["shares"][()] * 1.001
    m2 = tmp_path / "m2.h5"
    r = cli("measure", "--plan", str(p), "--data", str(data), "--out", str(m2), "--seed", "1")
    assert r.returncode == 2 and not m2.exists()
