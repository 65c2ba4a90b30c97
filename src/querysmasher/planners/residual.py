"""The residual planner: decompose a workload, solve each distinct residual view once, allocate the budget.

>>> from querysmasher.accounting import Budget
>>> from querysmasher.methods import get_method
>>> from querysmasher.schema import parse_schema
>>> from querysmasher.workload import parse_workload
>>> w = parse_workload("marginal:1", parse_schema("cps"))
>>> round(plan_residual(w, "rp", get_method("rp").build(), Budget.from_beta(1.0)).rmse, 3)
1.744
"""

from __future__ import annotations

import itertools
import logging
import time
import warnings

import numpy as np

from ..accounting import Budget, view_costs
from ..allocation import allocate
from ..decompose import Decomposition, SubworkloadGram, decompose
from ..linalg import MatrixStore
from ..logs import progress
from ..plan import Plan
from ..solvers import ViewSolution, ViewSolver
from ..threads import BLAS_THREADED_CELLS, budget, parallel_map
from ..workload import Workload

log = logging.getLogger(__name__)

__all__ = ["solve_distinct", "assemble_plan", "plan_residual"]


def solve_distinct(
    distinct: dict[str, SubworkloadGram], store: MatrixStore, solver: ViewSolver
) -> dict[str, ViewSolution]:
    """Solve each distinct (unit-trace) subproblem once (one INFO line each: loss, gap, seconds).

    With a thread budget above 1 (:mod:`querysmasher.threads`: the CLI's ``--threads``, an API
    call's ``threads``) the views of at least ``BLAS_THREADED_CELLS`` cells are solved one at a time
    with the whole budget for BLAS, then the smaller ones that many at a time, largest first, in
    forked processes of one BLAS thread each; the solutions are the same as one at a time."""
    name = getattr(solver, "name", "solver")

    def solve_one(key: str) -> tuple[ViewSolution, float]:
        t0 = time.perf_counter()
        return solver.solve(distinct[key], store), time.perf_counter() - t0

    if budget() > 1:
        by_size = sorted(distinct, key=lambda k: -distinct[k].cells)
        large = [k for k in by_size if distinct[k].cells >= BLAS_THREADED_CELLS]
        small = [k for k in by_size if distinct[k].cells < BLAS_THREADED_CELLS]
        order = large + small
        results = itertools.chain(map(solve_one, large), parallel_map(solve_one, small))
    else:
        order = list(distinct)
        results = map(solve_one, order)
    solved = {}
    for key, (sol, seconds) in progress(zip(order, results), desc=f"solve ({name})", total=len(order), unit="solve"):
        g = distinct[key]
        solved[key] = sol
        log.info(
            "solved %s: %d cells, %d terms, loss %.6g, gap %.2e, %.2f s (%s)%s",
            key[:12],
            g.cells,
            len(g.terms),
            sol.loss,
            sol.gap,
            seconds,
            sol.solver,
            f" {sol.note}" if sol.note else "",
        )
    return {k: solved[k] for k in distinct}


def _used(solutions, keys):
    """The solutions of ``keys``: the mapping itself when it holds exactly those (it may read its
    solutions when asked, as the workflow's allocate does: they are not all loaded here), else a dict."""
    used = dict.fromkeys(keys)
    if len(solutions) == len(used) and all(k in solutions for k in used):
        return solutions
    return {k: solutions[k] for k in used}


def assemble_plan(
    decomp: Decomposition,
    solutions: dict[str, ViewSolution],
    method: str,
    budget: Budget,
    phase_seconds: dict[str, float] | None = None,
) -> Plan:
    """Scale every view's solution by its Gram scale and allocate the budget."""
    t0 = time.perf_counter()
    views = list(decomp.grams)
    keys = [decomp.keys[a][0] for a in views]
    scales = np.array([decomp.keys[a][1] for a in views])
    losses = np.array([s * solutions[k].loss for k, s in zip(keys, scales)])
    lows = np.array([s * solutions[k].lower_bound for k, s in zip(keys, scales)])
    # Each mechanism's actual privacy cost (its max diagonal, at most 1), so none is assumed.
    costs = view_costs(keys, solutions, budget.neighbours)
    alloc = allocate(losses, budget.beta, costs)
    notes = sorted({f"{solutions[k].solver}: {solutions[k].note}" for k in keys if solutions[k].note})
    phases = dict(phase_seconds or {})
    phases["allocate"] = time.perf_counter() - t0
    plan = Plan(
        decomp.workload.schema,
        decomp.workload,
        method,
        budget,
        views,
        keys,
        scales,
        losses,
        lows,
        alloc,
        _used(solutions, keys),
        len({v.attrs for v in decomp.workload.views}),
        phases,
        notes,
    )
    log.info(
        "allocated beta %.6g over %d measured residual views: RMSE %.6g",
        budget.beta,
        int(np.isfinite(alloc.sigma2).sum()),
        plan.rmse,
    )
    return plan


def plan_residual(workload: Workload, method: str, solver: ViewSolver, budget: Budget) -> Plan:
    """The residual planner: decompose ``workload``, solve each distinct residual view once with
    ``solver``, allocate ``budget`` across the views in closed form (the paper's QuerySmasher, and
    RP, RP+, WFF with their solvers)."""
    decomp = decompose(workload)
    t0 = time.perf_counter()
    distinct = decomp.distinct()
    log.info(
        "decomposed %s: %d residual views, %d distinct subproblems, %.2f s",
        workload.spec,
        len(decomp.grams),
        len(distinct),
        decomp.seconds,
    )
    if hasattr(solver, "prepare"):  # solvers that need workload context (e.g. RP+'s per-attribute bases)
        solver.prepare(decomp)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        solutions = solve_distinct(distinct, decomp.store, solver)
    for w in caught:
        warnings.warn(w.message, w.category, stacklevel=2)
    phases = {"decompose": decomp.seconds, "solve": time.perf_counter() - t0}
    return assemble_plan(decomp, solutions, method, budget, phases)
