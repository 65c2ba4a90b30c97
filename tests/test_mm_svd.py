"""The exact matrix mechanism (mm) and the SVD bound: issue 13's figures, the orderings
SVD bound <= mm <= qs, the marginal closed form, privacy by brute force, and measure/reconstruct."""

import math

import numpy as np
import pytest
from bruteforce import (
    definition_1d,
    explicit_variances,
    full_privacy_gram,
    full_workload,
    marginal_map,
    pinv,
    true_histogram,
    view_queries,
)
from scipy.stats import chi2

from querysmasher.accounting import Budget
from querysmasher.errors import InputError
from querysmasher.measure import measure
from querysmasher.planfile import load_plan, save_plan
from querysmasher.planning import make_plan
from querysmasher.reconstruct import query_variances, reconstruct, view_variances
from querysmasher.schema import parse_schema
from querysmasher.solvers.sdp import dual_bound
from querysmasher.svd_bound import explicit_svd_bound, marginal_svd_bound, svd_bound
from querysmasher.workload import parse_workload

BETA1 = Budget.from_beta(1.0)


# issue 13: RMSE at beta = 1 of 1-D prefix (qs, certified mm, SVD bound)
@pytest.mark.parametrize("n, qs_rmse, mm_rmse, svd_rmse", [(10, 1.6188, 1.5561, 1.4979), (128, 2.4111, 2.3110, 2.2544)])
def test_issue_13_table_1d_prefix(n, qs_rmse, mm_rmse, svd_rmse):
    mm = make_plan(f"synthetic:n={n},d=1", "prefix:1", "mm", BETA1, solver_options={"target_gap": 1e-6})
    qs = make_plan(f"synthetic:n={n},d=1", "prefix:1", "qs", BETA1)
    assert mm.certified and mm.gap <= 1e-6
    assert round(mm.rmse, 4) == mm_rmse
    assert round(math.sqrt(mm.lower_bound / n), 4) == mm_rmse  # the certificate, not only the primal
    assert round(qs.rmse, 4) == qs_rmse
    assert round(math.sqrt(mm.svd_bound / n), 4) == svd_rmse
    # the bound from its definition: (sum of the singular values of the n x n prefix matrix)^2 / n
    assert mm.svd_bound == pytest.approx(
        np.linalg.svd(definition_1d("prefix", n), compute_uv=False).sum() ** 2 / n, rel=1e-9
    )
    assert mm.summary()["svd_bound_rmse"] == pytest.approx(math.sqrt(mm.svd_bound / n))


FITTING = [
    "prefix:1,2",
    "range:1+affine:2",
    "abs:2",
    "marginal:1,2",
    "circular:1",
    "hybrid:1,2,3",
    "random:2",
    "marginal:2+abs:2@2",
    "prefix:1@3+range:2",
]


@pytest.mark.parametrize("spec", FITTING)
def test_svd_bound_below_mm_below_qs(small_schema, spec):
    mm = make_plan(small_schema, spec, "mm", BETA1)
    qs = make_plan(small_schema, spec, "qs", BETA1)
    assert mm.certified
    assert mm.total_variance <= qs.total_variance * (1 + 1e-12)
    assert mm.svd_bound <= mm.total_variance * (1 + 1e-12)
    # (tr (W^T W)^(1/2))^2 / N from the explicit weighted workload, whichever method planned it
    g = _explicit_gram(mm.workload)
    e = np.linalg.eigvalsh(g)
    explicit = float(np.sqrt(e[e > 1e-9 * e.max()]).sum()) ** 2 / g.shape[0]
    assert mm.svd_bound == pytest.approx(explicit, rel=1e-9)
    assert qs.svd_bound == pytest.approx(explicit, rel=1e-9)
    # it is the full-domain dual at the uniform multiplier
    assert dual_bound(g, np.ones(g.shape[0])) == pytest.approx(explicit, rel=1e-9)


def test_mm_beats_the_residual_family_on_prefix(small_schema):
    """Where the full-domain optimum leaves the residual family (issue 13), mm is strictly better."""
    mm = make_plan("synthetic:n=10,d=2", "prefix:1,2", "mm", BETA1)
    qs = make_plan("synthetic:n=10,d=2", "prefix:1,2", "qs", BETA1)
    assert mm.total_variance < qs.lower_bound * (1 - 1e-3)


def _explicit_gram(workload):
    w, weights = full_workload(workload)
    return w.T @ (weights[:, None] * w)


@pytest.mark.parametrize(
    "spec", ["marginal:1", "marginal:2", "marginal:1,2,3", "marginal:2@3+marginal:1", "marginal:4", "hybrid:2"]
)
def test_marginal_closed_form_equals_explicit_bound(spec, tmp_path):
    p = tmp_path / "cat.yaml"
    p.write_text(
        "A: {size: 3, kind: categorical}\nB: {size: 4, kind: categorical}\n"
        "C: {size: 2, kind: categorical}\nD: {size: 3, kind: categorical}\n"
    )
    w = parse_workload(spec, parse_schema(str(p)))
    closed = marginal_svd_bound(w)
    e = np.linalg.eigvalsh(_explicit_gram(w))
    explicit = float(np.sqrt(np.clip(e, 0, None)[e > 1e-9 * e.max()]).sum()) ** 2 / len(e)
    assert closed == pytest.approx(explicit, rel=1e-10)
    assert closed == pytest.approx(explicit_svd_bound(w), rel=1e-10)


@pytest.mark.parametrize(
    "schema_spec, spec", [("cps", "marginal:1,2"), ("adult", "marginal:1,2"), ("adult", "marginal:3")]
)
def test_marginal_closed_form_at_scale_equals_the_marginal_optimum(schema_spec, spec):
    """Marginal workloads are invariant under permuting each attribute's values, which acts
    transitively on cells: the uniform dual multiplier is optimal, so the SVD bound is attained, and
    RP (optimal for marginals) must equal it."""
    rp = make_plan(schema_spec, spec, "rp", BETA1)
    assert rp.svd_bound == pytest.approx(rp.total_variance, rel=1e-9)
    assert svd_bound(parse_workload(spec, parse_schema(schema_spec))) == pytest.approx(rp.total_variance, rel=1e-9)


def test_no_svd_bound_when_not_computable():
    p = make_plan("synthetic:n=10,d=5", "prefix:1", "rp", BETA1)
    assert p.svd_bound is None and "svd_bound" not in p.summary()


@pytest.mark.parametrize("spec", ["prefix:1,2", "range:1+affine:2"])
@pytest.mark.parametrize("budget", [BETA1, Budget.from_rho(0.3)])
def test_mm_privacy_and_error_by_brute_force(small_schema, spec, budget):
    plan = make_plan(small_schema, spec, "mm", budget)
    (s2,) = plan.allocation.sigma2
    x = plan.solutions[plan.keys[0]].mechanism.dense_x() / s2  # the privacy Gram applied to the histogram
    assert float(np.diag(x).max()) <= budget.beta * (1 + 1e-12)
    assert float(np.diag(x).max()) >= budget.beta * (1 - 1e-9)
    w, weights = full_workload(plan.workload)
    xp = pinv(x)
    assert np.allclose(w @ xp @ x, w, atol=1e-7)  # every query is answerable
    assert float(np.einsum("i,ij,jk,ik->", weights, w, xp, w)) == pytest.approx(plan.total_variance, rel=1e-7)


def test_mm_refuses_large_domains_in_one_line(cli):
    with pytest.raises(InputError, match="10000 cells"):
        make_plan("synthetic:n=10,d=4", "prefix:1", "mm", BETA1)
    r = cli("plan", "--schema", "synthetic:n=10,d=4", "--workload", "prefix:1", "--method", "mm")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "mm" in r.stderr


DRAWS = 2000


@pytest.mark.parametrize("spec", ["prefix:1,2", "range:1+affine:2", "marginal:2+abs:2@2"])
def test_mm_measure_reconstruct_monte_carlo(spec, tmp_path, tiny_schema, tiny_records):
    schema, records = tiny_schema, tiny_records
    plan = make_plan(schema, spec, "mm", Budget.from_rho(0.5))
    save_plan(plan, tmp_path / "p.h5")
    loaded = load_plan(tmp_path / "p.h5")
    assert loaded.method == "mm" and loaded.total_variance == pytest.approx(plan.total_variance, rel=1e-12)
    rec = reconstruct(loaded, measure(loaded, records, np.random.default_rng(5), draws=DRAWS))
    full = true_histogram(records.codes, schema.sizes)
    xp = pinv(full_privacy_gram(loaded))
    total = 0.0
    for v in plan.workload.views:
        truth = view_queries(plan.workload, v) @ (marginal_map(schema.sizes, v.attrs) @ full)
        a = rec.view_answers(v)
        var = view_variances(loaded, v)
        assert np.allclose(var, explicit_variances(loaded, v, xp), rtol=1e-8)
        assert np.allclose(query_variances(loaded, v.attrs, view_queries(plan.workload, v)), var, rtol=1e-8)
        assert np.all(np.abs(a.mean(axis=1) - truth) <= 4.5 * np.sqrt(var / DRAWS))
        m = len(var) * len(plan.workload.views)
        ratio = a.var(axis=1, ddof=1) / var
        lo, hi = chi2.ppf(1e-3 / m, DRAWS - 1) / (DRAWS - 1), chi2.ppf(1 - 1e-3 / m, DRAWS - 1) / (DRAWS - 1)
        assert np.all((ratio > lo) & (ratio < hi))
        total += v.weight * float(var.sum())
    assert total == pytest.approx(plan.total_variance, rel=1e-6)
