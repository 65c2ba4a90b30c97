"""The ``qsplus`` planner: :func:`plan` turns (schema, workload, budget) into a :class:`MarginalPlan`.

It plans ``qs`` first (the residual family's certified optimum, the reference and the start),
builds the marginal-family problem (:mod:`.problem`), folds the ``qs`` plan into it, optimises
to the certified gap (:mod:`.optimize`; for a uniform schema with the same pair queries on every
pair, the exact reduced SDP of :mod:`.symmetric` instead) and keeps the better of the start and the
optimum, so the plan never ends above ``qs``. Privacy (zCDP/beta-style: the views' costs add up): under add-remove
neighbours a view's mechanism costs its Gram's largest diagonal entry, and the optimum is certified;
under replace it costs its largest cell-pair distance (:func:`.operators.applied_privacy_cost`), and the
plan is the add-remove optimum with every noise scaled to spend the budget under replace (valid,
not certified: the optimiser's cost constraints are the diagonal ones).

>>> p = plan("synthetic:n=3,d=2", "affine:2", target_gap=1e-3)
>>> p.rmse <= p.qs_rmse, p.gap <= 1e-3, abs(p.privacy_cost() - 1.0) < 1e-9
(True, True, True)
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np

from ..accounting import Budget
from ..allocation import BUDGET_MARGIN, relative_gap, rmse
from ..errors import InputError
from ..plan import Plan
from ..planners.residual import plan_residual
from ..schema import Schema, parse_schema
from ..solvers.qs import QSSolver
from ..workload import Workload, parse_workload
from . import restricted, symmetric
from .deadline import TimeLimit, check_deadline
from .operators import applied_privacy_cost, measurement_operators
from .optimize import (
    DEFAULT_TARGET_GAP,
    JITTER,
    SINGLE_THREAD_CELLS,
    Solution,
    filled_correlation,
    least_mixed,
    optimise,
    start_from_residual_plan,
)
from .problem import MarginalProblem, build_problem, marginal_view_attrs
from .symmetric_polish import polish_restricted

log = logging.getLogger(__name__)

__all__ = ["MarginalPlan", "plan", "METHOD"]

METHOD = "qsplus"
AUTO_LARGE_VIEWS = (
    4  # "auto" keeps larger views residual when a non-uniform schema has more views above 400 cells than this
)
RESTRICT_BELOW = (
    0.5  # "auto" runs the restricted descent on a large untied problem when it keeps at most this share of the tops
)


@dataclass(eq=False)
class MarginalPlan:
    """A marginal-family plan at its budget (add-remove).

    ``views``: the marginal views (attribute tuples); view k measures its marginal x_k with the
    Gram X_k = ``shares[k]`` * F F^T, F = ``factors[factor_of[k]]`` (unit-diagonal correlation
    factor, cells x cells), so its cost is ``shares[k]``. ``residual_views``: residual-only subsets
    measured as in ``qs`` (their mechanism from ``residual_plan`` with noise ``residual_sigma2``).
    ``total_variance`` is the planned total weighted variance at the budget; ``lower_bound`` the
    certified bound on the family's optimum; ``qs_total_variance`` the reference."""

    schema: Schema
    workload: Workload
    budget: Budget
    problem: MarginalProblem
    views: list[tuple[int, ...]]
    factors: list[np.ndarray]
    factor_of: np.ndarray
    shares: np.ndarray
    residual_views: list[tuple[int, ...]]
    residual_sigma2: np.ndarray
    residual_plan: Plan
    total_variance: float
    lower_bound: float
    qs_total_variance: float
    iterations: int = 0
    phase_seconds: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    method: str = METHOD
    problem_options: dict = field(default_factory=lambda: {"max_view_size": 2, "max_view_cells": None})

    file_kind: ClassVar[str] = "marginal-plan"  # its plan-kind record (querysmasher.plankinds)

    @property
    def tied(self) -> bool:
        return self.problem.tied

    @property
    def queries(self) -> float:
        return self.workload.query_count(weighted=True)

    @property
    def rmse(self) -> float:
        return rmse(self.total_variance, self.queries)

    @property
    def qs_rmse(self) -> float:
        return rmse(self.qs_total_variance, self.queries)

    @property
    def ratio(self) -> float:
        """RMSE of this plan over that of ``qs`` (at most 1)."""
        return math.sqrt(self.total_variance / self.qs_total_variance) if self.qs_total_variance > 0 else 1.0

    @property
    def gap(self) -> float:
        return relative_gap(self.total_variance, self.lower_bound)

    def gram(self, k: int) -> np.ndarray:
        """X_k over the cells of view k (its privacy Gram at unit noise)."""
        f = self.factors[int(self.factor_of[k])]
        return float(self.shares[k]) * (f @ f.T)

    def residual_mechanism(self, j: int):
        """The ``qs`` mechanism (cost <= 1 at unit noise) of residual-only subset j."""
        i = self.residual_plan.views.index(self.residual_views[j])
        return self.residual_plan.solutions[self.residual_plan.keys[i]].mechanism

    def privacy_cost(self) -> float:
        """The plan's privacy cost under its budget's relation: add-remove, sum_k max diag X_k +
        sum_T cost_T / sigma_T^2 from the plan's fields; replace, of the operators measure applies."""
        if self.budget.neighbours != "add-remove":
            return applied_privacy_cost(measurement_operators(self), self.budget.neighbours)
        c = sum(
            float(
                np.max(
                    np.einsum("ij,ij->i", self.factors[int(self.factor_of[k])], self.factors[int(self.factor_of[k])])
                )
            )
            * float(self.shares[k])
            for k in range(len(self.views))
        )
        for j in range(len(self.residual_views)):
            c += self.residual_mechanism(j).cost("add-remove") / float(self.residual_sigma2[j])
        return c

    def summary(self) -> dict:
        return {
            "schema": self.schema.name,
            "workload": self.workload.spec,
            "method": self.method,
            "rmse": self.rmse,
            "total_variance": self.total_variance,
            "lower_bound": self.lower_bound,
            "lower_bound_rmse": rmse(self.lower_bound, self.queries),
            "gap": self.gap,
            "qs_rmse": self.qs_rmse,
            "qs_total_variance": self.qs_total_variance,
            "ratio": self.ratio,
            "queries": self.queries,
            "views": len(self.workload.views),
            "marginal_views": len(self.views),
            "residual_only_views": len(self.residual_views),
            "lower_dim": self.problem.lower_dim,
            "tied": self.tied,
            "iterations": self.iterations,
            **self.budget.to_dict(),
            "seconds": sum(self.phase_seconds.values()),
            "phase_seconds": dict(self.phase_seconds),
            "notes": list(self.notes),
        }

    def __repr__(self) -> str:
        return (
            f"MarginalPlan({self.workload.spec} over {self.schema.name}: RMSE {self.rmse:.6g} (qs {self.qs_rmse:.6g}, "
            f"ratio {self.ratio:.4f}), gap {self.gap:.1e}, {len(self.views)} marginal views, "
            f"beta {self.budget.beta:.4g})"
        )


def plan(
    schema: Schema | str,
    workload: Workload | str,
    budget: Budget | None = None,
    *,
    max_view_size: int = 2,
    max_view_cells: int | None = None,
    target_gap: float = DEFAULT_TARGET_GAP,
    tie: bool | None = None,
    max_seconds: float = 3600.0,
    max_iterations: int = 20000,
    residual_plan: Plan | None = None,
    all_numeric: bool = False,
    optimiser_options: dict | None = None,
) -> MarginalPlan:
    """Plan ``workload`` in the marginal family (module docstring).

    ``budget``: a :class:`~querysmasher.accounting.Budget` (default beta = 1; add-remove only).
    ``max_view_size``: workload views of 1..this many attributes get a marginal-space mechanism
    (larger ones keep their ``qs`` residual mechanisms), and only those of at most ``max_view_cells``
    cells (None: any; under "auto", on a non-uniform schema with more than AUTO_LARGE_VIEWS views
    above 400 cells, those stay residual, with a note: :func:`_auto_max_view_cells`). ``tie``: one shared mechanism
    for all views (None: when the workload is symmetric under attribute permutations). ``residual_plan``:
    a ``qs`` plan of the same workload at beta = 1 (planned here when None). ``optimiser_options``:
    passed to :func:`.optimize.optimise` (``method``: "auto", "lbfgs", "trust-krylov", "newton";
    ``mu_factor``, ``mu_start``, ``round_iterations``, ``newton_iterations``); "auto" first tries the
    exact reduced SDP of :mod:`.symmetric` where it applies (uniform schema, the same pair queries on
    every pair), "symmetric" insists on it; on an untied problem with views of more than 400 cells
    whose tops the workload spans only in part (affine or abs pairs of the paper's Table 3), and
    where it kept an uneven schema's many large views residual (Adult, Loans), "auto" runs the
    restricted descent of :mod:`.restricted`, "restricted" insists on it. ``max_seconds``: every
    phase stops once this many seconds have passed since the call (checked between views and
    inside every solver round); the best certified point is returned with the gap it reached (the
    folded ``qs`` start, gap 1, when no phase had one), noted."""
    t0 = time.perf_counter()
    budget = Budget.from_beta(1.0) if budget is None else budget
    if budget.neighbours != "add-remove":
        return _rescaled_for(
            budget,
            plan(
                schema,
                workload,
                budget.with_neighbours("add-remove"),
                max_view_size=max_view_size,
                max_view_cells=max_view_cells,
                target_gap=target_gap,
                tie=tie,
                max_seconds=max_seconds,
                max_iterations=max_iterations,
                residual_plan=residual_plan,
                all_numeric=all_numeric,
                optimiser_options=optimiser_options,
            ),
        )
    if not 0 < float(target_gap) < 1:
        raise InputError("target_gap", target_gap, "must be in (0, 1)")
    if isinstance(schema, str):
        schema = parse_schema(schema, all_numeric=all_numeric)
    if isinstance(workload, str):
        workload = parse_workload(workload, schema)
    if residual_plan is None:
        residual_plan = plan_residual(workload, "qs", QSSolver(), Budget.from_beta(1.0))
    t1 = time.perf_counter()
    options = dict(optimiser_options or {})
    how = options.get("method", "auto")
    notes = []
    capped = False  # "auto" kept the large views of an uneven schema residual
    if max_view_cells is None and how == "auto":
        max_view_cells = _auto_max_view_cells(workload, max_view_size, notes)
        capped = max_view_cells is not None
    problem = build_problem(
        workload, residual_plan, max_view_size=max_view_size, max_view_cells=max_view_cells, tie=tie
    )
    qs_tv = float(residual_plan.total_variance * residual_plan.budget.beta)  # at beta = 1
    if not problem.views:
        raise InputError(
            "workload", workload.spec, "has no attribute of size above 1: every query is the total, qsplus is qs here"
        )
    factors, shares, tau = start_from_residual_plan(problem, residual_plan)
    t2 = time.perf_counter()
    # the start's objective (its bound comes with the descent's first round, when there is one)
    start_obj = problem.evaluate(
        [problem.residual_gram(k, shares[k] * (f @ f.T)) for k, f in enumerate(factors)], tau, want_grad=False
    ).f
    start_low = 0.0
    if start_obj > qs_tv * (1 + 1e-9):
        notes.append(f"the folded qs start has objective {start_obj:.8g} above qs {qs_tv:.8g}")
    sol = fallback = None  # fallback: a certified point that missed the target, kept if time runs out
    deadline = t0 + max_seconds  # every phase stops at it with the best certified point it has
    try:
        if how in ("auto", "symmetric"):
            why = symmetric.applies(problem)
            if why and how == "symmetric":
                raise InputError(
                    "optimiser method", how, f"does not apply to {workload.spec} over {schema.name}: {why}"
                )
            if not why:
                check_deadline(deadline)
                reduced, restricted = _symmetric_solution(
                    problem, target_gap=target_gap, max_seconds=deadline - time.perf_counter()
                )
                if (
                    reduced.gap > target_gap
                    and not restricted
                    and problem.views[0].cells <= symmetric.INTERIOR_MAX_CELLS
                ):
                    fallback = reduced
                    check_deadline(deadline)
                    # SCS missed the target: the interior point method
                    exact, _ = _symmetric_solution(
                        problem, solver="CLARABEL", max_seconds=deadline - time.perf_counter()
                    )
                    low = max(exact.lower_bound, reduced.lower_bound)  # both bound the same optimum
                    reduced = exact if exact.objective < reduced.objective else reduced
                    reduced.lower_bound = min(reduced.objective, low)
                fallback = reduced
                if reduced.gap <= target_gap:
                    sol = reduced
                elif restricted:  # the optimum in practice, its certificate loose: the descent would not do better
                    notes.append(
                        f"pairs of {problem.views[0].cells} cells: the symmetric reduction kept each pair's top to its "
                        f"workload's span; certified gap {reduced.gap:.2e} only"
                    )
                    sol = reduced
                elif problem.views[0].cells > symmetric.INTERIOR_MAX_CELLS:  # the descent is far slower here
                    notes.append(
                        f"the symmetric reduction (first-order solver) stopped at certified gap {reduced.gap:.2e}"
                    )
                    sol = reduced
                else:
                    notes.append(
                        f"the symmetric reduction stopped at certified gap {reduced.gap:.2e}; the descent took over"
                    )
                    start_low = max(start_low, reduced.lower_bound)  # a bound on the same optimum
            options.pop("method", None)
        if how == "restricted" and problem.tied:
            raise InputError(
                "optimiser method",
                how,
                f"is for untied problems; {workload.spec} over {schema.name} shares one mechanism across its views",
            )
        descended = False
        if sol is None and (how == "restricted" or how == "auto" and _restricted_pays(problem, capped, deadline)):
            sol, low = _restricted_solution(problem, residual_plan, target_gap=target_gap, deadline=deadline)
            start_low = max(start_low, low)  # a bound on the same optimum
            descended = True
            options.pop("method", None)
            if sol is not None:
                notes.append(
                    "optimised by the restricted descent (each view's top kept to its workload's span) "
                    "and its Newton steps"
                )
        if sol is None and not descended:
            check_deadline(deadline)
            sol = optimise(
                problem,
                factors,
                shares,
                tau,
                target_gap=target_gap,
                max_seconds=deadline - time.perf_counter(),
                max_iterations=max_iterations,
                **options,
            )
    except TimeLimit:
        sol = fallback
    if time.perf_counter() > deadline:
        notes.append(
            f"the time limit ({max_seconds:g} s) passed: the best certified point is returned"
            + ("" if sol is not None else " (the folded qs start)")
        )
    if sol is None:
        sol = Solution(factors, shares, tau, start_obj, start_low, 0, 0.0, [(0, start_obj, start_low)])
    t3 = time.perf_counter()
    if sol.objective > start_obj:  # never end above the start
        sol = Solution(
            factors, shares, tau, start_obj, max(start_low, sol.lower_bound), sol.iterations, sol.seconds, sol.history
        )
    sol.lower_bound = min(sol.objective, max(sol.lower_bound, start_low))  # every bound found bounds the same optimum
    if sol.gap > target_gap:
        notes.append(f"stopped at certified gap {sol.gap:.2e} (target {target_gap:.0e})")
    beta = budget.beta * (1 - BUDGET_MARGIN)
    nv = len(problem.views)
    factor_of = np.zeros(nv, dtype=np.int64) if problem.tied else np.arange(nv)
    view_shares = np.array([float(sol.shares[int(factor_of[k])]) for k in range(nv)]) * beta
    # residual-only subsets: their share tau split as the closed-form allocation does
    res_sigma2 = np.zeros(len(problem.residual_only))
    if problem.residual_only:
        roots = problem.residual_roots
        a = residual_plan.allocation
        idx = [residual_plan.views.index(s) for s in problem.residual_only]
        costs = np.array([1.0 if a.costs is None else float(a.costs[i]) for i in idx])
        budget_each = sol.tau * beta * roots / roots.sum()  # cost spent on each
        res_sigma2 = costs / budget_each
    out = MarginalPlan(
        schema,
        workload,
        budget,
        problem,
        list(v.attrs for v in problem.views),
        sol.factors,
        factor_of,
        view_shares,
        list(problem.residual_only),
        res_sigma2,
        residual_plan,
        sol.objective / beta,
        sol.lower_bound / budget.beta,
        qs_tv / budget.beta,
        sol.iterations,
        {"qs": t1 - t0, "build": t2 - t1, "optimise": t3 - t2},
        notes,
        problem_options={
            "max_view_size": int(max_view_size),
            "max_view_cells": None if max_view_cells is None else int(max_view_cells),
        },
    )
    log.info("%r", out)
    return out


def _symmetric_solution(
    problem: MarginalProblem,
    solver: str | None = None,
    target_gap: float = DEFAULT_TARGET_GAP,
    max_seconds: float | None = None,
) -> tuple[Solution, bool]:
    """The optimum of :mod:`.symmetric`'s reduced SDP (by ``solver``, None: its default) as a
    :class:`~.optimize.Solution`: its pair Gram with the cell diagonal filled up to the cost (never a
    higher objective), evaluated exactly; and whether the reduction was restricted (its bound is
    the whole family's too: :mod:`.symmetric`). A restricted point is polished
    (:mod:`.symmetric_polish`); while the best point and bound so far miss ``target_gap``, the
    reduction solves again at tighter tolerances, warm-started, within ``max_seconds``."""
    t0 = time.perf_counter()
    best = {"f": math.inf, "c": None, "low": 0.0}

    def accept(sol: symmetric.SymmetricSolution) -> bool:
        if sol.restricted:
            sol = polish_restricted(
                problem, sol, max_seconds=None if max_seconds is None else max_seconds - (time.perf_counter() - t0)
            )
        f, c = _filled_point(problem, sol.gram)
        if f < best["f"] or best["c"] is None:
            best.update(f=f, c=c)
        best["low"] = max(best["low"], sol.lower_bound)  # every bound bounds the same optimum
        return best["f"] - min(best["low"], best["f"]) <= target_gap * best["f"]

    red = symmetric.solve_symmetric(problem, solver=solver, accept=accept, max_seconds=max_seconds)
    f, c = best["f"], best["c"]
    m = len(problem.views)
    factor = np.linalg.cholesky(c)
    shares = np.array([1.0 / m])
    low = min(best["low"], f)
    return Solution([factor], shares, 0.0, f, low, 0, time.perf_counter() - t0, [(0, f, low)]), red.restricted


def _auto_max_view_cells(workload: Workload, max_view_size: int, notes: list[str]) -> int | None:
    """ "auto"'s view size limit when the caller gives none: None, unless the schema is not uniform
    (no symmetric reduction) and more than AUTO_LARGE_VIEWS views exceed the cells the cell-basis
    descent handles; then those views keep their ``qs`` residual mechanisms (noted), as long as some
    view stays marginal. Measured (2 cores, Table 3's described workloads): with CPS's two such
    views the restricted descent takes every pair to 0.92 of ``qs``; Loans' 28 views of 400..4,000
    cells reached only 0.999 of ``qs`` in 31 minutes where its 400-cell family reached 0.979 in 5,
    and Adult's and Loans' ten 10,000-cell pairs are slower still (and hold 0.8 GB per Gram)."""
    sizes = workload.schema.sizes
    views = marginal_view_attrs(workload, max_view_size)
    large = [a for a in views if math.prod(sizes[i] for i in a) > SINGLE_THREAD_CELLS]
    uniform = len({sizes[i] for a in views for i in a}) <= 1
    if uniform or len(large) <= AUTO_LARGE_VIEWS or len(large) == len(views):
        return None
    notes.append(
        f"{len(large)} of the {len(views)} views have more than {SINGLE_THREAD_CELLS} cells: they keep their qs "
        f"residual mechanisms (the default for more than {AUTO_LARGE_VIEWS}; pass max_view_cells to choose)"
    )
    return SINGLE_THREAD_CELLS


def default_family_cells(workload: Workload) -> list[int]:
    """The cells of each marginal view of the default family (``max_view_size`` 2, the "auto"
    view size limit): what the workflow's resource requests are made from."""
    sizes = workload.schema.sizes
    cap = _auto_max_view_cells(workload, 2, [])
    return [math.prod(sizes[i] for i in a) for a in marginal_view_attrs(workload, 2, cap)]


def _restricted_pays(problem: MarginalProblem, capped: bool = False, deadline: float | None = None) -> bool:
    """Whether "auto" runs the restricted descent: an untied problem with a view beyond the cells the
    cell-basis descent handles, whose tops the restriction shrinks to at most RESTRICT_BELOW, or one
    whose large views "auto" kept residual (``capped``: Adult's and Loans' 400-cell families, 28-44
    views, where the restricted descent and its Newton steps certify 5e-10 to 3e-8 in 7-16 minutes and
    the cell-basis descent stood at 8e-3 and 4e-2 after 30)."""
    if problem.tied:
        return False
    return capped or (
        max(v.cells for v in problem.views) > SINGLE_THREAD_CELLS
        and restricted.kept_fraction(problem, deadline) <= RESTRICT_BELOW
    )


def _restricted_solution(
    problem: MarginalProblem, residual_plan: Plan, *, target_gap: float, deadline: float
) -> tuple[Solution | None, float]:
    """(The restricted descent of :mod:`.restricted` (every view's top kept to its workload's span)
    as a :class:`~.optimize.Solution` in the plan's form: per view the unit-diagonal factor of its
    cell Gram, the diagonal filled up to the view's cost; objective evaluated on the whole problem,
    its certified bound). The solution is None when the descent kept its start (the folded ``qs``
    plan, which the planner has already: turning it back into cell factors takes long on large
    views). :class:`~.optimize.TimeLimit` when ``deadline`` passes before the start is built."""
    t0 = time.perf_counter()
    rp, kept = restricted.restrict(problem, deadline)
    start = restricted.restricted_start(problem, rp, kept, residual_plan, deadline)
    best = restricted.descend(rp, start, max_seconds=deadline - time.perf_counter(), target_gap=target_gap)
    if best.ys is start.ys:
        return None, best.lower_bound
    f, factors, shares = restricted.cell_factors(problem, rp, best, deadline)
    low = min(best.lower_bound, f)
    return Solution(factors, shares, best.tau, f, low, 0, time.perf_counter() - t0, [(0, f, low)]), low


def _filled_point(problem: MarginalProblem, gram: np.ndarray) -> tuple[float, np.ndarray]:
    """(objective, Gram) of a tied pair Gram (max diagonal 1) with its cell diagonal filled up to the
    cost and mixed with a little of the identity until its objective is finite
    (:func:`.optimize.filled_correlation`, :func:`.optimize.least_mixed`)."""
    c, _ = filled_correlation(gram)
    f, mixed, _ = least_mixed(
        problem, [c], [1.0 / len(problem.views)], 0.0, mixes=(JITTER, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3)
    )
    if mixed is None:
        mix = 1e-3
        return math.inf, (1 - mix) * c + mix * np.eye(len(c))
    return f, mixed[0]


def _rescaled_for(budget: Budget, base: MarginalPlan) -> MarginalPlan:
    """``base`` (an add-remove plan at ``budget.beta``) with every noise variance scaled so that
    its operators cost ``budget.beta`` (less the margin) under ``budget.neighbours``; no lower bound
    (the certificate is for the diagonal constraints). The reference is ``qs`` under the same
    relation."""
    cost = applied_privacy_cost(measurement_operators(base), budget.neighbours)
    scale = budget.beta * (1 - BUDGET_MARGIN) / cost  # shares (1 / sigma^2) times this
    qs_ref = plan_residual(base.workload, "qs", QSSolver(), Budget.from_beta(1.0).with_neighbours(budget.neighbours))
    qs_tv = float(qs_ref.total_variance * qs_ref.budget.beta) / budget.beta
    out = replace(
        base,
        budget=budget,
        shares=base.shares * scale,
        residual_sigma2=base.residual_sigma2 / scale,
        total_variance=base.total_variance / scale,
        lower_bound=0.0,
        qs_total_variance=qs_tv,
        notes=list(base.notes)
        + [
            f"{budget.neighbours} neighbours: the add-remove optimum with its noise scaled to the "
            f"{budget.neighbours} cost "
            f"({cost:.6g} at the add-remove plan); not certified under {budget.neighbours}"
        ],
    )
    log.info("%r", out)
    return out
