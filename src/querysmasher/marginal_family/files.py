"""``qsplus`` plan files (kind ``marginal-plan``): the optimised variables, checked on load.

A plan file stores the plan header (:mod:`querysmasher.planheader`), the problem's options
(``max_view_size``, ``max_view_cells``, whether the views share one mechanism), the optimised
variables (the marginal views, their unit-diagonal factors, ``factor_of`` and shares; the
residual-only subsets and their noise variances), what the plan keeps of its ``qs`` reference plan
at beta = 1 (each residual-only subset's mechanism, loss and privacy cost: the group
``residual_mechanisms`` in the format of :func:`querysmasher.planfile.write_solution`,
``residual_losses``, ``residual_costs``) and the planned/certified totals. Loading runs no planner,
solver or optimiser (planning ``qs`` again took minutes at [10]^40): it re-parses the schema and
workload, rebuilds the problem from them, the stored options and the stored residual-only subsets
(:func:`.problem.build_problem` with the ``qs`` plan restricted to those subsets, all a plan uses of
it), checks that its views are the stored ones and that the residual-only subsets are every subset
the workload touches beside the marginal views (its decomposition,
:func:`querysmasher.decompose.decompose`), and rebuilds the :class:`.planner.MarginalPlan` from the
stored variables. Every field is read through :mod:`querysmasher.h5read` with its type, shape and
range checked (one InputError naming the field otherwise). The privacy cost is not trusted from the
file: measure re-computes it from the applied operators (:func:`querysmasher.measure.check_budget`
on :func:`.release.marginal_measurements`). Files of earlier formats are refused in one line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import h5read as r
from ..accounting import Budget
from ..allocation import allocate
from ..decompose import decompose
from ..errors import InputError
from ..io import atomic_h5, new_group, open_h5, put, put_json
from ..noise import MAX_NOISE_VARIANCE
from ..plan import Plan
from ..planfile import read_solution, write_solution
from ..planheader import put_plan_header, put_views, read_plan_header, read_views
from ..schema import Schema
from ..workload import Workload
from .planner import MarginalPlan
from .problem import build_problem

__all__ = ["MARGINAL_PLAN_FORMAT", "save_marginal_plan", "load_marginal_plan"]

MARGINAL_PLAN_FORMAT = (
    3  # 1: without the residual-only subsets' mechanisms (planned again on load); 2: views as JSON lists
)


def save_marginal_plan(plan, path: str | Path) -> None:
    with atomic_h5(path, kind="marginal-plan") as f:
        f.attrs["marginal_plan_format"] = MARGINAL_PLAN_FORMAT
        put_plan_header(f, plan)
        put_json(
            f,
            "options",
            {
                "max_view_size": int(plan.problem_options["max_view_size"]),
                "max_view_cells": plan.problem_options["max_view_cells"],
                "tie": bool(plan.tied),
            },
        )
        f.attrs["total_variance"] = float(plan.total_variance)
        f.attrs["lower_bound"] = float(plan.lower_bound)
        f.attrs["qs_total_variance"] = float(plan.qs_total_variance)
        f.attrs["iterations"] = int(plan.iterations)
        put_views(new_group(f, "views"), plan.views)
        put_views(new_group(f, "residual_views"), plan.residual_views)
        put(f, "factor_of", np.asarray(plan.factor_of, dtype=np.int64))
        put(f, "shares", np.asarray(plan.shares, dtype=np.float64))
        put(f, "residual_sigma2", np.asarray(plan.residual_sigma2, dtype=np.float64))
        g = new_group(f, "factors")
        for i, fac in enumerate(plan.factors):
            put(g, str(i), np.asarray(fac, dtype=np.float64))
        # what the plan uses of its qs reference plan, so that loading it needs no planner
        ref = plan.residual_plan
        index = [ref.views.index(t) for t in plan.residual_views]
        costs = ref.allocation.costs
        put(f, "residual_losses", np.array([ref.losses[i] for i in index], dtype=np.float64))
        put(f, "residual_costs", np.array([1.0 if costs is None else costs[i] for i in index], dtype=np.float64))
        g = new_group(f, "residual_mechanisms")
        for j, i in enumerate(index):
            write_solution(new_group(g, str(j)), ref.solutions[ref.keys[i]])


def _refuse(path, reason: str) -> InputError:
    return InputError("qsplus plan file", str(path), reason)


def _residual_only_plan(f, schema: Schema, workload: Workload, subsets: list[tuple[int, ...]]) -> Plan:
    """The ``qs`` plan at beta = 1 restricted to the residual-only subsets: all a loaded plan uses of
    its reference plan (their losses and costs shape the problem, their mechanisms are measured).
    Every field checked: one solution group per subset, of its sizes; positive finite losses and
    costs, which allocate (only absurd ones do not)."""
    n = len(subsets)
    losses = r.array(f, "residual_losses", kind="f", shape=(n,), positive=True)
    costs = r.array(f, "residual_costs", kind="f", shape=(n,), positive=True)
    try:
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):  # absurd values: refused here
            allocation = allocate(losses, 1.0, costs)
    except InputError:
        why = "give no finite noise scale with residual_costs"
        raise r.bad(f, "residual_losses", losses.tolist()[:4], why) from None
    g = r.child(f, "residual_mechanisms", group=True)
    names = r.members(g)
    if sorted(names) != sorted(str(j) for j in range(n)):
        raise r.bad(
            g, "", sorted(names)[:5], f"must hold one mechanism per residual-only subset ({n}), named 0, 1, ..."
        )
    keys = [str(j) for j in range(n)]
    sizes = [tuple(schema.sizes[a] for a in t) for t in subsets]
    solutions = {k: read_solution(r.child(g, k, group=True), s) for k, s in zip(keys, sizes)}
    return Plan(
        schema,
        workload,
        "qs",
        Budget.from_beta(1.0),
        list(subsets),
        keys,
        np.ones(n),
        losses,
        np.zeros(n),
        allocation,
        solutions,
        len(workload.views),
    )


def _uncovered_subsets(workload: Workload, problem) -> set[tuple[int, ...]]:
    """The residual subsets with a part of the workload (a non-zero Gram) that no marginal view of
    ``problem`` covers: those its ``qs`` reference plan measures (their losses are positive)."""
    covered = set(problem.lower) | {v.attrs for v in problem.views}
    return {s for s, g in decompose(workload).grams.items() if g.trace > 0 and s not in covered}


def load_marginal_plan(path: str | Path):
    """The stored plan, every field checked (an InputError naming it otherwise); no planner, solver
    or optimiser runs (module docstring)."""
    with open_h5(path, "marginal-plan") as f, r.h5py_errors(path, "qsplus plan file"):
        fmt = r.integer(f, "marginal_plan_format", lo=1)
        if fmt != MARGINAL_PLAN_FORMAT:
            raise r.bad(
                f,
                "marginal_plan_format",
                fmt,
                f"this version reads format {MARGINAL_PLAN_FORMAT} only "
                "(1 lacks the residual-only subsets' mechanisms, 2 stores views as JSON): re-run 'querysmasher plan'",
                attr=True,
            )
        head = read_plan_header(f, methods=("qsplus",))
        schema, workload, budget = head.schema, head.workload, head.budget
        o = r.json_attr(f, "options")
        if set(o) != {"max_view_size", "max_view_cells", "tie"}:
            raise r.bad(f, "options", sorted(o), "must hold max_view_size, max_view_cells and tie", attr=True)
        mvs = int(r.json_number(f, "options", o, "max_view_size", lo=2, integral=True))
        mvc = o["max_view_cells"]
        if mvc is not None:
            mvc = int(r.json_number(f, "options", o, "max_view_cells", lo=1, integral=True))
        if not isinstance(o["tie"], bool):
            raise r.bad(f, "options", o["tie"], "tie must be true or false", attr=True)
        tie = o["tie"]
        totals = {k: r.number(f, k, positive=True) for k in ("total_variance", "qs_total_variance")}
        lower = r.number(f, "lower_bound", lo=0.0)
        iterations = r.integer(f, "iterations", lo=0)
        views = read_views(r.child(f, "views", group=True), len(schema))
        residual_views = read_views(r.child(f, "residual_views", group=True), len(schema))
        residual_plan = _residual_only_plan(f, schema, workload, residual_views)
        problem = build_problem(workload, residual_plan, max_view_size=mvs, max_view_cells=mvc, tie=tie)
        if [tuple(v.attrs) for v in problem.views] != views or list(problem.residual_only) != residual_views:
            raise _refuse(path, "its views are not those the qsplus problem of its workload has")
        # reconstruct would answer a part of the workload on a subset measured by nothing as 0: every
        # residual subset the workload touches is a marginal view, a lower subset or stored, once
        if sorted(residual_views) != sorted(_uncovered_subsets(workload, problem)):
            raise _refuse(path, "its residual-only subsets are not those its workload needs beside its marginal views")
        nv = len(views)
        n_factors = 1 if problem.tied else nv
        factor_of = r.array(f, "factor_of", kind="i", shape=(nv,), lo=0, hi=n_factors - 1)
        # a view's noise variance is 1 / its share: both within what the sampler can draw (else the
        # plan would load, report its stored error, and fail only later, or overflow in reconstruct)
        shares = r.array(f, "shares", kind="f", shape=(nv,), lo=1.0 / MAX_NOISE_VARIANCE)
        res_sigma2 = r.array(
            f, "residual_sigma2", kind="f", shape=(len(residual_views),), positive=True, hi=MAX_NOISE_VARIANCE
        )
        g = r.child(f, "factors", group=True)
        if len(r.indexed_members(g, "one factor per distinct mechanism")) != n_factors:
            raise r.bad(g, "", len(r.members(g)), f"must hold {n_factors} factors")
        factors = []
        if problem.tied != tie or sorted(set(factor_of.tolist())) != list(range(n_factors)):
            raise r.bad(f, "factor_of", factor_of.tolist(), f"must use each of the {n_factors} factors")
        for i in range(n_factors):
            k = int(np.flatnonzero(factor_of == i)[0])
            cells = problem.views[k].cells
            fac = r.array(g, str(i), kind="f", shape=(cells, None))
            if not np.all(np.isfinite(fac)):
                raise r.bad(g, str(i), "non-finite", "must be finite")
            factors.append(np.asarray(fac, dtype=np.float64))
    plan = MarginalPlan(
        schema,
        workload,
        budget,
        problem,
        views,
        factors,
        np.asarray(factor_of, dtype=np.int64),
        np.asarray(shares, dtype=np.float64),
        residual_views,
        np.asarray(res_sigma2, dtype=np.float64),
        residual_plan,
        totals["total_variance"],
        lower,
        totals["qs_total_variance"],
        iterations,
        head.phase_seconds,
        head.notes,
    )
    plan.problem_options = {"max_view_size": mvs, "max_view_cells": mvc}
    return plan
