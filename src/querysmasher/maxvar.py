r"""The max-variance objective: minimise the largest (weighted) variance of any workload query.

Objective
---------
With per-view privacy Grams Y_v = X_v / sigma_v^2 (X_v at cost c_v = max diag X_v, sum_v c_v /
sigma_v^2 <= beta) the variance of query q is Var_q = sum_v q_v Y_v^+ q_v^T (q_v: its residual
subquery), convex in (Y_v). The objective is max_q w_q Var_q (w_q: the query's workload weight).

Minimax duality
---------------
For query weights nu on the simplex, phi(nu) = min_Y sum_q nu_q w_q Var_q(Y) is the ordinary
weighted-sum optimum of the workload reweighted by nu, so

    max_q w_q Var_q(Y)  >=  phi(nu)   for every mechanism Y and every nu,

and by Sion's theorem max_nu phi(nu) is the max-variance optimum. Every method's sum solver
therefore gives a lower bound (qs: its certified per-view bounds; wff: its closed form is exact
within the Fourier family; rp: exact within RP's fixed bases), and the gap closes as nu -> nu*.

Symmetry
--------
Permuting attributes of equal size and kind (and not used by a random or custom view) maps the
workload to itself, so an optimal nu is constant on the orbits: views of one term with the same
(size, kind) per attribute share one weight per query index. Marginal queries of one view are also
exchangeable (permuting values of each attribute), so a marginal view has a single weight and stays
Kronecker; other views get one weight per query, applied to an explicit Gram Q^T diag(nu) Q.

Algorithm
---------
Repeat: (a) solve the nu-weighted sum problem (per-view shapes X_v, lower bound phi(nu));
(b) for those shapes, solve the convex allocation problem min_s max_q sum_v A[q, v] s_v subject to
sum_v c_v / s_v <= beta (A[q, v] = w_q q_v X_v^+ q_v^T; cvxpy/Clarabel), which gives an upper bound
(recomputed exactly at the rescaled s) and the multipliers lambda of the max; (c) next nu: lambda,
or, when that does not raise phi, a multiplicative step nu_q <- nu_q (Var_q / phi)^tau from the
best nu. For rp (shapes do not depend on nu) step (b) is the whole problem; its own dual
(sum_v sqrt(c_v (lambda^T A)_v))^2 / beta certifies it.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from dataclasses import dataclass

import numpy as np

from .accounting import Budget, view_costs
from .allocation import BUDGET_MARGIN, Allocation
from .decompose import Decomposition, GramTerm, SubworkloadGram, decompose, view_query_matrix
from .families import query_matrix_1d
from .linalg import content_hash, kron_dense, project_gram
from .workload import Workload, WorkloadView

__all__ = ["QueryClass", "query_classes", "weighted_decomposition", "max_variance_of", "allocate_max", "plan_max", "OBJECTIVES"]

OBJECTIVES = ("sum", "max")
DEFAULT_MAX_TARGET_GAP = 1e-3
DEFAULT_MAX_ITERATIONS = 60
INNER_TARGET_GAP = 1e-8
_NU_FLOOR = 1e-9  # relative floor on query weights: every query keeps a share of range(G)


@dataclass(frozen=True)
class QueryClass:
    """Workload views whose queries have equal variances under any symmetric mechanism."""

    views: tuple[int, ...]  # indices into workload.views
    queries: int  # weights per view: 1 (exchangeable marginal cells) or the view's query count
    weight: float  # the workload weight w of these queries

    @property
    def collapsed(self) -> bool:
        return self.queries == 1


def _is_marginal(v: WorkloadView) -> bool:
    return bool(v.factors) and all(f == "marginal" for f in v.factors)


def attribute_types(workload: Workload) -> list[tuple]:
    """Attributes of equal type can be permuted without changing the workload: same size and kind,
    and not used by a random or custom view (those are pinned, each its own type)."""
    schema = workload.schema
    pinned = {a for v in workload.views if v.family in ("random", "custom") for a in v.attrs}
    return [(schema.sizes[a], schema.kinds[a], a if a in pinned else None) for a in range(len(schema))]


def view_orbits(workload: Workload, views: list[tuple[int, ...]]) -> list[int]:
    """An orbit label per residual view (views of equal attribute types get equal mechanisms and,
    at an optimum, equal noise)."""
    types = attribute_types(workload)
    labels: dict[tuple, int] = {}
    return [labels.setdefault(tuple(types[a] for a in sub), len(labels)) for sub in views]


def query_classes(workload: Workload) -> list[QueryClass]:
    """Orbits of workload views under the attribute permutations that fix the workload."""
    types_of = attribute_types(workload)
    groups: dict[tuple, list[int]] = {}
    for j, v in enumerate(workload.views):
        types = tuple(types_of[a] for a in v.attrs)
        groups.setdefault((v.term, v.family, v.factors, v.weight, types), []).append(j)
    out = []
    for js in groups.values():
        v = workload.views[js[0]]
        out.append(QueryClass(tuple(js), 1 if _is_marginal(v) else workload.view_count(v), v.weight))
    return out


def _view_queries(workload: Workload, v: WorkloadView) -> np.ndarray:
    if v.factors:
        return kron_dense([query_matrix_1d(f, workload.schema.sizes[a]) for f, a in zip(v.factors, v.attrs)])
    return view_query_matrix(workload, v)


def weighted_decomposition(workload: Workload, classes: list[QueryClass], nu: list[np.ndarray]) -> Decomposition:
    """The residual decomposition of the workload with query weights w_q nu_q (nu per class, spread
    evenly over the class's views): Kronecker for collapsed classes, explicit Grams otherwise."""
    scalar_views, explicit = [], []
    for c, n in zip(classes, nu):
        share = np.asarray(n, dtype=float) / len(c.views)
        for j in c.views:
            v = workload.views[j]
            if c.collapsed:  # nu_c spread over every (exchangeable) query of the class
                per_query = float(share[0]) / workload.view_count(v)
                scalar_views.append(dataclasses.replace(v, weight=v.weight * per_query))
            else:
                explicit.append((c, j, share))
    d = decompose(Workload(workload.schema, workload.terms, tuple(scalar_views), workload.custom))
    terms: dict[tuple[int, ...], list[GramTerm]] = {a: list(g.terms) for a, g in d.grams.items()}
    sizes_all = workload.schema.sizes
    parts_of: dict[int, list] = {}
    for c, j, share in explicit:
        v = workload.views[j]
        sizes = tuple(sizes_all[a] for a in v.attrs)
        if id(c) not in parts_of:  # views of one class have the same queries: project once
            q = _view_queries(workload, v)
            g = q.T @ ((c.weight * share)[:, None] * q)
            tol = 1e-12 * max(1.0, float(np.abs(g).max(initial=0.0)))
            parts = []
            for keep in itertools.product((False, True), repeat=len(sizes)):
                p = project_gram(g, sizes, keep)
                parts.append((keep, *(d.store.intern(p, zero_tol=tol) if any(keep) else (None, float(p[0, 0])))))
            parts_of[id(c)] = parts
        for keep, key, scale in parts_of[id(c)]:
            sub = tuple(a for a, k in zip(v.attrs, keep) if k)
            if not sub and scale > 0:
                terms.setdefault(sub, []).append(GramTerm(scale, (), False))
            elif key is not None:
                terms.setdefault(sub, []).append(GramTerm(scale, (key,), len(sub) > 1))
    grams = {a: SubworkloadGram(a, tuple(sizes_all[i] for i in a), tuple(ts)) for a, ts in sorted(terms.items(), key=lambda kv: (len(kv[0]), kv[0])) if ts}
    return Decomposition(workload, d.store, grams, d.seconds)


_PINV_CACHE: dict[str, np.ndarray] = {}  # content hash of a mechanism matrix -> its pseudo-inverse; cleared per plan_max


def _pinv_of(m: np.ndarray) -> np.ndarray:
    """pinv_psd, once per distinct matrix content (RP and WFF rebuild equal factors for every view)."""
    from .solvers.base import pinv_psd

    key = content_hash(str(m.shape), np.ascontiguousarray(m).tobytes())
    if key not in _PINV_CACHE:
        _PINV_CACHE[key] = pinv_psd(m)
    return _PINV_CACHE[key]


def _view_loss(gram: SubworkloadGram, store, mech) -> float:
    """tr(G X^+), factor-wise with cached pseudo-inverses when both are Kronecker."""
    from .solvers import mechanism_loss

    if mech.kind == "kron" and all(not t.dense for t in gram.terms):
        pinvs = [_pinv_of(m) for m in mech.mats]
        return float(sum(t.coef * math.prod(float(np.sum(store[f] * p)) for f, p in zip(t.factors, pinvs)) for t in gram.terms))
    return mechanism_loss(gram, store, mech)


def _marginal_cell_variance(plan, v: WorkloadView) -> float:
    """Var of one cell of a marginal view: sum over measured residual views A' of sigma^2 times
    prod_{dropped} 1/n_i^2 times u X^+ u^T, u = ⊗_{kept} (e_0 - 1/n_i) (factor-wise for kron)."""
    sizes = plan.schema.sizes
    measured = {a: i for i, a in enumerate(plan.views) if np.isfinite(plan.allocation.sigma2[i])}
    total = 0.0
    for keep in itertools.product((False, True), repeat=len(v.attrs)):
        sub = tuple(a for a, k in zip(v.attrs, keep) if k)
        if sub not in measured:
            continue
        i = measured[sub]
        mech = plan.solutions[plan.keys[i]].mechanism
        us = [np.eye(1, sizes[a]).ravel() - 1.0 / sizes[a] for a in sub]
        if mech.kind == "kron":
            quad = math.prod(float(u @ _pinv_of(m) @ u) for u, m in zip(us, mech.mats))
        else:
            u = kron_dense([u[None, :] for u in us]).ravel()
            quad = float(u @ _pinv_of(mech.mats[0] if mech.kind == "dense" else mech.dense_x()) @ u) if us else 1.0 / float(mech.dense_x()[0, 0])
        dropped = math.prod(1.0 / sizes[a] ** 2 for a, k in zip(v.attrs, keep) if not k)
        total += float(plan.allocation.sigma2[i]) * dropped * quad
    return total


def _representative_variances(plan, c: QueryClass) -> np.ndarray:
    """Var_q of the class's queries on its first view (one marginal cell for a collapsed class:
    all cells of a marginal have the same variance)."""
    from .variances import view_variances

    v = plan.workload.views[c.views[0]]
    if c.collapsed:
        return np.array([_marginal_cell_variance(plan, v)])
    return view_variances(plan, v)


def _class_variances(plan, classes: list[QueryClass]) -> list[np.ndarray]:
    """w_q Var_q for the queries of each class, from one representative view (symmetry)."""
    return [c.weight * _representative_variances(plan, c) for c in classes]


def max_variance_of(plan) -> tuple[float, int, int]:
    """(max_q w_q Var_q, workload view index, query index in that view) over every query of the plan.

    Residual plans treat the views of one query class alike (one solve per distinct subproblem,
    one noise scale per Gram), so one representative per class is evaluated (one cell of a
    marginal view: its cells are exchangeable); a full-domain plan (``mm``) has no such symmetry
    and every view is evaluated.
    """
    from .fulldomain import is_full_domain_plan
    from .variances import view_variances

    best = (-np.inf, -1, -1)
    if is_full_domain_plan(plan):
        candidates = ((j, v.weight * view_variances(plan, v)) for j, v in enumerate(plan.workload.views))
    else:
        candidates = ((c.views[0], c.weight * _representative_variances(plan, c)) for c in query_classes(plan.workload))
    try:
        for j, var in candidates:
            i = int(np.argmax(var))
            if var[i] > best[0]:
                best = (float(var[i]), j, i)
    finally:
        _PINV_CACHE.clear()
    return best


def _contributions(plan, classes: list[QueryClass], orbits: list[int]) -> np.ndarray:
    """A[q, g] = w_q Var_q when every view of orbit g has sigma^2 = 1 and no other view is measured
    (rows: class queries, from each class's representative view)."""
    orbit_of = dict(zip(plan.views, orbits))
    a = np.zeros((sum(c.queries for c in classes), max(orbits) + 1))
    row = 0
    for c in classes:
        v = plan.workload.views[c.views[0]]
        subs = [sub for r in range(len(v.attrs) + 1) for sub in itertools.combinations(v.attrs, r) if sub in orbit_of]
        for g in sorted({orbit_of[sub] for sub in subs}):
            s2 = np.where(np.array(orbits) == g, 1.0, np.inf)
            one = dataclasses.replace(plan, allocation=Allocation(s2, 0.0, plan.budget.beta, plan.allocation.costs))
            a[row:row + c.queries, g] = c.weight * _representative_variances(one, c)
        row += c.queries
    return a


@dataclass(frozen=True)
class _AllocationResult:
    sigma2: np.ndarray  # per view (inf: not measured)
    upper: float  # max_q (A s)_q at the returned s, which spends exactly beta
    lower: float  # (sum_v sqrt(c_v (lambda^T A)_v))^2 / beta: no allocation of these shapes does better
    lam: np.ndarray  # multipliers of the max (on the simplex)
    values: np.ndarray  # (A s)_q: each row's weighted variance at the returned s


def _allocation_lower(a: np.ndarray, costs: np.ndarray, lam: np.ndarray, beta: float) -> float:
    return float(np.sqrt(costs * np.maximum(lam @ a, 0.0)).sum()) ** 2 / beta


def allocate_max(a: np.ndarray, costs: np.ndarray, beta: float, *, polish_tol: float = 1e-11, polish_steps: int = 3000) -> _AllocationResult:
    """min_s max_q (A s)_q s.t. sum_v c_v / s_v <= beta, s > 0 (views with a zero column unmeasured).

    cvxpy/Clarabel gives a starting point; the dual is then polished by multiplicative steps
    lambda_q <- lambda_q ((A s(lambda))_q / (lambda^T A s(lambda)))^2, where s(lambda) is the
    weighted-sum allocation s_v = gamma sqrt(c_v / (lambda^T A)_v): every step gives an exact lower
    bound (the dual value) and an exact upper bound (max_q (A s(lambda))_q), and the best pair is kept.
    """
    import cvxpy as cp

    used = np.flatnonzero(a.max(axis=0) > 0)
    au, cu = a[:, used], costs[used]
    scale = float(au.max())
    u = cp.Variable(used.size, pos=True)  # precisions 1 / s_v, so the budget is linear
    t = cp.Variable()
    rows = (au / scale) @ cp.inv_pos(u) <= t
    try:
        cp.Problem(cp.Minimize(t), [cp.sum(cp.multiply(cu, u)) <= beta, rows]).solve(solver=cp.CLARABEL)
        lam = np.maximum(np.asarray(rows.dual_value, dtype=float).ravel(), 0.0)
        prec = np.maximum(np.asarray(u.value, dtype=float), 1e-300)
    except (cp.error.SolverError, TypeError, ValueError):  # fall back to the polishing steps alone
        lam, prec = np.ones(au.shape[0]), np.ones(used.size)
    lam = lam / lam.sum() if lam.sum() > 0 else np.full(au.shape[0], 1.0 / au.shape[0])
    prec *= beta / float(cu @ prec)  # spend exactly beta
    best_s, best_up = 1.0 / prec, float((au / prec).sum(axis=1).max())
    best_lam, best_low = lam, _allocation_lower(au, cu, lam, beta)
    floor = 1e-15
    for _ in range(polish_steps):
        if (best_up - best_low) <= polish_tol * best_up:
            break
        lam = np.maximum(lam, floor * lam.max())
        lam = lam / lam.sum()
        b = lam @ au
        root = np.sqrt(cu * b)
        s_v = root.sum() / beta * np.sqrt(cu / b)
        vals = au @ s_v
        low = float(root.sum()) ** 2 / beta
        if low > best_low:
            best_low, best_lam = low, lam
        if vals.max() < best_up:
            best_up, best_s = float(vals.max()), s_v
        lam = lam * (vals / float(lam @ vals)) ** 2
    sigma2 = np.full(a.shape[1], np.inf)
    sigma2[used] = best_s
    values = au @ best_s
    return _AllocationResult(sigma2, float(values.max()), best_low, best_lam, values)


def _split(flat: np.ndarray, classes: list[QueryClass]) -> list[np.ndarray]:
    return np.split(flat, np.cumsum([c.queries for c in classes])[:-1])


def plan_max(
    schema,
    workload,
    method: str,
    budget: Budget,
    *,
    all_numeric: bool = False,
    solver_options: dict | None = None,
    target_gap: float = DEFAULT_MAX_TARGET_GAP,
    max_iterations: int = DEFAULT_MAX_ITERATIONS,
    max_cells: int = 2500,
):
    """A plan minimising the largest weighted query variance, with a certificate (see module doc)."""
    from .plan import Plan, assemble_plan, solve_distinct
    from .schema import parse_schema
    from .solvers import get_solver
    from .workload import parse_workload

    t0 = time.perf_counter()
    _PINV_CACHE.clear()
    if isinstance(schema, str):
        schema = parse_schema(schema, all_numeric=all_numeric)
    if isinstance(workload, str):
        workload = parse_workload(workload, schema)
    classes = query_classes(workload)
    options = dict(solver_options or {})
    if method == "qs":
        # a weighted-sum optimum within gap g can still be off by ~sqrt(g) in single variances, which
        # the max objective sees: the per-view solves are certified much tighter than for "sum"
        options.setdefault("target_gap", INNER_TARGET_GAP)
    solver = get_solver(method, **options)
    base = decompose(workload)
    if hasattr(solver, "prepare"):
        solver.prepare(base)
    beta1 = Budget.from_beta(1.0)
    total = sum(c.queries for c in classes)
    exact_family = method in ("wff", "rp")  # their sum solutions are exact within their families

    def evaluate(nu_flat: np.ndarray):
        """(phi(nu), certified lower bound on it, w_q Var_q per class query, plan, max-allocation)."""
        d = weighted_decomposition(workload, classes, _split(nu_flat, classes))
        wplan = assemble_plan(d, solve_distinct(d.distinct(), d.store, solver), method, beta1)
        phi = wplan.total_variance
        low = phi if exact_family else (wplan.lower_bound if wplan.certified else 0.0)
        variances = np.concatenate(_class_variances(wplan, classes))
        orbits = np.array(view_orbits(workload, wplan.views))
        costs = view_costs(wplan.keys, wplan.solutions, budget.neighbours)
        alloc = allocate_max(_contributions(wplan, classes, list(orbits)), np.bincount(orbits, weights=costs), 1.0)
        if method == "rp":  # shapes do not depend on nu: the allocation dual certifies the family optimum
            low = max(low, alloc.lower)
        return phi, low, variances, wplan, dataclasses.replace(alloc, sigma2=alloc.sigma2[orbits])

    def reallocate(wplan):
        """The max-optimal allocation of a plan's per-view shapes (one noise scale per view orbit)."""
        orbits = np.array(view_orbits(workload, wplan.views))
        costs = view_costs(wplan.keys, wplan.solutions, budget.neighbours)
        alloc = allocate_max(_contributions(wplan, classes, list(orbits)), np.bincount(orbits, weights=costs), 1.0)
        return dataclasses.replace(alloc, sigma2=alloc.sigma2[orbits])

    nu = np.full(total, 1.0 / total)
    phi, low, var, wplan, alloc = evaluate(nu)
    best_low, best_up, best = low, alloc.upper, (wplan, alloc)
    # candidate mechanisms at full budget: (plan, sigma2, weighted class-query variances); both the
    # sum-optimal one (its variances are the gradient of phi) and the max-allocated one per iterate
    iterates = [(wplan, wplan.allocation.sigma2, var), (wplan, alloc.sigma2, alloc.values)]
    history = [(low, alloc.upper)]
    eta, iterations, mix = 1.0, 1, None
    # exponentiated-gradient ascent on the concave phi (gradient: the variances), with backtracking
    while iterations < max_iterations:
        mix = _best_mixture([it[2] for it in iterates])
        if (min(best_up, mix[1]) - best_low) / min(best_up, mix[1]) <= target_gap:
            break
        iterations += 1
        step = nu * np.exp(np.clip(eta * (var / phi - 1.0), -50.0, 50.0))
        cand = np.maximum(step / step.sum(), _NU_FLOOR / total)
        cand /= cand.sum()
        c_phi, c_low, c_var, c_plan, c_alloc = evaluate(cand)
        iterates += [(c_plan, c_plan.allocation.sigma2, c_var), (c_plan, c_alloc.sigma2, c_alloc.values)]
        history.append((c_low, c_alloc.upper))
        best_low = max(best_low, c_low)
        if c_alloc.upper < best_up:
            best_up, best = c_alloc.upper, (c_plan, c_alloc)
        if c_phi >= phi:
            nu, phi, var = cand, c_phi, c_var
            eta = min(eta * 1.5, 64.0)
        else:
            eta /= 2
    # the multipliers of the best max-allocation are query weights too: when the shapes at those
    # weights are the same (as for marginals, whose shapes never change), phi there closes the gap
    if (best_up - best_low) / best_up > 0:
        lam = np.maximum(best[1].lam, _NU_FLOOR / total)
        l_phi, l_low, l_var, l_plan, l_alloc = evaluate(lam / lam.sum())
        history.append((l_low, l_alloc.upper))
        best_low = max(best_low, l_low)
        if l_alloc.upper < best_up:
            best_up, best = l_alloc.upper, (l_plan, l_alloc)
    # the mixture sum_t alpha_t Y^t of the iterates' mechanisms is feasible and, by convexity, no
    # query's variance exceeds sum_t alpha_t Var_q(Y^t); its own max-allocation can only improve it
    if mix is not None and mix[1] < best_up:
        mixed = _mixed_plan(workload, [(a, iterates[t][0], iterates[t][1]) for t, a in mix[0]], method, beta1, max_cells)
        if mixed is not None:
            m_alloc = reallocate(mixed)
            if m_alloc.upper < best_up:
                best_up, best = m_alloc.upper, (mixed, m_alloc)
    wplan, alloc = best
    # the final plan: the best shapes with the max-optimal allocation, losses on the real workload
    # spend beta (1 - BUDGET_MARGIN) as the sum allocation does, so measure's re-check never sees
    # rounding above beta (the polished max-allocation spends beta up to ~1e-15)
    sigma2 = alloc.sigma2 / (budget.beta * (1 - BUDGET_MARGIN))
    grams = base.grams
    losses = np.array([_view_loss(grams[a], base.store, wplan.solutions[k].mechanism) if a in grams else 0.0 for a, k in zip(wplan.views, wplan.keys)])
    costs = view_costs(wplan.keys, wplan.solutions, budget.neighbours)
    finite = np.isfinite(sigma2)
    spent = float(np.sum(costs[finite] / sigma2[finite]))
    if spent > budget.beta * (1 - BUDGET_MARGIN):
        sigma2 = sigma2 * (spent / (budget.beta * (1 - BUDGET_MARGIN)))
    allocation = Allocation(sigma2, float(np.sum(sigma2[finite] * losses[finite])), budget.beta, costs)
    plan = Plan(
        schema, workload, method, budget, list(wplan.views), list(wplan.keys), np.ones(len(wplan.views)), losses,
        np.zeros(len(wplan.views)), allocation, wplan.solutions, wplan.workload_views,
        {"max_objective": time.perf_counter() - t0}, list(wplan.notes), "max",
    )
    value = plan.max_variance[0]
    lower = best_low / budget.beta
    plan.max_certificate = {
        "max_variance_lower_bound": lower,
        "max_variance_gap": (value - lower) / value if value > 0 else 0.0,
        "max_iterations": iterations,
        "max_history": [(lo / budget.beta, up / budget.beta) for lo, up in history],
    }
    _PINV_CACHE.clear()
    return plan


def _best_mixture(values: list[np.ndarray]) -> tuple[list[tuple[int, float]], float]:
    """min_alpha max_q sum_t alpha_t V_t[q] over the simplex (a linear program): ((t, alpha_t), value)."""
    from scipy.optimize import linprog

    v = np.array(values)  # iterates x rows
    if len(values) == 1:
        return [(0, 1.0)], float(v.max())
    k = v.shape[0]
    # variables (alpha_1..alpha_k, z): minimise z s.t. V^T alpha - z <= 0, sum alpha = 1
    res = linprog(np.r_[np.zeros(k), 1.0], A_ub=np.c_[v.T, -np.ones(v.shape[1])], b_ub=np.zeros(v.shape[1]),
                  A_eq=np.r_[np.ones(k), 0.0][None, :], b_eq=[1.0], bounds=[(0, None)] * k + [(None, None)], method="highs")
    if res.status != 0:
        t = int(np.argmin(v.max(axis=1)))
        return [(t, 1.0)], float(v[t].max())
    alpha = np.maximum(res.x[:k], 0.0)
    alpha /= alpha.sum()
    support = [(t, float(a)) for t, a in enumerate(alpha) if a > 1e-12]
    return support, float((alpha @ v).max())


def _mixed_plan(workload: Workload, parts: list, method: str, budget: Budget, max_cells: int):
    """The plan measuring, per view, Y_v = sum_t alpha_t X_v^t / sigma_{v,t}^2 (as one mechanism at
    cost max diag Y_v); None when a view that differs across iterates is too large to hold densely."""
    from .plan import Plan
    from .solvers import ViewMechanism, ViewSolution

    first = parts[0][1]
    views = list(first.views)
    keys, sols, prec = [], {}, np.zeros(len(views))
    for i, attrs in enumerate(views):
        mechs = [(a, p.solutions[p.keys[i]].mechanism, s2[i]) for a, p, s2 in parts if np.isfinite(s2[i])]
        sig = content_hash("mix", *(f"{a!r}:{p.keys[i]}:{s2[i]!r}" for a, p, s2 in parts))
        if not mechs:
            keys.append(sig)
            sols.setdefault(sig, ViewSolution(parts[0][1].solutions[parts[0][1].keys[i]].mechanism, 0.0, 0.0, method))
            prec[i] = 0.0
            continue
        if all(m is mechs[0][1] for _, m, _ in mechs):
            mech, p_i = mechs[0][1], sum(a / s2 for a, _, s2 in mechs)
        else:
            if math.prod(mechs[0][1].sizes) > max_cells:
                return None
            y = sum(a * m.dense_x() / s2 for a, m, s2 in mechs)
            p_i = float(np.diag(y).max())
            mech = ViewMechanism("dense", mechs[0][1].sizes, (y / p_i,))
        if sig not in sols:
            sols[sig] = ViewSolution(mech, 0.0, 0.0, method, "mixture of max-objective iterates")
        keys.append(sig)
        prec[i] = p_i
    sigma2 = np.where(prec > 0, 1.0 / np.where(prec > 0, prec, 1.0), np.inf)
    costs = view_costs(keys, sols, budget.neighbours)
    alloc = Allocation(sigma2, 0.0, budget.beta, costs)
    return Plan(workload.schema, workload, method, budget, views, keys, np.ones(len(views)), np.zeros(len(views)), np.zeros(len(views)),
                alloc, sols, first.workload_views)
