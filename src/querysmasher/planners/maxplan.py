r"""The max-variance planner: minimise the largest weighted query variance (objective ``max``)
by minimax duality over the sum solver (see :mod:`querysmasher.maxvar` for the objective, the
duality argument and the symmetry reduction).

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
import math
import time
from dataclasses import dataclass

import numpy as np

from ..accounting import Budget, view_costs
from ..allocation import BUDGET_MARGIN, Allocation
from ..decompose import decompose
from ..linalg import content_hash
from ..maxvar import (
    DEFAULT_MAX_ITERATIONS,
    DEFAULT_MAX_TARGET_GAP,
    NU_FLOOR,
    QueryClass,
    class_contributions,
    class_variances,
    query_classes,
    view_orbits,
    weighted_decomposition,
)
from ..methods import get_method
from ..plan import Plan
from ..schema import parse_schema
from ..solvers import ViewMechanism, ViewSolution, mechanism_loss
from ..workload import Workload, parse_workload
from .residual import assemble_plan, solve_distinct

__all__ = ["allocate_max", "plan_max"]


@dataclass(frozen=True)
class _AllocationResult:
    sigma2: np.ndarray  # per view (inf: not measured)
    upper: float  # max_q (A s)_q at the returned s, which spends exactly beta
    lower: float  # (sum_v sqrt(c_v (lambda^T A)_v))^2 / beta: no allocation of these shapes does better
    lam: np.ndarray  # multipliers of the max (on the simplex)
    values: np.ndarray  # (A s)_q: each row's weighted variance at the returned s


def _allocation_lower(a: np.ndarray, costs: np.ndarray, lam: np.ndarray, beta: float) -> float:
    return float(np.sqrt(costs * np.maximum(lam @ a, 0.0)).sum()) ** 2 / beta


def allocate_max(
    a: np.ndarray, costs: np.ndarray, beta: float, *, polish_tol: float = 1e-11, polish_steps: int = 3000
) -> _AllocationResult:
    """min_s max_q (A s)_q s.t. sum_v c_v / s_v <= beta, s > 0 (views with a zero column unmeasured).

    cvxpy/Clarabel gives a starting point; the dual is then polished by multiplicative steps
    lambda_q <- lambda_q ((A s(lambda))_q / (lambda^T A s(lambda)))^2, where s(lambda) is the
    weighted-sum allocation s_v = gamma sqrt(c_v / (lambda^T A)_v): every step gives an exact lower
    bound (the dual value) and an exact upper bound (max_q (A s(lambda))_q), and the best pair is kept.
    """
    import cvxpy as cp  # loads cvxpy only where it is used

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

    t0 = time.perf_counter()
    if isinstance(schema, str):
        schema = parse_schema(schema, all_numeric=all_numeric)
    if isinstance(workload, str):
        workload = parse_workload(workload, schema)
    classes = query_classes(workload)
    m = get_method(method)
    solver = m.build(**{**m.declared("max_options", {}), **(solver_options or {})})
    base = decompose(workload)
    if hasattr(solver, "prepare"):
        solver.prepare(base)
    beta1 = Budget.from_beta(1.0)
    total = sum(c.queries for c in classes)
    exact_family = bool(getattr(solver, "exact_in_family", False))  # its sum solutions are optimal within its family

    def evaluate(nu_flat: np.ndarray):
        """(phi(nu), certified lower bound on it, w_q Var_q per class query, plan, max-allocation)."""
        d = weighted_decomposition(workload, classes, _split(nu_flat, classes))
        wplan = assemble_plan(d, solve_distinct(d.distinct(), d.store, solver), method, beta1)
        phi = wplan.total_variance
        low = phi if exact_family else (wplan.lower_bound if wplan.certified else 0.0)
        variances = np.concatenate(class_variances(wplan, classes))
        orbits = np.array(view_orbits(workload, wplan.views))
        costs = view_costs(wplan.keys, wplan.solutions, budget.neighbours)
        alloc = allocate_max(class_contributions(wplan, classes, list(orbits)), np.bincount(orbits, weights=costs), 1.0)
        if getattr(
            solver, "fixed_shapes", False
        ):  # shapes do not depend on nu: the allocation dual certifies the family optimum
            low = max(low, alloc.lower)
        return phi, low, variances, wplan, dataclasses.replace(alloc, sigma2=alloc.sigma2[orbits])

    def reallocate(wplan):
        """The max-optimal allocation of a plan's per-view shapes (one noise scale per view orbit)."""
        orbits = np.array(view_orbits(workload, wplan.views))
        costs = view_costs(wplan.keys, wplan.solutions, budget.neighbours)
        alloc = allocate_max(class_contributions(wplan, classes, list(orbits)), np.bincount(orbits, weights=costs), 1.0)
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
        cand = np.maximum(step / step.sum(), NU_FLOOR / total)
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
        lam = np.maximum(best[1].lam, NU_FLOOR / total)
        l_phi, l_low, l_var, l_plan, l_alloc = evaluate(lam / lam.sum())
        history.append((l_low, l_alloc.upper))
        best_low = max(best_low, l_low)
        if l_alloc.upper < best_up:
            best_up, best = l_alloc.upper, (l_plan, l_alloc)
    # the mixture sum_t alpha_t Y^t of the iterates' mechanisms is feasible and, by convexity, no
    # query's variance exceeds sum_t alpha_t Var_q(Y^t); its own max-allocation can only improve it
    if mix is not None and mix[1] < best_up:
        mixed = _mixed_plan(
            workload, [(a, iterates[t][0], iterates[t][1]) for t, a in mix[0]], method, beta1, max_cells
        )
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
    losses = np.array(
        [
            mechanism_loss(grams[a], base.store, wplan.solutions[k].mechanism) if a in grams else 0.0
            for a, k in zip(wplan.views, wplan.keys)
        ]
    )
    costs = view_costs(wplan.keys, wplan.solutions, budget.neighbours)
    finite = np.isfinite(sigma2)
    spent = float(np.sum(costs[finite] / sigma2[finite]))
    if spent > budget.beta * (1 - BUDGET_MARGIN):
        sigma2 = sigma2 * (spent / (budget.beta * (1 - BUDGET_MARGIN)))
    allocation = Allocation(sigma2, float(np.sum(sigma2[finite] * losses[finite])), budget.beta, costs)
    plan = Plan(
        schema,
        workload,
        method,
        budget,
        list(wplan.views),
        list(wplan.keys),
        np.ones(len(wplan.views)),
        losses,
        # mechanisms stored as they are: their keys are the weighted decomposition's, whose query
        # factors the plan's workload does not have (querysmasher.queryfactor)
        np.zeros(len(wplan.views)),
        allocation,
        {k: dataclasses.replace(s, query_factor=None) for k, s in wplan.solutions.items()},
        wplan.workload_views,
        {"max_objective": time.perf_counter() - t0},
        list(wplan.notes),
        "max",
    )
    value = plan.max_variance[0]
    lower = best_low / budget.beta
    plan.max_certificate = {
        "max_variance_lower_bound": lower,
        "max_variance_gap": (value - lower) / value if value > 0 else 0.0,
        "max_iterations": iterations,
        "max_history": [(lo / budget.beta, up / budget.beta) for lo, up in history],
    }
    return plan


def _best_mixture(values: list[np.ndarray]) -> tuple[list[tuple[int, float]], float]:
    """min_alpha max_q sum_t alpha_t V_t[q] over the simplex (a linear program): ((t, alpha_t), value)."""
    from scipy.optimize import linprog  # loads scipy only where it is used

    v = np.array(values)  # iterates x rows
    if len(values) == 1:
        return [(0, 1.0)], float(v.max())
    k = v.shape[0]
    # variables (alpha_1..alpha_k, z): minimise z s.t. V^T alpha - z <= 0, sum alpha = 1
    res = linprog(
        np.r_[np.zeros(k), 1.0],
        A_ub=np.c_[v.T, -np.ones(v.shape[1])],
        b_ub=np.zeros(v.shape[1]),
        A_eq=np.r_[np.ones(k), 0.0][None, :],
        b_eq=[1.0],
        bounds=[(0, None)] * k + [(None, None)],
        method="highs",
    )
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
    return Plan(
        workload.schema,
        workload,
        method,
        budget,
        views,
        keys,
        np.ones(len(views)),
        np.zeros(len(views)),
        np.zeros(len(views)),
        alloc,
        sols,
        first.workload_views,
    )
