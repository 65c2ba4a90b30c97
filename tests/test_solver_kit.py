"""The solver contract kit (querysmasher.testing) on every built-in solver, and on broken solvers
it must reject (a kit that cannot fail checks nothing)."""

import dataclasses

import numpy as np
import pytest

from querysmasher.solvers import get_solver
from querysmasher.testing import (
    SMALL_WORKLOADS,
    SolverCheckError,
    check_monte_carlo,
    check_privacy,
    check_solver,
    check_view_solutions,
    plan_with,
)

METHODS = ["rp", "wff", "qs", "rpplus"]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("spec", SMALL_WORKLOADS)
def test_builtin_solvers_meet_the_contract(method, spec):
    plan = plan_with(method, spec)
    assert check_view_solutions(plan) == len(plan.solutions) > 0
    check_privacy(plan)


@pytest.mark.parametrize("method", METHODS)
def test_builtin_solvers_monte_carlo(method):
    plan = plan_with(method, "range:1+affine:2")
    assert check_monte_carlo(plan, draws=1000) == pytest.approx(plan.rmse, rel=0.05)


def test_check_solver_summary():
    assert check_solver("rp", workloads=("prefix:1,2",), draws=0).startswith("rp: 1 workloads")


class _Broken:
    """RP with one defect injected into its solutions."""

    name = "broken"

    def __init__(self, defect):
        self.inner, self.defect = get_solver("rp"), defect

    def solve(self, gram, store):
        sol = self.inner.solve(gram, store)
        mech = sol.mechanism
        if self.defect == "cost" and mech.cells > 1:  # X scaled up: costs more than 1
            mech = dataclasses.replace(mech, mats=(mech.mats[0] * 1.5,) + mech.mats[1:])
            return dataclasses.replace(sol, mechanism=mech, loss=sol.loss / 1.5)
        if self.defect == "loss":  # under-reported loss
            return dataclasses.replace(sol, loss=sol.loss * 0.9)
        if self.defect == "bound":  # a "lower bound" above the loss
            return dataclasses.replace(sol, lower_bound=sol.loss * 1.01)
        if self.defect == "range" and mech.cells > 1:  # X keeps one residual direction only: rank 1
            u = np.zeros(mech.sizes[0])
            u[:2] = 1.0, -1.0
            m0 = np.outer(u, u)
            return dataclasses.replace(sol, mechanism=dataclasses.replace(mech, mats=(m0,) + mech.mats[1:]))
        if self.defect == "identity":  # measures the whole marginal, not only its residual part
            mech = dataclasses.replace(mech, mats=tuple(np.eye(n) for n in mech.sizes))
            return dataclasses.replace(sol, mechanism=mech, loss=gram.trace)
        return sol


@pytest.mark.parametrize(
    "defect, message",
    [
        ("cost", "privacy cost"),
        ("loss", "reported loss"),
        ("bound", "lower_bound"),
        ("range", "range of X"),
        ("identity", "residual subspace"),
    ],
)
def test_kit_rejects_broken_solvers(defect, message):
    with pytest.raises(SolverCheckError, match=message):
        check_solver(lambda: _Broken(defect), workloads=("prefix:1,2",), draws=0)


def test_monte_carlo_rejects_wrong_variances_and_bias(monkeypatch):
    # The kit reads predicted variances from querysmasher.variances (their one home), so that is
    # where a wrong prediction is planted.
    from querysmasher import data, variances

    plan = plan_with("rp", "prefix:1")
    check_monte_carlo(plan, draws=500)
    real = variances.view_variances
    monkeypatch.setattr(variances, "view_variances", lambda p, v: real(p, v) * 0.8)
    with pytest.raises(SolverCheckError, match="variance"):
        check_monte_carlo(plan, draws=500)
    monkeypatch.setattr(variances, "view_variances", real)
    real_marginal = data.marginal  # what measure_iter applies to the records
    monkeypatch.setattr(data, "marginal", lambda *a: real_marginal(*a) + 3.0)
    with pytest.raises(SolverCheckError, match="biased"):
        check_monte_carlo(plan, draws=500)


@pytest.mark.parametrize("spec", SMALL_WORKLOADS)
def test_the_kits_explicit_matrices_are_the_hand_written_ones(spec):
    """The kit's full-domain workload and marginal maps (built with the library's families and
    Kronecker helper) are the tests' own, built from hand-written 1-D matrices."""
    import bruteforce

    from querysmasher import testing
    from querysmasher.workload import parse_workload

    w = parse_workload(spec, testing.SMALL_SCHEMA)
    (rows, weights), (want_rows, want_weights) = testing.full_workload(w), bruteforce.full_workload(w)
    assert np.array_equal(rows, want_rows) and np.array_equal(weights, want_weights)
    for v in w.views:
        assert np.array_equal(
            testing.marginal_map(w.schema.sizes, v.attrs), bruteforce.marginal_map(w.schema.sizes, v.attrs)
        )
