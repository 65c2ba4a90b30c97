"""The marginal family (qsplus, querysmasher.marginal_family): objective against the full domain,
the exact MM on one view, the issue's [4]^3 target, never above qs, privacy cost of the applied
operators by brute force, GLS unbiased with exact variances (Monte Carlo), and a cvxpy cross-check."""

import math

import numpy as np
import pytest

from querysmasher.accounting import Budget
from querysmasher.fulldomain import cell_index, full_domain_gram, marginalise
from querysmasher.marginal_family import (
    applied_privacy_cost,
    build_problem,
    measure_marginals,
    measurement_operators,
    plan,
    reconstruct,
)
from querysmasher.marginal_family.certificate import certificate
from querysmasher.marginal_family.gls import view_queries
from querysmasher.marginal_family.optimize import start_from_residual_plan
from querysmasher.planners.residual import plan_residual
from querysmasher.schema import parse_schema
from querysmasher.solvers.qs import QSSolver
from querysmasher.workload import parse_workload


@pytest.fixture
def skewed(tmp_path):
    p = tmp_path / "schema.yaml"
    p.write_text("a: 3\nb: 4\nc: 2\n")
    return str(p)


def _qs(w):
    return plan_residual(w, "qs", QSSolver(), Budget.from_beta(1.0))


def _full_x(problem, ys, sizes):
    n = math.prod(sizes)
    x = np.zeros((n, n))
    for k, v in enumerate(problem.views):
        xg = problem.cell_gram(k, ys[0] if problem.tied else ys[k])
        idx = cell_index(sizes, v.attrs)
        x += xg[np.ix_(idx, idx)]
    return x


@pytest.mark.parametrize(
    "schema, workload, tie",
    [
        ("synthetic:n=3,d=3", "affine:2", False),
        ("synthetic:n=3,d=3", "affine:2", True),
        ("synthetic:n=3,d=3", "prefix:1+abs:2", False),
        ("synthetic:n=3,d=4", "range:1+affine:2+prefix:3", True),
        ("skewed", "prefix:1,2+affine:2", False),
        ("skewed", "prefix:1", False),  # 1-attribute views only
        ("skewed", "range:1+affine:(a,b)", False),  # a pair and the 1-attribute view outside it
    ],
)
def test_objective_and_gradient_match_the_full_domain(schema, workload, tie, skewed):
    s = parse_schema(skewed if schema == "skewed" else schema)
    w = parse_workload(workload, s)
    pr = build_problem(w, None, tie=tie)
    rng = np.random.default_rng(0)
    ys = []
    for v in pr.views[:1] if pr.tied else pr.views:
        a = rng.standard_normal((v.cells, v.cells))
        ys.append(a @ a.T + 0.1 * np.eye(v.cells))
    ev = pr.evaluate(ys)
    g = full_domain_gram(w)
    x = _full_x(pr, ys, s.sizes)
    # G's 3-way residuals (prefix:3) are not in this X's range: tr(G X^+) counts what X measures,
    # the residual-only subsets are accounted separately (their qs losses)
    assert ev.f == pytest.approx(float(np.trace(g @ np.linalg.pinv(x, hermitian=True))), rel=1e-9)
    d = rng.standard_normal(ys[0].shape)
    d = d + d.T
    h = 1e-6
    plus = [y.copy() for y in ys]
    minus = [y.copy() for y in ys]
    plus[0] += h * d
    minus[0] -= h * d
    fd = (pr.evaluate(plus).f - pr.evaluate(minus).f) / (2 * h)
    assert fd == pytest.approx(float(np.sum(ev.grads[0] * d)), rel=1e-5)


def _qs_start(schema: str, workload: str):
    """(qs plan, marginal problem, its start from the qs plan (factors, shares, tau))."""
    w = parse_workload(workload, parse_schema(schema))
    qs = _qs(w)
    pr = build_problem(w, qs)
    return qs, pr, start_from_residual_plan(pr, qs)


def test_the_folded_qs_start_is_the_qs_objective():
    qs, pr, (f, t, tau) = _qs_start("synthetic:n=4,d=3", "range:1+affine:2+prefix:3")
    obj, low = certificate(pr, f, t, tau)
    assert obj <= qs.total_variance * (1 + 1e-6)
    assert obj == pytest.approx(qs.total_variance, rel=1e-3)  # below only by the free diagonal fill
    assert 0 < low <= obj


def test_one_view_is_the_exact_matrix_mechanism():
    from querysmasher.planners.mm import plan_mm

    mm = plan_mm("synthetic:n=4,d=2", "affine:2", Budget.from_beta(1.0), target_gap=1e-7)
    p = plan("synthetic:n=4,d=2", "affine:2", target_gap=1e-4)
    assert p.gap <= 1e-4
    assert round(mm.rmse, 4) == 1.4580 == round(p.rmse, 4)
    assert p.total_variance == pytest.approx(mm.total_variance, rel=1.5e-4)
    assert p.lower_bound <= mm.total_variance * (1 + 1e-7)  # the certificate bounds the true optimum


def test_issue_target_on_4_cubed_affine():
    p = plan("synthetic:n=4,d=3", "affine:2", target_gap=1e-4)
    assert p.tied and p.gap <= 1e-4
    assert p.rmse <= 2.0171
    assert p.qs_rmse == pytest.approx(2.2982, abs=1e-4)


@pytest.mark.parametrize(
    "schema, workload",
    [
        ("synthetic:n=3,d=3", "affine:2"),
        ("synthetic:n=3,d=3", "abs:2"),
        ("synthetic:n=3,d=3", "prefix:1,2"),
        ("synthetic:n=3,d=4", "range:1+affine:2+prefix:3"),
        pytest.param("skewed", "marginal:1+affine:2", marks=pytest.mark.slow),  # ~11 s: three untied views
    ],
)
def test_never_above_qs_and_certified(schema, workload, skewed):
    p = plan(skewed if schema == "skewed" else schema, workload, target_gap=1e-3)
    assert p.total_variance <= p.qs_total_variance * (1 + 1e-9)
    assert 0 < p.lower_bound <= p.total_variance
    assert p.gap <= 1e-3
    assert p.privacy_cost() == pytest.approx(1.0, rel=1e-9) and p.privacy_cost() <= 1.0


@pytest.mark.parametrize(
    "schema, workload, beta",
    [("synthetic:n=3,d=3", "affine:2", 2.0), ("synthetic:n=3,d=4", "range:1+affine:2+prefix:3", 0.5)],
)
def test_privacy_cost_of_the_applied_operators_by_brute_force(schema, workload, beta):
    p = plan(schema, workload, Budget.from_beta(beta), target_gap=1e-3)
    ops = measurement_operators(p)
    sizes = p.schema.sizes
    # the whitened operator over the full domain; a record added or removed changes one cell by 1
    b = np.vstack([m.operator[:, cell_index(sizes, m.attrs)] / math.sqrt(m.sigma2) for m in ops])
    brute = float(np.max(np.sum(b * b, axis=0)))
    assert brute == pytest.approx(applied_privacy_cost(ops), rel=1e-12)
    assert brute == pytest.approx(p.privacy_cost(), rel=1e-9)
    assert brute <= beta and brute == pytest.approx(beta, rel=1e-9)
    # and the budget re-check refuses a plan whose operators cost more than its budget
    p.shares = p.shares * 1.01
    from querysmasher.errors import InputError

    with pytest.raises(InputError):
        measure_marginals(p, lambda a: np.zeros(math.prod(sizes[i] for i in a)), np.random.default_rng(0))


@pytest.mark.parametrize(
    "schema, workload", [("synthetic:n=3,d=3", "affine:2"), ("synthetic:n=3,d=4", "range:1+affine:2+prefix:3")]
)
def test_gls_is_unbiased_and_its_variances_are_exact(schema, workload):
    p = plan(schema, workload, Budget.from_beta(0.7), target_gap=1e-3)
    sizes = p.schema.sizes
    rng = np.random.default_rng(5)
    x = rng.integers(0, 30, math.prod(sizes)).astype(float)
    margs = {}

    def marginal(a):
        if a not in margs:
            margs[a] = marginalise(x, sizes, a).ravel()
        return margs[a]

    truth = np.concatenate([view_queries(p.workload, v) @ marginal(v.attrs) for v in p.workload.views])
    ops = measurement_operators(p)
    reps = 4000
    # many draws at once: the noise callable is applied per measurement with a trailing batch axis
    ys = [m.operator @ marginal(m.attrs) for m in ops]
    batch = [y[:, None] + rng.standard_normal((len(y), reps)) * math.sqrt(m.sigma2) for y, m in zip(ys, ops)]
    a = reconstruct(p, batch, ops=ops)
    answers = np.concatenate(a.answers).T  # draws x queries
    var = np.concatenate(a.variances)
    z = (answers.mean(axis=0) - truth) / np.sqrt(var / reps)
    assert np.max(np.abs(z)) < 5
    ratio = answers.var(axis=0) / var
    assert np.all(np.abs(ratio - 1) < 0.15)  # 4,000 draws: sd of a ratio ~0.022
    # the predicted total variance is the plan's
    assert a.total_variance(p.workload) == pytest.approx(p.total_variance, rel=1e-8)
    # and one release through the measure stage's noise interface (a callable here)
    ys1 = measure_marginals(p, marginal, lambda clean, s2: clean)
    a0 = reconstruct(p, ys1)
    assert np.allclose(np.concatenate(a0.answers), truth)


def test_cvxpy_cross_check_on_a_tiny_case():
    cp = pytest.importorskip("cvxpy")
    s = parse_schema("synthetic:n=3,d=3")
    w = parse_workload("affine:2", s)
    p = plan(s, w, target_gap=1e-5, tie=False)
    g = full_domain_gram(w)
    sizes = s.sizes
    # the subspace the family measures: the full-domain residual coordinates of subsets of pairs
    from querysmasher.marginal_family.basis import view_basis, view_coords

    u = view_basis(sizes)
    c = view_coords((0, 1, 2), sizes)
    keep = np.array([len(c.subsets[k]) <= 2 for k in c.subset_of])
    basis = u[:, keep]
    gr = basis.T @ g @ basis
    e, v = np.linalg.eigh(gr)
    half = v[:, e > 1e-9] * np.sqrt(e[e > 1e-9])
    xs = [cp.Variable((9, 9), PSD=True) for _ in p.views]
    t = cp.Variable(len(p.views))
    total = 0
    for xg, attrs in zip(xs, p.views):
        m = np.zeros((9, 27))
        m[cell_index(sizes, attrs), np.arange(27)] = 1.0
        mb = m @ basis
        total = total + mb.T @ xg @ mb
    cons = [cp.diag(xg) <= t[k] for k, xg in enumerate(xs)] + [cp.sum(t) <= 1]
    prob = cp.Problem(cp.Minimize(cp.matrix_frac(half, (total + total.T) / 2)), cons)
    prob.solve(solver="CLARABEL")
    assert prob.value == pytest.approx(p.total_variance, rel=2e-4)
    assert p.lower_bound <= prob.value * (1 + 1e-6)


def test_views_above_the_cell_limit_keep_their_residual_mechanisms(skewed):
    p = plan(skewed, "prefix:1+affine:2", target_gap=1e-3, max_view_cells=8)
    assert p.views == [(0, 2), (1, 2)] and (0, 1) in p.residual_views
    assert p.total_variance <= p.qs_total_variance * (1 + 1e-9) and p.gap <= 1e-3
    ops = measurement_operators(p)
    assert applied_privacy_cost(ops) == pytest.approx(1.0, rel=1e-9)
    truth_x = np.arange(24, dtype=float)
    ys = measure_marginals(p, lambda a: marginalise(truth_x, p.schema.sizes, a).ravel(), lambda clean, s2: clean)
    a = reconstruct(p, ys)
    for v, ans in zip(p.workload.views, a.answers):
        assert np.allclose(ans, view_queries(p.workload, v) @ marginalise(truth_x, p.schema.sizes, v.attrs).ravel())


@pytest.mark.parametrize(
    "schema, workload", [("synthetic:n=3,d=3", "affine:2"), ("synthetic:n=3,d=4", "range:1+affine:2+prefix:3")]
)
def test_view_tables_are_unbiased_with_exact_cell_variances(schema, workload):
    """The tables a release publishes: each workload view's reconstructed marginal, unbiased where
    table_estimable says so, with the variance reconstruct(cell_variances=True) predicts (Monte Carlo)."""
    from querysmasher.marginal_family.gls import table_estimable

    p = plan(schema, workload, Budget.from_beta(0.7), target_gap=1e-3)
    sizes = p.schema.sizes
    rng = np.random.default_rng(11)
    x = rng.integers(0, 30, math.prod(sizes)).astype(float)
    ops = measurement_operators(p)
    reps = 4000
    ys = [m.operator @ marginalise(x, sizes, m.attrs).ravel() for m in ops]
    batch = [y[:, None] + rng.standard_normal((len(y), reps)) * math.sqrt(m.sigma2) for y, m in zip(ys, ops)]
    a = reconstruct(p, batch, ops=ops, cell_variances=True)
    checked = 0
    for v, table, var in zip(p.workload.views, a.tables, a.cell_variances):
        ok, why = table_estimable(p, v.attrs)
        assert (var is not None) == ok, why
        if not ok:
            continue
        truth = marginalise(x, sizes, v.attrs).ravel()
        z = (table.mean(axis=1) - truth) / np.sqrt(var / reps)
        assert np.max(np.abs(z)) < 5
        assert np.all(np.abs(table.var(axis=1) / var - 1) < 0.15)
        checked += 1
    assert checked >= 1


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_maxcut_upper_bounds_the_sdp_and_reaches_it(seed):
    """maxcut_upper: an upper bound on s(D) = max{<D, X> : X PSD, diag X <= 1} -- never below the
    value of any feasible X (random correlation matrices, and the optimum cvxpy finds) -- and
    within 1e-5 of that optimum from a poor start."""
    cp = pytest.importorskip("cvxpy")
    from querysmasher.marginal_family.certificate import maxcut_upper

    rng = np.random.default_rng(seed)
    a = rng.normal(size=(12, 5)) * rng.uniform(0.1, 3.0, size=(12, 1))  # a low-rank PSD D with uneven rows
    d = a @ a.T
    bound = maxcut_upper(d, np.diag(d))
    x = cp.Variable((12, 12), PSD=True)
    opt = cp.Problem(cp.Maximize(cp.trace(d @ x)), [cp.diag(x) <= 1]).solve(solver="CLARABEL")
    assert opt <= bound * (1 + 1e-9) and bound <= opt * (1 + 1e-5)
    for _ in range(20):
        f = rng.normal(size=(12, 12))
        c = f @ f.T
        c /= np.sqrt(np.outer(np.diag(c), np.diag(c)))
        assert float(np.sum(d * c)) <= bound
    assert maxcut_upper(-d, np.ones(12)) == math.inf  # a negative diagonal: the dual used does not apply


def test_polished_certificate_is_tighter_and_still_a_bound():
    """certificate(..., polish=True) at the qs start: never below the heuristic bound, never above
    the family's optimum (a tight plan's objective), and closer to it. The workload is symmetric
    under attribute permutations, so the untied family's optimum is the tied one's (average any
    optimum over the permutations): the symmetric reduction certifies it in a second."""
    s = parse_schema("synthetic:n=4,d=3")
    w = parse_workload("abs:2", s)
    qs = _qs(w)
    pr = build_problem(w, qs, tie=False)
    f, t, tau = start_from_residual_plan(pr, qs)
    obj, low = certificate(pr, f, t, tau)
    obj_p, low_p = certificate(pr, f, t, tau, polish=True)
    optimum = plan(s, w, target_gap=1e-6, tie=True)
    assert optimum.gap <= 1e-6
    assert obj_p == obj
    assert low <= low_p <= optimum.total_variance * (1 + 1e-7)
    assert optimum.total_variance - low_p < optimum.total_variance - low


def test_the_time_budget_holds_inside_a_round(monkeypatch):
    """max_seconds stops the descent in the middle of a round (one round can run for many minutes on
    a large problem), and what it returns is still a feasible point with a valid bound. The clock is
    simulated: each objective evaluation takes one second of it, so the test does not depend on the
    machine."""
    from querysmasher.marginal_family import deadline, optimize

    class Clock:
        now = 0.0

        def perf_counter(self):
            return self.now

    clock = Clock()
    _, pr, (f, t, tau) = _qs_start("synthetic:n=4,d=3", "range:1+affine:2+prefix:3")
    start, _ = certificate(pr, f, t, tau)
    monkeypatch.setattr(optimize, "time", clock)
    monkeypatch.setattr(deadline, "time", clock)
    started = []  # the clock at the start of each evaluation
    real = optimize._Param.fun

    def one_second(self, x):
        started.append(clock.now)
        clock.now += 1.0
        return real(self, x)

    monkeypatch.setattr(optimize._Param, "fun", one_second)
    sol = optimize.optimise(pr, f, t, tau, target_gap=1e-14, max_seconds=40.0, method="lbfgs")
    assert 30 < len(started) and max(started) <= 40.0  # evaluations ran up to the deadline, none after it
    assert 0 < sol.lower_bound <= sol.objective <= start * (1 + 1e-9)
    obj, low = certificate(pr, sol.factors, sol.shares, sol.tau)
    assert obj == pytest.approx(sol.objective, rel=1e-9) and low <= obj


def test_auto_descent_takes_truncated_newton_when_the_krylov_basis_would_not_fit(monkeypatch):
    """scipy's trust-krylov keeps up to min(1e9/n, 2n)+1 Lanczos vectors of the n parameters (8 GB at
    most): above optimize.KRYLOV_BASIS_BYTES "auto" takes truncated Newton steps instead, and the
    descent still certifies ([3]^2 affine:2 here, with the budget set to nothing)."""
    import scipy.optimize

    from querysmasher.marginal_family import optimize

    assert optimize._second_order(768) == "trust-krylov" and optimize._second_order(7_000_000) == "newton"
    monkeypatch.setattr(optimize, "KRYLOV_BASIS_BYTES", 0)
    methods = []
    real = scipy.optimize.minimize

    def recording(*args, **kw):
        methods.append(kw.get("method"))
        return real(*args, **kw)

    monkeypatch.setattr(scipy.optimize, "minimize", recording)
    p = plan("synthetic:n=3,d=2", "affine:2", target_gap=1e-5, tie=False, optimiser_options={"method": "auto"})
    assert "trust-krylov" not in methods and p.gap <= 1e-5 and p.rmse <= p.qs_rmse


# the three solver paths of the planner: the symmetric reduction, the general descent, the restricted descent
_PATHS = [
    ("synthetic:n=3,d=3", "affine:2", None),
    ("skewed", "abs:2", None),
    ("skewed", "abs:2", {"method": "restricted"}),
]


@pytest.mark.parametrize("schema, workload, options", _PATHS)
def test_a_time_limit_already_passed_returns_the_folded_qs_start(schema, workload, options, skewed):
    """Every phase checks the time limit before it starts: with the limit gone by the time ``qs`` is
    planned, no solver runs and the plan is the folded ``qs`` start, valid, noted, with gap 1."""
    p = plan(skewed if schema == "skewed" else schema, workload, max_seconds=1e-9, optimiser_options=options)
    assert p.iterations == 0 and p.lower_bound == 0.0 and p.gap == 1.0
    assert any("time limit" in n for n in p.notes), p.notes
    assert p.total_variance <= p.qs_total_variance * (1 + 1e-9)
    assert p.privacy_cost() == pytest.approx(1.0, rel=1e-9) and p.privacy_cost() <= 1.0


@pytest.mark.parametrize("schema, workload, options", _PATHS[1:])
def test_the_time_limit_holds_inside_every_descent(schema, workload, options, skewed, monkeypatch):
    """With a simulated clock on which every objective evaluation takes one second, the descents
    stop at the limit wherever they are: the evaluations after it are only those that certify and
    fill the best point (a few), and the point returned is feasible with a valid bound."""
    from querysmasher.marginal_family import active_newton, deadline, optimize, planner, problem, restricted

    class Clock:
        now = 0.0

        def perf_counter(self):
            return self.now

    clock = Clock()
    for module in (active_newton, deadline, optimize, planner, restricted):
        monkeypatch.setattr(module, "time", clock)
    started = []
    real = problem.MarginalProblem.evaluate

    def one_second(self, *args, **kwargs):
        started.append(clock.now)
        clock.now += 1.0
        return real(self, *args, **kwargs)

    monkeypatch.setattr(problem.MarginalProblem, "evaluate", one_second)
    limit = 40.0
    p = plan(skewed, workload, max_seconds=limit, target_gap=1e-12, optimiser_options=options)
    after = [t for t in started if t >= limit]
    assert sum(t < limit for t in started) >= 30 and len(after) <= 10, (len(started), after)
    assert any("time limit (40 s) passed" in n for n in p.notes), p.notes
    assert 0 < p.lower_bound <= p.total_variance <= p.qs_total_variance * (1 + 1e-9)
    assert p.privacy_cost() == pytest.approx(1.0, rel=1e-9) and p.privacy_cost() <= 1.0


@pytest.mark.parametrize(
    "schema, workload", [("skewed", "marginal:2"), ("skewed", "marginal:1,2"), ("synthetic:n=3,d=3", "marginal:2")]
)
def test_a_workload_the_family_cannot_improve_stays_at_qs(schema, workload, skewed):
    """Marginal workloads: the residual mechanisms are already optimal over the family, so qsplus
    certifies qs's own value (never above it), whichever solver path the schema takes."""
    p = plan(skewed if schema == "skewed" else schema, workload, target_gap=1e-4)
    assert p.total_variance <= p.qs_total_variance * (1 + 1e-9)
    assert p.total_variance == pytest.approx(p.qs_total_variance, rel=1e-4) and p.gap <= 1e-4
    assert 0 < p.lower_bound <= p.total_variance


@pytest.mark.parametrize("workload", ["prefix:1", "range:1+abs:(a,b)"])
def test_one_attribute_views_are_in_the_family_and_gain(workload, skewed):
    """A 1-attribute view outside every pair gets a mechanism on its attribute's whole marginal: it
    correlates the total with the attribute's residual, which the residual family measures apart,
    so it gains where the residual family cannot (prefix queries on uneven attributes)."""
    p = plan(skewed, workload, target_gap=1e-5)
    assert any(len(v) == 1 for v in p.views)
    assert p.total_variance < p.qs_total_variance * (1 - 1e-3) and p.gap <= 1e-5
    assert p.privacy_cost() == pytest.approx(1.0, rel=1e-9) and p.privacy_cost() <= 1.0


@pytest.mark.parametrize("workload", ["abs:2", "prefix:1+affine:2"])
def test_an_attribute_of_size_1_plans_certified_and_not_above_qs(tmp_path, workload):
    """A size-1 attribute has no residual space (its pairs are its partner's marginal): the plan
    still certifies and is never above qs."""
    schema = tmp_path / "schema.yaml"
    schema.write_text("a: 1\nb: 3\nc: 2\n")
    p = plan(str(schema), workload, target_gap=1e-4)
    assert p.total_variance <= p.qs_total_variance * (1 + 1e-9) and p.gap <= 1e-4
    assert 0 < p.lower_bound <= p.total_variance


def test_a_schema_of_size_1_attributes_is_one_clear_error(tmp_path):
    from querysmasher.errors import InputError

    schema = tmp_path / "schema.yaml"
    schema.write_text("a: 1\nb: 1\n")
    with pytest.raises(InputError, match="no attribute of size above 1"):
        plan(str(schema), "abs:2", target_gap=1e-4)
