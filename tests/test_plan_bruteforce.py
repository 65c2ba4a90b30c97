"""Brute force over the full domain: the predicted RMSE and privacy cost are the true ones."""

import numpy as np
import pytest

from bruteforce import full_privacy_gram, full_workload, pinv
from querysmasher.accounting import Budget
from querysmasher.plan import load_plan, make_plan, save_plan
from querysmasher.schema import parse_schema

SPECS = ["marginal:1,2", "prefix:1,2", "range:1+affine:2", "hybrid:1,2,3", "random:1,2", "abs:2+circular:1@2"]


@pytest.fixture(scope="module")
def schema(tmp_path_factory):
    p = tmp_path_factory.mktemp("s") / "small.yaml"
    p.write_text("A: 3\nB: {size: 4, kind: categorical}\nC: 2\nD: 3\n")
    return parse_schema(str(p))


# "qs-lowrank": qs with every several-term view solved in factored form (lowrank mechanisms)
METHODS = {"rp": ("rp", None), "wff": ("wff", None), "qs": ("qs", None), "rpplus": ("rpplus", None), "qs-lowrank": ("qs", {"lowrank": "always"})}


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("budget", [Budget.from_beta(1.0), Budget.from_rho(0.3), Budget.from_mu(2.0), Budget.from_epsilon_delta(1.0, 1e-6)])
def test_predicted_error_and_privacy_equal_the_explicit_mechanism(schema, spec, method, budget):
    name, options = METHODS[method]
    plan = make_plan(schema, spec, name, budget, solver_options=options)
    if method == "qs-lowrank" and spec in ("range:1+affine:2", "abs:2+circular:1@2"):
        assert any(s.mechanism.kind == "lowrank" for s in plan.solutions.values())
    x = full_privacy_gram(plan)
    assert np.diag(x).max() <= budget.beta * (1 + 1e-9)
    w, weights = full_workload(plan.workload)
    # Every workload query is estimable: its row lies in the range of X.
    xp = pinv(x)
    assert np.allclose(w @ xp @ x, w, atol=1e-8)
    variances = np.einsum("ij,jk,ik->i", w, xp, w)
    assert float(weights @ variances) == pytest.approx(plan.total_variance, rel=1e-8)
    empirical_rmse = np.sqrt(weights @ variances / weights.sum())
    assert empirical_rmse == pytest.approx(plan.rmse, rel=1e-8)


def test_plan_file_round_trip(tmp_path, schema):
    plan = make_plan(schema, "prefix:1,2+affine:2", "wff", Budget.from_rho(0.5))
    save_plan(plan, tmp_path / "p.h5")
    back = load_plan(tmp_path / "p.h5")
    assert back.rmse == pytest.approx(plan.rmse, rel=1e-14)
    assert back.views == plan.views and back.keys == plan.keys
    assert np.array_equal(back.allocation.sigma2, plan.allocation.sigma2)
    for k, s in plan.solutions.items():
        assert np.allclose(back.solutions[k].mechanism.dense_x(), s.mechanism.dense_x())
    assert back.budget == plan.budget


def test_plan_files_are_byte_identical(tmp_path, schema):
    plan = make_plan(schema, "prefix:1,2", "rp", Budget.from_beta(1.0))
    plan.phase_seconds.clear()  # wall-clock times are the only non-deterministic content
    save_plan(plan, tmp_path / "a.h5")
    save_plan(plan, tmp_path / "b.h5")
    assert (tmp_path / "a.h5").read_bytes() == (tmp_path / "b.h5").read_bytes()


def test_lowrank_plan_file_round_trip(tmp_path, schema):
    plan = make_plan(schema, "range:1+affine:2", "qs", Budget.from_rho(0.5), solver_options={"lowrank": "always"})
    save_plan(plan, tmp_path / "p.h5")
    back = load_plan(tmp_path / "p.h5")
    kinds = {k: s.mechanism.kind for k, s in back.solutions.items()}
    assert "lowrank" in kinds.values()
    for k, s in plan.solutions.items():
        assert kinds[k] == s.mechanism.kind
        for a, b in zip(back.solutions[k].mechanism.mats, s.mechanism.mats):
            assert np.array_equal(a, b)
    assert back.rmse == pytest.approx(plan.rmse, rel=1e-14)
