"""Publishable tables: per-cell estimates only where estimable, every row with its standard error."""

import json

import numpy as np
import pandas as pd
import pytest
from bruteforce import full_privacy_gram, gls_histogram, marginal_map, pinv, view_queries

from querysmasher.accounting import Budget
from querysmasher.data import validate_records
from querysmasher.measure import make_rng, measure
from querysmasher.planning import make_plan
from querysmasher.reconstruct import reconstruct, table_data
from querysmasher.residualkind import cells_estimable
from querysmasher.tablefiles import write_table_files


def write_tables(folder, rec, **options):
    """The publishable files of a reconstruction, as a release writes them."""
    tables, answers, total = table_data(rec)
    return write_table_files(folder, rec.plan, tables, answers, total=total, **options)


def _rec(small_schema, spec, method):
    plan = make_plan(small_schema, spec, method, Budget.from_beta(1.0))
    codes = np.random.default_rng(1).integers(0, small_schema.sizes, (200, len(small_schema)))
    records = validate_records(pd.DataFrame(codes, columns=small_schema.names), small_schema)
    rng, seeded = make_rng(0)
    meas = measure(plan, records, rng, seeded=seeded)
    return plan, reconstruct(plan, meas), meas


@pytest.mark.parametrize(
    "spec, method", [("prefix:1,2", "rp"), ("marginal:2", "qs"), ("range:1+affine:2", "wff"), ("hybrid:1,2", "rpplus")]
)
def test_published_tables_are_the_brute_force_least_squares_ones(tmp_path, small_schema, spec, method):
    """Every published cell and answer is the full-domain least-squares estimate from the noisy
    measurements (numpy's lstsq over the measured operators) with the explicit estimator's
    standard error; the post-processed tables sum to the estimated total."""
    plan, rec, meas = _rec(small_schema, spec, method)
    index = write_tables(tmp_path, rec, postprocessed=True)
    xp = pinv(full_privacy_gram(plan))
    x_hat = gls_histogram(plan, meas)
    written = [t for t in index["tables"] if t["file"]]
    assert written
    for t in written:
        attrs = tuple(small_schema.index(n) for n in t["view"])
        frame = pd.read_csv(tmp_path / t["file"])
        assert list(frame.columns) == list(t["view"]) + ["estimate", "std_error", "lower", "upper"]
        m = marginal_map(small_schema.sizes, attrs)
        want = np.sqrt(np.einsum("ij,jk,ik->i", m, xp, m))
        assert np.allclose(frame["std_error"], want, rtol=1e-6)
        assert np.allclose(frame["estimate"], m @ x_hat, rtol=1e-6, atol=1e-6)
    assert len(index["answers"]) == len(plan.workload.views)
    for f, v in zip(index["answers"], plan.workload.views):
        a = pd.read_csv(tmp_path / f["file"])
        q = view_queries(plan.workload, v) @ marginal_map(small_schema.sizes, v.attrs)
        assert np.allclose(a["answer"], q @ x_hat, rtol=1e-6, atol=1e-6)
        assert np.allclose(a["std_error"], np.sqrt(np.einsum("ij,jk,ik->i", q, xp, q)), rtol=1e-6)
    totals = {int(pd.read_csv(tmp_path / p)["count"].sum()) for p in index["postprocessed"]}
    assert totals == {
        int(round(max(float(x_hat.sum()), 0.0)))
    }  # every post-processed table sums to the estimated total
    for p in index["postprocessed"]:
        c = pd.read_csv(tmp_path / p)["count"]
        assert (c >= 0).all() and c.dtype.kind == "i"
    assert json.loads((tmp_path / "tables.json").read_text()) == index


def test_rank_deficient_views_get_no_per_cell_table(tmp_path, small_schema):
    plan, rec, _ = _rec(small_schema, "abs:2", "qs")
    ok, why = cells_estimable(plan, (0, 1))
    assert not ok and "projection" in why
    index = write_tables(tmp_path, rec)
    two_way = [t for t in index["tables"] if len(t["view"]) == 2]
    omitted = [t for t in two_way if t["file"] is None]
    assert omitted and all("projection" in t["omitted"] for t in omitted)
    for t in two_way:  # a file exactly for the estimable ones
        attrs = tuple(small_schema.index(n) for n in t["view"])
        assert (t["file"] is not None) == cells_estimable(plan, attrs)[0]
        assert (tmp_path / ("__".join(t["view"]) + ".csv")).exists() == (t["file"] is not None)
    assert len(index["answers"]) == len(plan.workload.views)  # the workload answers are always there


def test_a_full_domain_plan_publishes_the_tables_its_mechanism_reaches(tmp_path):
    """mm plans (one mechanism over the whole domain) publish every workload view's table with its
    standard errors (they were all omitted as 'residual view (total) is not measured'); a table
    outside the mechanism's range is omitted, saying so."""
    import json

    import pandas as pd

    from querysmasher.cli import main
    from querysmasher.fulldomain import marginal_estimable
    from querysmasher.planfiles import load_any_plan
    from querysmasher.variances import view_variances
    from querysmasher.workload import WorkloadView

    pd.DataFrame(np.random.default_rng(0).integers(0, 3, (100, 2)), columns=["a0", "a1"]).to_csv(
        tmp_path / "d.csv", index=False
    )
    for workload, published in (
        ("prefix:1+marginal:2", {"a0.csv", "a1.csv", "a0__a1.csv"}),
        ("marginal:1", {"a0.csv", "a1.csv"}),
    ):
        plan, meas, out = tmp_path / f"{workload}.h5", tmp_path / f"{workload}-m.h5", tmp_path / f"{workload}-t"
        assert (
            main(
                [
                    "plan",
                    "--schema",
                    "synthetic:n=3,d=2",
                    "--workload",
                    workload,
                    "--method",
                    "mm",
                    "--out",
                    str(plan),
                    "-q",
                ]
            )
            == 0
        )
        assert (
            main(
                [
                    "measure",
                    "--plan",
                    str(plan),
                    "--data",
                    str(tmp_path / "d.csv"),
                    "--out",
                    str(meas),
                    "--seed",
                    "1",
                    "-q",
                ]
            )
            == 0
        )
        assert (
            main(
                [
                    "reconstruct",
                    "--plan",
                    str(plan),
                    "--measurements",
                    str(meas),
                    "--out",
                    str(tmp_path / "a.h5"),
                    "--csv",
                    str(out),
                    "-q",
                ]
            )
            == 0
        )
        index = json.loads((out / "tables.json").read_text())
        assert {t["file"] for t in index["tables"] if t["file"]} == published
        p = load_any_plan(plan)
        table = pd.read_csv(out / "a0.csv")
        want = view_variances(p, WorkloadView((0,), "marginal", 1.0, ("marginal",)))
        assert np.allclose(table.std_error**2, want, rtol=1e-9)
    # an mm plan for the 1-way marginals alone does not reach the 2-way cells (rank 5 of 9)
    ok, why = marginal_estimable(load_any_plan(tmp_path / "marginal:1.h5"), (0, 1))
    assert not ok and "projection" in why
