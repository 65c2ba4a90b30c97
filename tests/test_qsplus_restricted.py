"""The restricted descent of qsplus (querysmasher.marginal_family.restricted): restricting a view's top
to its workload's span keeps the objective at no more cost, the projected certificate equals the cell
form, the descent's bound bounds the cell-basis descent's optimum and its point reaches it, and the
planner's "restricted" method plans, measures and reconstructs like every other."""

import math

import numpy as np
import pytest

from querysmasher.accounting import Budget
from querysmasher.errors import InputError
from querysmasher.fulldomain import marginalise
from querysmasher.marginal_family import (
    applied_privacy_cost,
    build_problem,
    measure_marginals,
    measurement_operators,
    plan,
    reconstruct,
    restricted,
)
from querysmasher.marginal_family.certificate import maxcut_upper, sdp_upper
from querysmasher.marginal_family.gls import view_queries
from querysmasher.planners.residual import plan_residual
from querysmasher.schema import parse_schema
from querysmasher.solvers.qs import QSSolver
from querysmasher.workload import parse_workload


@pytest.fixture
def skewed(tmp_path):
    p = tmp_path / "schema.yaml"
    p.write_text("a: 3\nb: 4\nc: 2\n")
    return str(p)


def _problem(schema: str, workload: str):
    w = parse_workload(workload, parse_schema(schema))
    qs = plan_residual(w, "qs", QSSolver(), Budget.from_beta(1.0))
    return w, qs, build_problem(w, qs)


@pytest.mark.parametrize("workload", ["prefix:1+affine:2", "abs:2", "prefix:1,2+affine:2"])
def test_the_restriction_keeps_the_objective_at_no_more_cost(skewed, workload):
    _, _, pr = _problem(skewed, workload)
    rp, kept = restricted.restrict(pr)
    rng = np.random.default_rng(1)
    ys, yr = [], []
    for v, rt in zip(pr.views, kept):
        a = rng.standard_normal((v.cells, v.cells))
        y = a @ a.T + 0.05 * np.eye(v.cells)
        ys.append(y)
        yr.append(restricted.restricted_gram(v, rt, y))
    full = pr.evaluate(ys)
    red = rp.evaluate(yr)
    assert red.f == pytest.approx(full.f, rel=1e-9)
    for k in range(len(ys)):
        assert np.all(np.diag(rp.cell_gram(k, yr[k])) <= np.diag(pr.cell_gram(k, ys[k])) + 1e-9)
    # the restricted gradient is the full one read in the kept coordinates (finite differences)
    d = rng.standard_normal(yr[0].shape)
    d = d + d.T
    h = 1e-6
    fd = (rp.evaluate([yr[0] + h * d, *yr[1:]]).f - rp.evaluate([yr[0] - h * d, *yr[1:]]).f) / (2 * h)
    assert fd == pytest.approx(float(np.sum(red.grads[0] * d)), rel=1e-5)
    if workload == "prefix:1+affine:2":  # the affine pairs span part of their tops only
        assert restricted.kept_fraction(pr) < 1


def test_the_projected_certificate_equals_the_cell_form():
    rng = np.random.default_rng(2)
    n, r = 30, 8
    basis = np.linalg.qr(rng.standard_normal((n, r)))[0]
    a = rng.standard_normal((r, r))
    dr = a @ a.T
    b = rng.standard_normal((r, r))
    s = b @ b.T
    d, c = basis @ dr @ basis.T, basis @ s @ basis.T
    cell = sdp_upper(d, c, basis=basis)
    proj = sdp_upper(None, s, basis=basis, projected=dr)
    assert proj == pytest.approx(cell, rel=1e-9)
    start = np.full(n, float(np.trace(dr)) / n)
    assert maxcut_upper(None, start, basis=basis, projected=dr) == pytest.approx(
        maxcut_upper(d, start, basis=basis), rel=1e-6
    )


def test_the_restricted_bound_brackets_the_cell_basis_optimum(skewed):
    """Two independent optimisers of the same family: each one's bound is below the other's point."""
    _, qs, pr = _problem(skewed, "prefix:1+affine:2")
    cell = plan(skewed, "prefix:1+affine:2", target_gap=1e-5, optimiser_options={"method": "lbfgs"})
    rp, kept = restricted.restrict(pr)
    start = restricted.restricted_start(pr, rp, kept, qs)
    assert start.ys[0].shape[0] < pr.views[0].cells
    assert rp.evaluate(start.ys, start.tau, want_grad=False).f <= qs.total_variance * (1 + 1e-6)
    best = restricted.descend(rp, start, max_seconds=120, target_gap=1e-4)
    assert 0 < best.lower_bound <= best.objective
    assert best.lower_bound <= cell.total_variance * (1 + 1e-9)
    assert cell.lower_bound <= best.objective * (1 + 1e-9)
    assert best.objective == pytest.approx(cell.total_variance, rel=1e-3)
    assert best.gap <= 1e-3
    f, factors, shares = restricted.cell_factors(pr, rp, best)
    assert f <= best.objective * (1 + 1e-7)  # the filled diagonal never raises the objective
    assert float(shares.sum()) + best.tau == pytest.approx(1.0, rel=1e-9)
    for fa in factors:
        assert np.allclose(np.einsum("ij,ij->i", fa, fa), 1.0)


def test_the_restricted_method_plans_measures_and_reconstructs(skewed):
    p = plan(
        skewed, "prefix:1+affine:2", Budget.from_beta(2.0), target_gap=1e-3, optimiser_options={"method": "restricted"}
    )
    assert p.total_variance <= p.qs_total_variance * (1 + 1e-9)
    assert 0 < p.lower_bound <= p.total_variance and p.gap <= 1e-3
    ops = measurement_operators(p)
    assert applied_privacy_cost(ops) == pytest.approx(2.0, rel=1e-3) and applied_privacy_cost(ops) <= 2.0
    truth_x = np.arange(24, dtype=float)
    ys = measure_marginals(p, lambda a: marginalise(truth_x, p.schema.sizes, a).ravel(), lambda clean, s2: clean)
    ans = reconstruct(p, ys)
    for v, got in zip(p.workload.views, ans.answers):
        assert np.allclose(got, view_queries(p.workload, v) @ marginalise(truth_x, p.schema.sizes, v.attrs).ravel())


def test_the_restricted_method_refuses_a_tied_problem():
    with pytest.raises(InputError, match="untied"):
        plan("synthetic:n=3,d=3", "affine:2", optimiser_options={"method": "restricted"})


def test_auto_restricts_only_large_untied_problems(skewed):
    from querysmasher.marginal_family.planner import _restricted_pays

    _, _, small = _problem(skewed, "prefix:1+affine:2")
    assert not _restricted_pays(small)  # views of at most 12 cells: the cell-basis descent certifies them
    assert math.isfinite(restricted.kept_fraction(small))


def test_auto_keeps_many_large_views_of_an_uneven_schema_residual(tmp_path):
    """ "auto" without max_view_cells: on a non-uniform schema with more than AUTO_LARGE_VIEWS views
    above 400 cells those keep their qs mechanisms (noted, recorded in the plan); a uniform schema
    (the symmetric reduction's ground) and a workload whose views are all large are left whole."""
    from querysmasher.marginal_family.planner import AUTO_LARGE_VIEWS, _auto_max_view_cells

    p = tmp_path / "schema.yaml"
    p.write_text("a: 21\nb: 21\nc: 21\nd: 20\ne: 3\n")  # six pairs of 420..441 cells, four of at most 63
    # what "auto" chooses is the point, not how far the descent gets: a few seconds of it
    out = plan(str(p), "affine:2", target_gap=1e-2, max_seconds=2)
    assert AUTO_LARGE_VIEWS < 6
    assert sorted(out.views) == [(0, 4), (1, 4), (2, 4), (3, 4)]
    assert out.problem_options["max_view_cells"] == 400
    assert any("6 of the 10 views have more than 400 cells" in n for n in out.notes)
    assert any("restricted descent" in n for n in out.notes)  # the kept views' path since Newton's last mile
    assert out.rmse <= out.qs_rmse and abs(out.privacy_cost() - 1.0) < 1e-9
    notes = []
    uniform = parse_workload("affine:2", parse_schema("synthetic:n=21,d=4"))
    assert _auto_max_view_cells(uniform, 2, notes) is None and not notes
    p.write_text("a: 21\nb: 21\nc: 21\nd: 20\n")  # every view large: none would be left
    assert _auto_max_view_cells(parse_workload("affine:2", parse_schema(str(p))), 2, notes) is None and not notes
