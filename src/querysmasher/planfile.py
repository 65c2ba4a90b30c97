"""The plan file format (HDF5, kind ``plan``): a :class:`~querysmasher.plan.Plan` and its per-view solutions.

``save_plan`` writes everything measure and reconstruct need; ``load_plan`` reads it back with
every field checked (:mod:`querysmasher.h5read`), its mechanisms rebuilt and verified. One
solution's group (``write_solution`` / ``read_solution``) is also the unit of the workflow's
per-solve cache files.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import tempfile
from pathlib import Path

import numpy as np

from .accounting import view_costs
from .allocation import Allocation
from .mechanisms import MECHANISM_KINDS
from .plan import LAYOUTS, Plan
from .queryfactor import rederive_solutions
from .schema import Schema, check_attribute_sizes
from .solvers import ViewMechanism, ViewSolution

log = logging.getLogger(__name__)

__all__ = ["save_plan", "load_plan", "write_solution", "read_solution", "file_form"]


def save_plan(plan: Plan, path) -> None:
    """Write the plan file (HDF5, kind 'plan'): everything measure and reconstruct need."""
    from .io import atomic_h5, new_group, put  # loads h5py only where it is used
    from .planheader import put_plan_header, put_views  # loads h5py only where it is used

    with atomic_h5(path, kind="plan") as f:
        put_plan_header(f, plan)
        f.attrs["layout"] = plan.layout
        v = new_group(f, "views")
        put_views(v, plan.views)
        put(v, "key", np.array(plan.keys, dtype=object))
        put(v, "scale", plan.scales)
        put(v, "loss", plan.losses)
        put(v, "lower_bound", plan.lower_bounds)
        put(v, "sigma2", plan.allocation.sigma2)
        sols = new_group(f, "solutions")
        for key in sorted(plan.solutions):  # one at a time: a workflow plan reads them from its solve files
            g = new_group(sols, key)
            write_solution(g, plan.solutions[key], compact=True)


def write_solution(g, s: ViewSolution, *, compact: bool = False) -> None:
    """Store one ViewSolution in an HDF5 group (used by plan files and per-solve cache files).

    A lowrank solution held over its query factor (``query_factor``) keeps L beside its arrays
    (solve files); with ``compact`` (plan files) L alone (``storage = "query-factor"``). Wherever L
    is present it defines the operator, B = L^T F: :func:`load_plan` and the workflow's allocate
    re-derive the mechanism from L and the plan's own workload (:mod:`querysmasher.queryfactor`).
    A dense X of at most ``EXACT_PAIR_CELLS`` cells is stored, and read back, as the lowrank
    mechanism of its eigenpairs (the same X; ``storage = "eigenpairs"``)."""
    from .io import put  # loads h5py only where it is used

    compact = compact and s.query_factor is not None
    g.attrs["kind"] = s.mechanism.kind
    g.attrs["loss"] = s.loss
    g.attrs["lower_bound"] = s.lower_bound
    g.attrs["gap"] = s.gap
    g.attrs["solver"] = s.solver
    g.attrs["note"] = s.note
    put(g, "sizes", np.array(s.mechanism.sizes, dtype=np.int64))
    if s.query_factor is not None:
        put(g, "l", s.query_factor)
    if compact:
        g.attrs["storage"] = "query-factor"
        return
    mech = s.mechanism
    if mech.kind == "dense" and mech.pairs_enumerable:
        # X by its eigenpairs, as the lowrank mechanism (V, w) with the same X = V diag(w) V^T (what
        # the dense solver computed anyway): readers then need no c^3 eigendecomposition nor any
        # c x c product (allocate's variance report, measure, reconstruct; 820 views per random:1,2
        # plan on [20]^40), and the release measures r = rank(X) values, not c. Up to
        # EXACT_PAIR_CELLS cells only, where both kinds' replace costs are exact (above, a lowrank
        # one is bounded, about twice the exact value for X = I).
        g.attrs["kind"] = "lowrank"
        g.attrs["storage"] = "eigenpairs"
        w, v = mech.eigh()[0]
        mech = ViewMechanism("lowrank", mech.sizes, (v, w))
    for i, m in enumerate(mech.mats):
        put(g, f"m{i}", m)
    if mech.rotation is not None:
        put(g, "rotation", mech.rotation)


def read_solution(g, sizes: tuple[int, ...] | None = None) -> ViewSolution:
    """The ViewSolution of a group written by :func:`write_solution`, every field checked (an
    InputError naming the field otherwise). ``sizes``: the view's sizes from the schema (plan
    files), which the stored sizes must equal before any array is read. A compact group (its query
    factor only) gets a placeholder mechanism of its kind and sizes (no memory: a broadcast zero),
    never measured: the caller re-derives it from the workload (:func:`load_plan` does, through
    :func:`querysmasher.queryfactor.rederive_solutions`)."""
    from . import h5read as r  # loads h5py only where it is used

    kind = r.text(g, "kind", choices=tuple(MECHANISM_KINDS))
    storage = r.text(g, "storage", choices=("query-factor", "eigenpairs"), default="")
    stored = tuple(int(n) for n in r.array(g, "sizes", kind="i", ndim=1, lo=1))
    if sizes is not None and stored != tuple(sizes):
        raise r.bad(
            g, "sizes", list(stored), f"must be the sizes of the view it measures, {list(sizes)} by the plan's schema"
        )
    L = r.array(g, "l", kind="f", ndim=2) if r.has(g, "l") else None
    if storage == "query-factor":
        if kind != "lowrank" or L is None:
            raise r.bad(g, "storage", storage, "is for lowrank mechanisms with a 2-D query factor l", attr=True)
        rank = L.shape[1]
        mechanism = ViewMechanism(
            kind, stored, (np.broadcast_to(np.float64(0.0), (math.prod(stored), rank)), np.zeros(rank))
        )
    else:
        cls = MECHANISM_KINDS[kind]  # each kind reads and checks its own arrays
        mats = cls.stored_arrays(g, stored)
        rot = cls.stored_rotation(g, mats)
        try:
            mechanism = ViewMechanism(kind, stored, mats, rotation=rot)
        except ValueError as exc:  # a plugin kind's own check of its arrays
            raise r.bad(g, "kind", kind, f"its arrays do not form a mechanism ({exc})", attr=True) from None
    return ViewSolution(
        mechanism,
        r.number(g, "loss", lo=0.0),
        r.number(g, "lower_bound", lo=0.0),
        r.text(g, "solver"),
        r.text(g, "note"),
        r.number(g, "gap", nan=True, inf=True),
        L,
    )


def _read_summary(f, summary: dict) -> tuple[dict, dict | None]:
    """(the parts of the summary a Plan keeps beside the header's notes and phase times: views,
    objective; its max-objective certificate or None)."""
    from . import h5read as r  # loads h5py only where it is used

    kept = {
        "views": int(r.json_number(f, "summary", summary, "views", lo=0, integral=True)),
        "objective": r.json_text(f, "summary", summary, "objective", choices=("sum", "max"), default="sum"),
    }
    certificate = {
        k: summary[k]
        for k in ("max_variance_lower_bound", "max_variance_gap", "max_iterations", "max_history")
        if k in summary
    }
    return kept, certificate or None


def _read_views(v, schema: Schema) -> tuple[list[tuple[int, ...]], list[str], dict[str, np.ndarray]]:
    """(residual views, their keys, per-view arrays scale/loss/lower_bound/sigma2), each checked:
    attributes in the schema, one entry per view, values in range."""
    from . import h5read as r  # loads h5py only where it is used
    from .planheader import read_views  # loads h5py only where it is used

    views = read_views(v, len(schema))
    n = len(views)
    keys = r.strings(v, "key", length=n)
    arrays = {
        "scale": r.array(v, "scale", kind="f", shape=(n,), positive=True),
        "loss": r.array(v, "loss", kind="f", shape=(n,), lo=0.0),
        "lower_bound": r.array(v, "lower_bound", kind="f", shape=(n,), lo=0.0),
        # inf: the view is not measured
        "sigma2": r.array(v, "sigma2", kind="f", shape=(n,), positive=True, finite=False),
    }
    return views, keys, arrays


def _read_solutions(f, schema: Schema, views, keys) -> dict[str, ViewSolution]:
    """One solution per distinct view key, no other, each with the sizes of its views."""
    from . import h5read as r  # loads h5py only where it is used

    group = r.child(f, "solutions", group=True)
    sizes: dict[str, tuple[int, ...]] = {}
    for attrs, key in zip(views, keys):
        s = tuple(schema.sizes[a] for a in attrs)
        if sizes.setdefault(key, s) != s:
            raise r.bad(
                f["views"], "key", key, f"is the key of views of different sizes {list(sizes[key])} and {list(s)}"
            )
    stored = set(r.members(group))
    missing, extra = sorted(set(sizes) - stored), sorted(stored - set(sizes))
    if missing:
        raise r.bad(f["views"], "key", missing[0], "has no stored solution")
    if extra:
        raise r.bad(group, extra[0], extra[0], "is a solution no view uses")
    return {k: read_solution(r.child(group, k, group=True), s) for k, s in sizes.items()}


def load_plan(path) -> Plan:
    """Read a plan file written by :func:`save_plan`: every field checked for type, shape and range
    against the schema and views before anything is derived from it (an InputError naming the
    field and the value otherwise)."""
    from . import h5read as r  # loads h5py only where it is used
    from .io import open_h5  # loads h5py only where it is used
    from .planheader import read_plan_header  # loads h5py only where it is used

    with open_h5(path, "plan") as f, r.h5py_errors(path, "plan file"):
        head = read_plan_header(f)
        schema, workload, method, budget = head.schema, head.workload, head.method, head.budget
        check_attribute_sizes(schema, [a for v in workload.views for a in v.attrs])
        summary, certificate = _read_summary(f, head.summary)
        views, keys, arrays = _read_views(r.child(f, "views", group=True), schema)
        solutions = _read_solutions(f, schema, views, keys)
        layout = r.text(f, "layout", choices=LAYOUTS, default="full-domain" if method == "mm" else "residual")
        if layout == "full-domain" and views != [tuple(range(len(schema)))]:  # reconstruct marginalises its one view
            raise r.bad(
                f, "layout", layout, "needs the one full-domain view, but the plan's views are not that", attr=True
            )
    # lowrank views held over their query factor: B = L^T F with F from the file's own workload
    solutions = rederive_solutions(workload, solutions, views, keys, losses=False)
    sigma2, losses = arrays["sigma2"], arrays["loss"]
    finite = np.isfinite(sigma2)
    costs = view_costs(keys, solutions, budget.neighbours)
    alloc = Allocation(sigma2, float(np.sum(sigma2[finite] * losses[finite])), budget.beta, costs)
    return Plan(
        schema,
        workload,
        method,
        budget,
        views,
        keys,
        arrays["scale"],
        losses,
        arrays["lower_bound"],
        alloc,
        solutions,
        summary["views"],
        head.phase_seconds,
        head.notes,
        summary["objective"],
        certificate,
        layout,
    )


def file_form(plan: Plan) -> Plan:
    """``plan`` with each mechanism as its plan file stores it (written by :func:`write_solution` and
    read back, one at a time): a small dense X is stored by its eigenpairs, a lowrank mechanism
    measuring other values (as many as its rank), so a release measured with the planner's own
    mechanisms would not fit the plan loaded from its file."""
    import h5py  # h5py only where files are written (import querysmasher.cli stays fast)

    solutions = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "solution.h5"
        for key, sol in plan.solutions.items():
            with h5py.File(path, "w") as f:
                write_solution(f.create_group("s"), sol)
            with h5py.File(path, "r") as f:
                solutions[key] = read_solution(f["s"], sol.mechanism.sizes)
    # its own timings and notes: what the copy computes later leaves the given plan as it was
    return dataclasses.replace(
        plan, solutions=solutions, phase_seconds=dict(plan.phase_seconds), notes=list(plan.notes)
    )
