"""The header every plan file starts with: schema, workload, method, budget and summary, and the
stored lists of attribute subsets (views).

Each plan kind writes its own record after the header (:mod:`querysmasher.plankinds`); the header
is written and read here once, every field checked (:mod:`querysmasher.h5read`): the schema, the
workload re-parsed against it (custom queries from the file's ``custom`` group), the method among
the kind's, the budget in the forms and neighbouring relations the kind supports, and the summary
the workflow reads (its notes a list of strings, its phase times non-negative seconds).

>>> import tempfile, os
>>> from querysmasher import io, h5read, planning
>>> plan = planning.make_plan("adult", "marginal:1", "qs", rho=0.1)
>>> path = os.path.join(tempfile.mkdtemp(), "p.h5")
>>> with io.atomic_h5(path, kind="plan") as f:
...     put_plan_header(f, plan)
>>> with io.open_h5(path, "plan") as f:
...     read_plan_header(f, methods=("qs",)).budget.rho
0.1
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import h5read as r
from .accounting import NEIGHBOURS, Budget, PureBudget
from .errors import InputError
from .io import put, put_budget, put_custom_queries, put_json
from .schema import Schema
from .workload import Workload, parse_workload

__all__ = ["PlanHeader", "put_plan_header", "read_plan_header", "put_views", "read_views"]


@dataclass(frozen=True)
class PlanHeader:
    """What every plan file holds before its kind's record."""

    schema: Schema
    workload: Workload
    method: str
    budget: Budget | PureBudget
    summary: dict
    notes: list[str]
    phase_seconds: dict[str, float]


def put_plan_header(f, plan) -> None:
    """Write ``plan``'s schema, workload (and its custom queries), method, budget and summary."""
    put_json(f, "schema", plan.schema.to_dict())
    f.attrs["workload"] = plan.workload.spec
    put_custom_queries(f, plan.workload.custom)
    f.attrs["method"] = plan.method
    put_budget(f, plan.budget)
    put_json(f, "summary", plan.summary())


def read_plan_header(
    f, *, methods: tuple[str, ...] | None = None, pure: bool = False, neighbours: tuple[str, ...] = NEIGHBOURS
) -> PlanHeader:
    """The header written by :func:`put_plan_header`, every field checked (an InputError naming the
    field and the value otherwise). ``methods``: those the kind's file may hold (a file of one
    method written without the attribute is read as that method); ``pure`` and ``neighbours``: the
    budgets the kind supports (:func:`querysmasher.h5read.read_budget`)."""
    schema = r.read_schema(f)
    custom = r.custom_queries(f) if r.has(f, "custom") else {}
    try:
        workload = parse_workload(r.text(f, "workload"), schema, custom)
    except InputError as exc:
        raise r.bad(f, "workload", exc.value, exc.reason, attr=True) from None
    if methods is not None and len(methods) == 1:
        method = r.text(f, "method", choices=methods, default=methods[0])
    else:
        method = r.text(f, "method", choices=methods)
    budget = r.read_budget(f, pure=pure, neighbours=neighbours)
    summary = r.json_attr(f, "summary")
    notes = summary.get("notes", [])
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise r.bad(f, "summary.notes", notes, "must be a list of strings", attr=True)
    phases = summary.get("phase_seconds", {})
    if not isinstance(phases, dict) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in phases.values()
    ):
        raise r.bad(f, "summary.phase_seconds", phases, "must map steps to non-negative seconds", attr=True)
    return PlanHeader(
        schema, workload, method, budget, summary, list(notes), {str(k): float(v) for k, v in phases.items()}
    )


def put_views(g, views) -> None:
    """Attribute subsets as two integer datasets: ``attrs`` (all of them, in order) and ``offsets``."""
    lengths = [len(a) for a in views]
    put(g, "attrs", np.array([int(i) for a in views for i in a], dtype=np.int64))
    put(g, "offsets", np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))


def read_views(g, n_attrs: int) -> list[tuple[int, ...]]:
    """The attribute subsets written by :func:`put_views`: indices below ``n_attrs``, offsets rising
    from 0 to their count, each subset distinct attributes in increasing order."""
    flat = r.array(g, "attrs", kind="i", ndim=1, lo=0, hi=n_attrs - 1)
    offs = r.array(g, "offsets", kind="i", ndim=1)
    if len(offs) == 0 or offs[0] != 0 or offs[-1] != len(flat) or np.any(np.diff(offs) < 0):
        raise r.bad(g, "offsets", offs[:8].tolist(), f"must rise from 0 to the length of attrs ({len(flat)})")
    views = [tuple(int(a) for a in flat[offs[i] : offs[i + 1]]) for i in range(len(offs) - 1)]
    for i, attrs in enumerate(views):
        if any(a >= b for a, b in zip(attrs, attrs[1:])):
            raise r.bad(g, "attrs", list(attrs), f"view {i} must list distinct attributes in increasing order")
    return views
