"""Brute force over the full domain: the predicted RMSE and privacy cost are the true ones."""

import numpy as np
import pytest
from bruteforce import applied_full_privacy_gram, cost, full_privacy_gram, full_workload, pinv

from querysmasher.accounting import Budget
from querysmasher.planfile import load_plan, save_plan
from querysmasher.planning import make_plan

SPECS = ["marginal:1,2", "prefix:1,2", "range:1+affine:2", "hybrid:1,2,3", "random:1,2", "abs:2+circular:1@2"]


# "qs-lowrank": qs with every several-term view solved in factored form (lowrank mechanisms)
METHODS = {
    "rp": ("rp", None),
    "wff": ("wff", None),
    "qs": ("qs", None),
    "rpplus": ("rpplus", None),
    "qs-lowrank": ("qs", {"lowrank": "always"}),
}


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize(
    "budget", [Budget.from_beta(1.0), Budget.from_rho(0.3), Budget.from_mu(2.0), Budget.from_epsilon_delta(1.0, 1e-6)]
)
def test_predicted_error_and_privacy_equal_the_explicit_mechanism(small_schema, spec, method, budget):
    name, options = METHODS[method]
    plan = make_plan(small_schema, spec, name, budget, solver_options=options)
    if method == "qs-lowrank" and spec in ("range:1+affine:2", "abs:2+circular:1@2"):
        assert any(s.mechanism.kind == "lowrank" for s in plan.solutions.values())
    x = full_privacy_gram(plan)
    assert np.diag(x).max() <= budget.beta * (1 + 1e-9)
    # The stored Grams are the operators measure applies (sqrt_apply on every unit vector).
    assert np.allclose(applied_full_privacy_gram(plan), x, rtol=1e-7, atol=1e-9 * budget.beta)
    w, weights = full_workload(plan.workload)
    # Every workload query is estimable: its row lies in the range of X.
    xp = pinv(x)
    assert np.allclose(w @ xp @ x, w, atol=1e-8)
    variances = np.einsum("ij,jk,ik->i", w, xp, w)
    assert float(weights @ variances) == pytest.approx(plan.total_variance, rel=1e-8)
    empirical_rmse = np.sqrt(weights @ variances / weights.sum())
    assert empirical_rmse == pytest.approx(plan.rmse, rel=1e-8)


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("method", ["rp", "wff", "qs", "rpplus"])
@pytest.mark.parametrize("neighbours", ["add-remove", "replace"])
def test_applied_operator_costs_at_most_beta(small_schema, spec, method, neighbours):
    """What measure releases (sqrt_apply on every unit vector) costs at most beta under the plan's
    neighbouring relation, the recomputed cost measure checks is an upper bound on it, and the
    plan spends the budget up to the allocation's margin."""
    from querysmasher.measure import check_budget

    budget = Budget.from_rho(0.3).with_neighbours(neighbours)
    plan = make_plan(small_schema, spec, method, budget)
    true_cost = cost(applied_full_privacy_gram(plan), neighbours)
    checked = check_budget(plan)
    assert true_cost <= budget.beta * (1 + 1e-9)
    assert true_cost <= checked * (1 + 1e-9) and checked <= budget.beta
    # The allocation spends the budget (under replace, the total count costs 0 and is charged a 1e-12 floor).
    assert checked == pytest.approx(budget.beta, rel=1e-6 if neighbours == "add-remove" else 1e-5)
    # The other relation is not covered: an add-remove plan can cost more than beta under replace.
    other = cost(applied_full_privacy_gram(plan), "replace") if neighbours == "add-remove" else None
    assert other is None or other >= true_cost


def test_replace_costs_more_than_add_remove_for_the_same_mechanism(small_schema):
    ar = make_plan(small_schema, "prefix:1,2", "qs", Budget.from_beta(1.0))
    rep = make_plan(small_schema, "prefix:1,2", "qs", Budget.from_beta(1.0).with_neighbours("replace"))
    assert cost(applied_full_privacy_gram(ar), "replace") > 1.0 + 1e-6  # not covered by an add-remove plan
    assert cost(applied_full_privacy_gram(rep), "replace") <= 1.0 * (1 + 1e-9)
    assert rep.rmse > ar.rmse  # a stronger relation costs accuracy


def test_plan_file_round_trip(tmp_path, small_schema):
    plan = make_plan(small_schema, "prefix:1,2+affine:2", "wff", Budget.from_rho(0.5))
    save_plan(plan, tmp_path / "p.h5")
    back = load_plan(tmp_path / "p.h5")
    assert back.rmse == pytest.approx(plan.rmse, rel=1e-14)
    assert back.views == plan.views and back.keys == plan.keys
    assert np.array_equal(back.allocation.sigma2, plan.allocation.sigma2)
    for k, s in plan.solutions.items():
        assert np.allclose(back.solutions[k].mechanism.dense_x(), s.mechanism.dense_x())
    assert back.budget == plan.budget


def test_plan_files_are_byte_identical(tmp_path, small_schema):
    plan = make_plan(small_schema, "prefix:1,2", "rp", Budget.from_beta(1.0))
    plan.phase_seconds.clear()  # wall-clock times are the only non-deterministic content
    save_plan(plan, tmp_path / "a.h5")
    save_plan(plan, tmp_path / "b.h5")
    assert (tmp_path / "a.h5").read_bytes() == (tmp_path / "b.h5").read_bytes()


def test_lowrank_plan_file_round_trip(tmp_path, small_schema):
    plan = make_plan(small_schema, "range:1+affine:2", "qs", Budget.from_rho(0.5), solver_options={"lowrank": "always"})
    save_plan(plan, tmp_path / "p.h5")
    back = load_plan(tmp_path / "p.h5")
    kinds = {k: s.mechanism.kind for k, s in back.solutions.items()}
    assert "lowrank" in kinds.values()
    for k, s in plan.solutions.items():
        assert kinds[k] == s.mechanism.kind
        for a, b in zip(back.solutions[k].mechanism.mats, s.mechanism.mats):
            assert np.array_equal(a, b)
    assert back.rmse == pytest.approx(plan.rmse, rel=1e-14)
    # A two-way affine view is held over its query factor: the file stores L alone (rows of F x r,
    # no cells x r V), and the loaded operator -- re-derived from L and the file's workload, as
    # measure applies it -- is the one brute force charges (at most beta) and the plan allocated.
    import h5py

    from querysmasher.measure import check_budget

    with h5py.File(tmp_path / "p.h5", "r") as f:
        compact = [k for k, g in f["solutions"].items() if g.attrs.get("storage") == "query-factor"]
        assert compact
        for k in compact:
            assert "m0" not in f["solutions"][k] and f["solutions"][k]["l"].shape[0] < plan.solutions[k].mechanism.cells
    assert cost(applied_full_privacy_gram(back), "add-remove") <= plan.budget.beta * (1 + 1e-9)
    assert check_budget(back) <= plan.budget.beta
    assert np.allclose(applied_full_privacy_gram(back), full_privacy_gram(plan), rtol=1e-9, atol=1e-12)


def test_a_query_factor_operator_does_not_depend_on_the_svd_basis(small_schema):
    """B = L^T F whatever V and W the SVD returns: flipping a column sign of V and W (an equally
    valid SVD) leaves the measured operator, and the reconstruction from it, unchanged."""
    from querysmasher.solvers import ViewMechanism

    plan = make_plan(small_schema, "range:1+affine:2", "qs", Budget.from_rho(0.5), solver_options={"lowrank": "always"})
    (sol,) = [s for s in plan.solutions.values() if s.query_factor is not None][:1]
    m = sol.mechanism
    flip = np.ones(m.mats[1].size)
    flip[0] = -1.0
    other = ViewMechanism("lowrank", m.sizes, (m.mats[0] * flip, m.mats[1]), rotation=m.rotation * flip)
    x = np.random.default_rng(0).standard_normal(m.cells)
    assert np.allclose(other.sqrt_apply(x), m.sqrt_apply(x), atol=1e-12)
    y = m.sqrt_apply(x)
    assert np.allclose(other.pinv_sqrt_apply(y), m.pinv_sqrt_apply(y), atol=1e-12)
    without = ViewMechanism("lowrank", m.sizes, (m.mats[0] * flip, m.mats[1]))  # the same X, another B
    assert not np.allclose(without.sqrt_apply(x), y, atol=1e-6)


@pytest.mark.parametrize("edit", ["shape", "key", "kind", "missing"])
def test_a_compact_solution_that_does_not_fit_its_workload_is_refused(tmp_path, small_schema, edit):
    import h5py

    from querysmasher.errors import InputError

    plan = make_plan(small_schema, "range:1+affine:2", "qs", Budget.from_rho(0.5), solver_options={"lowrank": "always"})
    save_plan(plan, tmp_path / "p.h5")
    with h5py.File(tmp_path / "p.h5", "r+") as f:
        key = [k for k, g in f["solutions"].items() if g.attrs.get("storage") == "query-factor"][0]
        g = f["solutions"][key]
        if edit == "shape":
            L = g["l"][()]
            del g["l"]
            g["l"] = L[1:]
        elif edit == "key":
            f["solutions"].move(key, "0" * 20)
        elif edit == "kind":
            g.attrs["kind"] = "dense"
        else:
            del g["l"]
    with pytest.raises(InputError, match="plan (solution|view key|file .* field)"):
        load_plan(tmp_path / "p.h5")


def test_dense_plan_file_round_trip_stores_eigenpairs(tmp_path, small_schema, monkeypatch):
    """A dense X is stored as the eigenpairs its solver computed, i.e. as the lowrank mechanism
    (V, w) of the same X = V diag(w) V^T: the loaded operator is the planned one (brute force
    charges it at most beta, check_budget agrees, the variances are equal), and reading it, its
    variances and its measurement need no eigendecomposition of X."""
    import h5py

    import querysmasher.mechanisms.base as base
    from querysmasher.measure import check_budget
    from querysmasher.variances import view_variances

    plan = make_plan(small_schema, "random:1,2", "qs", Budget.from_rho(0.5))
    dense = {k for k, s in plan.solutions.items() if s.mechanism.kind == "dense"}
    assert dense
    save_plan(plan, tmp_path / "p.h5")
    with h5py.File(tmp_path / "p.h5", "r") as f:
        for k in dense:
            g = f["solutions"][k]
            assert g.attrs["storage"] == "eigenpairs" and g.attrs["kind"] == "lowrank"
    shapes = []
    real = base.psd_eigh
    monkeypatch.setattr(base, "psd_eigh", lambda m, *a, **kw: shapes.append(m.shape) or real(m, *a, **kw))
    back = load_plan(tmp_path / "p.h5")
    for k in dense:
        m = back.solutions[k].mechanism
        assert m.kind == "lowrank" and m.outputs <= m.cells  # r = rank(X) noisy values
        assert np.allclose(m.dense_x(), plan.solutions[k].mechanism.mats[0], rtol=1e-10, atol=1e-12)
    assert back.rmse == pytest.approx(plan.rmse, rel=1e-10)
    for v in back.workload.views:
        assert np.allclose(view_variances(back, v), view_variances(plan, v), rtol=1e-9)
    assert check_budget(back) <= plan.budget.beta
    big = {back.solutions[k].mechanism.cells for k in dense if back.solutions[k].mechanism.cells > 4}
    assert not [s for s in shapes if s[0] in big]  # no eigh of a dense X
    assert cost(applied_full_privacy_gram(back), "add-remove") <= plan.budget.beta * (1 + 1e-9)
    assert np.allclose(applied_full_privacy_gram(back), full_privacy_gram(plan), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(
    "edit, needle",
    [
        ("negative", r"field 'solutions/\w+/m1' -[\d.e-]+: must be >= 0"),
        ("shape", r"field 'solutions/\w+/m0' 'shape \(\d+, \d+\)': must have shape"),
    ],
)
def test_edited_eigenpairs_are_refused(tmp_path, small_schema, edit, needle):
    import h5py

    from querysmasher.errors import InputError

    plan = make_plan(small_schema, "random:1,2", "qs", Budget.from_rho(0.5))
    save_plan(plan, tmp_path / "p.h5")
    with h5py.File(tmp_path / "p.h5", "r+") as f:
        g = next(g for g in f["solutions"].values() if g.attrs.get("storage") == "eigenpairs")
        v, w = g["m0"][()], g["m1"][()]
        del g["m0"], g["m1"]
        if edit == "negative":
            w[0] = -w[0]
        else:
            v = v[1:]
        g["m0"], g["m1"] = v, w
    with pytest.raises(InputError, match=needle):
        load_plan(tmp_path / "p.h5")


def test_a_rotation_that_is_not_orthogonal_is_refused(tmp_path, small_schema):
    """A lowrank group with an added rotation W: measure would apply B = W diag(s)^(1/2) V^T,
    which costs more than the stored V s V^T unless W is orthogonal, so check_budget refuses it."""
    import h5py

    from querysmasher.errors import InputError
    from querysmasher.measure import check_budget

    plan = make_plan(small_schema, "random:1,2", "qs", Budget.from_rho(0.5))
    save_plan(plan, tmp_path / "p.h5")
    with h5py.File(tmp_path / "p.h5", "r+") as f:
        g = next(g for g in f["solutions"].values() if g.attrs.get("storage") == "eigenpairs")
        g["rotation"] = 10.0 * np.eye(g["m1"].shape[0])
    back = load_plan(tmp_path / "p.h5")
    with pytest.raises(InputError, match="rotation"):
        check_budget(back)


def test_dense_views_above_the_exact_pair_size_stay_dense(tmp_path, small_schema, monkeypatch):
    """Above EXACT_PAIR_CELLS a lowrank replace cost is a bound (about twice the exact one for
    X = I), a dense one exact: such views keep their X, and the reloaded plan's replace cost is the
    planned one (here with the limit lowered to 8 cells)."""
    import h5py

    import querysmasher.mechanisms.base as base
    from querysmasher.measure import check_budget

    monkeypatch.setattr(base, "EXACT_PAIR_CELLS", 8)
    plan = make_plan(small_schema, "random:1,2", "qs", Budget.from_rho(0.5).with_neighbours("replace"))
    big = {k for k, s in plan.solutions.items() if s.mechanism.kind == "dense" and s.mechanism.cells > 8}
    assert big
    save_plan(plan, tmp_path / "p.h5")
    with h5py.File(tmp_path / "p.h5", "r") as f:
        assert all(f["solutions"][k].attrs["kind"] == "dense" and "m0" in f["solutions"][k] for k in big)
    back = load_plan(tmp_path / "p.h5")
    for k in big:
        assert back.solutions[k].mechanism.replace_cost() == pytest.approx(
            plan.solutions[k].mechanism.replace_cost(), rel=1e-12
        )
    assert check_budget(back) <= plan.budget.beta
