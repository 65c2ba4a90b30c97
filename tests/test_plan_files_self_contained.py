"""Plan files are self-contained (issue 41): loading a plan of any kind runs no planner, solver or
optimiser -- each is made to fail while the file loads -- and gives back the plan that was saved
(the same RMSE, measurement operators and noise, the same answers from the same seeded noise). The
fields a qsplus plan file keeps of its qs reference plan are checked like the rest: one InputError
naming the field."""

import importlib

import h5py
import numpy as np
import pandas as pd
import pytest

import querysmasher as qs
from querysmasher.errors import InputError
from querysmasher.marginal_family import measurement_operators
from querysmasher.marginal_family.files import load_marginal_plan, save_marginal_plan
from querysmasher.plankinds import kind_of

SCHEMA = "synthetic:n=3,d=3"
MIXED = "prefix:3+affine:2"  # qsplus: three marginal views and one residual-only subset (the 3-way view)

# (method, workload, make_plan keywords)
CASES = [
    pytest.param("qs", "prefix:1,2+marginal:3", {}, id="qs"),
    pytest.param("rp", "prefix:1,2", {}, id="rp"),
    pytest.param("rpplus", "affine:2", {}, id="rpplus"),
    pytest.param("wff", "prefix:2", {}, id="wff"),
    pytest.param("mm", "prefix:1,2", {}, id="mm"),  # its dense full-domain X is stored by its eigenpairs
    pytest.param("hdmm", "prefix:1,2+marginal:3", {}, id="hdmm-gaussian"),
    pytest.param("hdmm", "marginal:1,2", {"noise": "laplace", "epsilon": 1.0}, id="hdmm-laplace"),
    pytest.param("qsplus", MIXED, {"options": {"target_gap": 1e-3}}, id="qsplus"),
    pytest.param("qsplus", MIXED, {"options": {"target_gap": 1e-3}, "neighbours": "replace"}, id="qsplus-replace"),
]

# every planner, solver and optimiser a plan file's load could call: (module, attribute)
FORBIDDEN = [
    ("querysmasher.planning", "make_plan"),
    ("querysmasher.planners.residual", "plan_residual"),
    ("querysmasher.planners.residual", "solve_distinct"),
    ("querysmasher.planners.mm", "plan_mm"),
    ("querysmasher.solvers.closed_form", "RPSolver.solve"),
    ("querysmasher.solvers.closed_form", "WFFSolver.solve"),
    ("querysmasher.solvers.qs", "QSSolver.solve"),
    ("querysmasher.solvers.rpplus", "RPPlusSolver.solve"),
    ("querysmasher.marginal_family.planner", "plan"),
    ("querysmasher.marginal_family.optimize", "optimise"),
    ("querysmasher.marginal_family.symmetric", "solve_symmetric"),
    ("querysmasher.marginal_family.restricted", "descend"),
    ("querysmasher.hdmm.plan", "plan_hdmm"),
    *[
        (f"querysmasher.hdmm.{m}", f)
        for m in ("optimize", "optimize_laplace")
        for f in ("opt_0", "opt_kron", "opt_plus", "opt_marginals")
    ],
    ("cvxpy", "Problem.solve"),
]


def _forbid(monkeypatch):
    # every module first: one imported while another's function is patched would keep the patch
    modules = [importlib.import_module(m) for m, _ in FORBIDDEN]
    for module, (name, attr) in zip(modules, FORBIDDEN):
        *owners, last = attr.split(".")
        owner = module
        for o in owners:
            owner = getattr(owner, o)

        def ran(*args, _what=f"{name}.{attr}", **kwargs):
            raise AssertionError(f"{_what} ran while a plan file was loaded")

        monkeypatch.setattr(owner, last, ran)


def _records(plan):
    rng = np.random.default_rng(4)
    return pd.DataFrame({a.name: rng.integers(0, a.size, 400) for a in plan.schema.attributes})


def _operators(plan) -> list[tuple[np.ndarray, float]]:
    """(applied operator, noise scale) of every measurement, whatever the kind."""
    kind = kind_of(plan).file_kind
    if kind == "plan":
        out = []
        for i in np.flatnonzero(np.isfinite(plan.allocation.sigma2)):
            mech = plan.solutions[plan.keys[i]].mechanism
            out.append((mech.sqrt_apply(np.eye(mech.cells)), float(plan.allocation.sigma2[i])))
        return out
    if kind == "marginal-plan":
        return [(m.operator, m.sigma2) for m in measurement_operators(plan)]
    a = plan.allocation
    scales = a.scales if plan.noise == "laplace" else a.sigma2
    return [(g.strategy.dense(), float(s)) for g, s in zip(plan.groups, scales)]


@pytest.mark.parametrize("method, workload, keywords", CASES)
def test_loading_runs_no_planner_and_gives_back_the_saved_plan(method, workload, keywords, tmp_path, monkeypatch):
    plan = qs.make_plan(SCHEMA, workload, method=method, **keywords)
    path = tmp_path / "plan.h5"
    qs.save(plan, path)
    records = _records(plan)
    before = qs.measure(plan, records, seed=11).reconstruct()
    _forbid(monkeypatch)
    back = qs.load(path)
    assert type(back) is type(plan) and back.rmse == plan.rmse
    ops, back_ops = _operators(plan), _operators(back)
    assert len(ops) == len(back_ops)
    for (a, s), (b, t) in zip(ops, back_ops):
        assert s == t and a.shape == b.shape and np.allclose(a, b, rtol=1e-12, atol=1e-12)
    after = qs.measure(back, records, seed=11).reconstruct()
    for k in range(len(plan.workload.views)):
        assert np.allclose(after.view(k).estimate, before.view(k).estimate, rtol=1e-10, atol=1e-9)


def test_a_loaded_qsplus_plan_keeps_its_problem_and_its_operators_exactly(tmp_path, monkeypatch):
    plan = qs.make_plan(SCHEMA, MIXED, method="qsplus", options={"target_gap": 1e-3})
    assert plan.residual_views
    save_marginal_plan(plan, tmp_path / "p.h5")
    _forbid(monkeypatch)
    back = load_marginal_plan(tmp_path / "p.h5")
    assert back.residual_views == plan.residual_views and back.views == plan.views
    assert np.array_equal(back.problem.residual_roots, plan.problem.residual_roots)
    assert back.problem.tied == plan.problem.tied
    for m, n in zip(measurement_operators(plan), measurement_operators(back)):
        assert m.attrs == n.attrs and m.sigma2 == n.sigma2 and np.array_equal(m.operator, n.operator)
    assert back.privacy_cost() == plan.privacy_cost()


@pytest.fixture(scope="module")
def qsplus_file(tmp_path_factory):
    plan = qs.make_plan(SCHEMA, MIXED, method="qsplus", options={"target_gap": 1e-3})
    path = tmp_path_factory.mktemp("qsplus") / "p.h5"
    save_marginal_plan(plan, path)
    return path


def _edit(path, tmp_path, change):
    out = tmp_path / "edited.h5"
    out.write_bytes(path.read_bytes())
    with h5py.File(out, "r+") as f:
        change(f)
    return out


def _replace(name, edit):
    def change(f):
        data = f[name][()]
        del f[name]
        f[name] = edit(data)

    return change


def _drop_residual_only(f):
    """Remove the one residual-only subset consistently: its measurement would answer as 0."""
    for name in ("attrs", "offsets"):
        del f[f"residual_views/{name}"]
    f["residual_views/attrs"], f["residual_views/offsets"] = np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64)
    for name in ("residual_sigma2", "residual_losses", "residual_costs"):
        del f[name]
        f[name] = np.zeros(0)
    del f["residual_mechanisms/0"]


@pytest.mark.parametrize(
    "change, needle",
    [
        (lambda f: f.attrs.__setitem__("marginal_plan_format", 1), "marginal_plan_format.*re-run"),
        (_replace("residual_losses", lambda d: -d), "residual_losses"),
        (_replace("residual_costs", lambda d: d * np.nan), "residual_costs"),
        (_replace("residual_losses", lambda d: d * 0 + 5e-324), "residual_losses.*no finite noise scale"),
        (_replace("residual_losses", lambda d: np.concatenate([d, d])), "residual_losses"),
        (lambda f: f.__delitem__("residual_costs"), "residual_costs"),
        (lambda f: f.__delitem__("residual_mechanisms/0"), "residual_mechanisms"),
        (lambda f: f["residual_mechanisms"].create_group("7"), "residual_mechanisms"),
        (_replace("residual_mechanisms/0/m0", lambda d: d[:2]), "residual_mechanisms/0/m0"),
        (_replace("residual_mechanisms/0/sizes", lambda d: d + 1), "residual_mechanisms/0/sizes"),
        (lambda f: f["residual_mechanisms/0"].attrs.__setitem__("kind", "nope"), "residual_mechanisms/0.*kind"),
        (_drop_residual_only, "residual-only subsets are not those its workload needs"),
    ],
)
def test_corrupt_residual_only_fields_are_one_input_error_naming_them(qsplus_file, tmp_path, change, needle):
    with pytest.raises(InputError, match=needle):
        load_marginal_plan(_edit(qsplus_file, tmp_path, change))


def test_an_edited_residual_only_mechanism_spending_more_is_refused_before_any_record(qsplus_file, tmp_path):
    """The stored mechanism is not trusted for privacy: measure recomputes the applied cost."""
    path = _edit(qsplus_file, tmp_path, _replace("residual_mechanisms/0/m0", lambda d: d * 1.01))
    plan = qs.load(path)
    with pytest.raises(InputError, match="exceeds its budget"):
        plan.measure(_records(plan), seed=1)


def test_loading_qsplus_needs_no_qs_plan_even_at_scale(tmp_path, monkeypatch):
    """The file of a plan with many residual-only subsets loads without the qs planner (which the
    loader ran before, minutes at [10]^40): here 4 marginal views and 4 three-way subsets."""
    plan = qs.make_plan("synthetic:n=3,d=4", "marginal:2+marginal:3", method="qsplus", options={"target_gap": 1e-3})
    assert len(plan.residual_views) == 4
    qs.save(plan, tmp_path / "p.h5")
    _forbid(monkeypatch)
    back = qs.load(tmp_path / "p.h5")
    assert back.rmse == plan.rmse and back.residual_views == plan.residual_views


def test_every_plan_file_has_one_budget_record(tmp_path):
    """One writer and one strict reader of a plan file's budget (io.put_budget, h5read.read_budget):
    both budget forms round-trip, an unknown key is refused naming the field, and an HDMM file that
    claims replace neighbours (its strategies are costed under add-remove) is refused."""
    import h5py

    from querysmasher import h5read as r
    from querysmasher.accounting import Budget, PureBudget
    from querysmasher.io import put_budget

    path = tmp_path / "b.h5"
    for budget in (Budget.from_beta(0.7).with_neighbours("replace"), PureBudget(2.0)):
        with h5py.File(path, "w") as f:
            put_budget(f, budget)
        with h5py.File(path, "r") as f:
            assert r.read_budget(f, pure=isinstance(budget, PureBudget)) == budget
    with h5py.File(path, "w") as f:
        f.attrs["budget"] = '{"beta": 1, "source": "beta", "delta": 1e-6, "rho": 9}'
    with h5py.File(path, "r") as f, pytest.raises(InputError, match="'@budget'.*must hold beta, source, delta"):
        r.read_budget(f)
    plan = qs.make_plan("synthetic:n=3,d=2", "marginal:2", method="hdmm")
    qs.save(plan, tmp_path / "h.h5")
    with h5py.File(tmp_path / "h.h5", "r+") as f:
        f.attrs["budget"] = f.attrs["budget"].replace("add-remove", "replace")
    with pytest.raises(InputError, match="neighbours"):
        qs.load(tmp_path / "h.h5")
