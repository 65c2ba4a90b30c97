"""RP+ (method ``rpplus``): the paper's Table 4 figures, its bases, and brute force over the full domain."""

import numpy as np
import pytest
from bruteforce import definition_1d, pinv

from querysmasher.accounting import Budget
from querysmasher.decompose import decompose
from querysmasher.errors import InputError
from querysmasher.planners import residual as plan_module
from querysmasher.planning import make_plan
from querysmasher.schema import parse_schema
from querysmasher.solvers import mechanism_loss
from querysmasher.solvers.rpplus import RPPlusSolver, rpplus_factor
from querysmasher.workload import parse_workload

BETA1 = Budget.from_beta(1.0)


# Table 4 (d = 40, beta = 1): RP+ column
TABLE4 = [(10, "prefix:1,2", 36.23), (20, "prefix:1,2", 52.63), (10, "range:1,2", 48.95), (20, "range:1,2", 75.44)]


@pytest.mark.parametrize("n, spec, expected", TABLE4)
def test_rpplus_is_within_two_percent_of_table_4(n, spec, expected):
    p = make_plan(f"synthetic:n={n},d=40", spec, "rpplus", BETA1)
    assert abs(p.rmse / expected - 1) <= 0.02


@pytest.mark.parametrize("n, expected", [(10, 23.48), (20, 25.70)])
def test_rpplus_equals_rp_and_table_4_on_marginals(n, expected):
    p = make_plan(f"synthetic:n={n},d=40", "marginal:1,2", "rpplus", BETA1)
    assert p.rmse == pytest.approx(make_plan(f"synthetic:n={n},d=40", "marginal:1,2", "rp", BETA1).rmse, rel=1e-9)
    assert round(p.rmse, 2) == expected


def test_workload_bases_follow_the_attribute_workload():
    """basis="workload" optimises range attributes for range queries: better than the prefix basis,
    and the same basis on prefix workloads."""
    s = "synthetic:n=10,d=40"
    wl = make_plan(s, "range:1,2", "rpplus", BETA1, solver_options={"basis": "workload"}).rmse
    assert wl < 0.9 * make_plan(s, "range:1,2", "rpplus", BETA1).rmse
    assert make_plan(s, "prefix:1,2", "rpplus", BETA1, solver_options={"basis": "workload"}).rmse == pytest.approx(
        make_plan(s, "prefix:1,2", "rpplus", BETA1).rmse, rel=1e-9
    )


def test_workload_basis_is_built_from_the_weighted_attribute_grams():
    """Each term touching the attribute counts once, with its weight; the total is stacked with weight 1."""
    d = decompose(parse_workload("prefix:1@3+range:1,2", parse_schema("synthetic:n=5,d=3")))
    solver = RPPlusSolver(basis="workload")
    solver.prepare(d)
    p, r = (q.T @ q for q in (definition_1d("prefix", 5), definition_1d("range", 5)))
    expected = rpplus_factor(3 * p + r)
    assert all(np.allclose(x, expected, atol=1e-8) for x in solver.factors.values())
    assert not np.allclose(rpplus_factor(p + r / 3), expected, atol=1e-4)  # the scale matters


@pytest.mark.parametrize("basis", ["prefix", "workload"])
@pytest.mark.parametrize(
    "spec",
    ["prefix:1,2", "hybrid:1,2", "range:1+affine:2", "abs:2+circular:1@2", "random:1,2", "marginal:1+prefix:2@3"],
)
def test_bases_lie_in_the_residual_space_and_losses_are_exact(basis, spec):
    d = decompose(parse_workload(spec, parse_schema("synthetic:n=5,d=3")))
    solver = RPPlusSolver(basis=basis)
    solver.prepare(d)
    for x in solver.factors.values():
        assert np.diag(x).max() == pytest.approx(1.0, rel=1e-12)
        assert np.allclose(x @ np.ones(len(x)), 0, atol=1e-10)  # rows of R_i sum to zero
        assert np.linalg.matrix_rank(x, tol=1e-9) == len(x) - 1  # n - 1 independent rows
    for g in d.distinct().values():
        sol = solver.solve(g, d.store)
        assert sol.mechanism.max_diag() <= 1 + 1e-12
        assert sol.loss == pytest.approx(mechanism_loss(g, d.store, sol.mechanism), rel=1e-9)  # dense path
        assert sol.loss == pytest.approx(float(np.sum(g.dense(d.store) * pinv(sol.mechanism.dense_x()))), rel=1e-9)


@pytest.mark.parametrize("spec", ["prefix:1,2", "range:1,2", "prefix:1+affine:2", "prefix:1+abs:2", "hybrid:1,2,3"])
def test_rpplus_never_beats_the_certified_qs_bound(spec):
    """RP+ is one residual-respecting mechanism per view, so QS's certified bound holds for it."""
    s = "synthetic:n=5,d=4"
    qs = make_plan(s, spec, "qs", BETA1)
    assert qs.certified
    assert make_plan(s, spec, "rpplus", BETA1).total_variance >= qs.lower_bound * (1 - 1e-12)


def test_solve_needs_prepare_and_the_basis_is_checked():
    d = decompose(parse_workload("prefix:1", parse_schema("synthetic:n=4,d=2")))
    with pytest.raises(RuntimeError, match="prepare"):
        RPPlusSolver().solve(d.grams[(0,)], d.store)
    with pytest.raises(InputError, match="basis"):
        RPPlusSolver(basis="range")


def test_views_sharing_a_gram_but_not_the_bases_are_refused(tmp_path):
    """Views with equal Grams are solved once; a categorical (Sub) and a numeric (prefix basis)
    attribute in the same position would get the wrong mechanism, so prepare refuses."""
    p = tmp_path / "mixed.yaml"
    p.write_text("A: {size: 3, kind: categorical}\nB: 3\nC: {size: 3, kind: categorical}\n")
    with pytest.raises(InputError, match="different RP\\+ bases"):
        make_plan(parse_schema(str(p)), "hybrid:1+affine:2", "rpplus", BETA1)


def test_solve_distinct_with_a_prepared_solver():
    """The route the plan takes, used directly (what the CLI will do once rpplus is registered)."""
    d = decompose(parse_workload("prefix:1,2", parse_schema("synthetic:n=10,d=40")))
    solver = RPPlusSolver()
    solver.prepare(d)
    plan = plan_module.assemble_plan(d, plan_module.solve_distinct(d.distinct(), d.store, solver), "rpplus", BETA1)
    assert plan.rmse == pytest.approx(make_plan("synthetic:n=10,d=40", "prefix:1,2", "rpplus", BETA1).rmse, rel=1e-12)
