"""The Plan record: per view its mechanism and noise scale, the budget, the predicted error.

A plan is what every planner returns (:mod:`querysmasher.planners`, :func:`querysmasher.planning.make_plan`)
and what the stages read (measure, reconstruct, the variances). Its views are residual views
(``layout = "residual"``: the answers of a workload view sum the estimates of the residual views
under it) or one view over every attribute (``layout = "full-domain"``: ``mm``, whole-workload
plugins), whose estimate is marginalised.

>>> from querysmasher.planning import make_plan
>>> p = make_plan("cps", "marginal:1", "rp", beta=1.0)
>>> round(p.rmse, 3), p.layout
(1.744, 'residual')
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from .accounting import Budget, view_costs
from .allocation import Allocation, PredictedError, rmse
from .schema import Schema
from .solvers import ViewSolution
from .workload import Workload, parse_workload

log = logging.getLogger(__name__)

__all__ = ["Plan", "LAYOUTS", "save_plan", "load_plan", "write_solution", "read_solution"]

LAYOUTS: tuple[str, ...] = ("residual", "full-domain")


@dataclass(eq=False)
class Plan(PredictedError):
    """Everything the measure and reconstruct stages need, plus the predicted error."""

    schema: Schema
    workload: Workload
    method: str
    budget: Budget
    views: list[tuple[int, ...]]  # residual views, in order
    keys: list[str]  # distinct-subproblem key of each view
    scales: np.ndarray  # G_view = scale * G_key
    losses: np.ndarray  # L of each view at privacy cost 1
    lower_bounds: np.ndarray  # certified lower bound on each view's optimal L (0 if none)
    allocation: Allocation
    solutions: dict[str, ViewSolution]
    workload_views: int
    phase_seconds: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    objective: str = "sum"  # what the mechanisms and the allocation minimise: "sum" or "max" variance
    max_certificate: dict | None = None  # objective "max": lower bound on the optimum, gap, iterations
    layout: str = "residual"  # "residual" views, or one "full-domain" view over every attribute (marginalised)

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"plan layout {self.layout!r} is not one of {LAYOUTS}")

    @property
    def certified(self) -> bool:
        """True when every measured view carries a positive certified lower bound."""
        return bool(np.all((self.lower_bounds > 0) | (self.losses == 0)))

    @property
    def lower_bound(self) -> float:
        """(sum sqrt(L_low))^2 / beta: no mechanism of the residual family does better."""
        return float(np.sqrt(self.lower_bounds).sum() ** 2 / self.budget.beta)

    @property
    def gap(self) -> float:
        tv = self.total_variance
        return (tv - self.lower_bound) / tv if tv > 0 else 0.0

    @cached_property
    def svd_bound(self) -> float | None:
        """The SVD bound on every Gaussian mechanism's total variance at this budget, where exactly
        computable (:func:`querysmasher.svd_bound.svd_bound`); None otherwise."""
        from .svd_bound import svd_bound

        t0 = time.perf_counter()
        b = svd_bound(self.workload)
        self.phase_seconds["svd_bound"] = time.perf_counter() - t0
        return None if b is None else b / self.budget.beta

    @cached_property
    def max_variance(self) -> tuple[float, int, int]:
        """(largest weighted query variance, workload view index, query index within the view)."""
        from .maxvar import max_variance_of

        t0 = time.perf_counter()
        out = max_variance_of(self)
        self.phase_seconds["max_variance"] = time.perf_counter() - t0
        return out

    def summary(self) -> dict:
        value, j, i = self.max_variance
        v = self.workload.views[j]
        out = {
            "schema": self.schema.name,
            "workload": self.workload.spec,
            "method": self.method,
            "rmse": self.rmse,
            "total_variance": self.total_variance,
            "queries": self.queries,
            "views": self.workload_views,
            "residual_views": len(self.views),
            "measured_views": int(np.isfinite(self.allocation.sigma2).sum()),
            "distinct_solves": len(self.solutions),
            **self.budget.to_dict(),
            "seconds": sum(self.phase_seconds.values()),
            "phase_seconds": dict(self.phase_seconds),
            "notes": list(self.notes),
            "objective": self.objective,
            "max_variance": value,
            "max_variance_query": {"view": [self.schema.names[a] for a in v.attrs], "family": v.family, "index": i},
        }
        if self.max_certificate is not None:
            out.update(self.max_certificate)
        if self.certified:
            out["lower_bound"] = self.lower_bound
            out["lower_bound_rmse"] = rmse(self.lower_bound, self.queries)
            out["gap"] = self.gap
        if self.svd_bound is not None:
            out["svd_bound"] = self.svd_bound
            out["svd_bound_rmse"] = rmse(self.svd_bound, self.queries)
        out["seconds"] = sum(self.phase_seconds.values())
        out["phase_seconds"] = dict(self.phase_seconds)
        return out

    def __repr__(self) -> str:
        return (f"Plan({self.method}, {self.workload.spec} over {self.schema.name}: RMSE {self.rmse:.4g}, "
                f"{len(self.views)} residual views, {len(self.solutions)} distinct solves, beta {self.budget.beta:.4g})")


def save_plan(plan: Plan, path) -> None:
    """Write the plan file (HDF5, kind 'plan'): everything measure and reconstruct need."""
    from .io import atomic_h5, new_group, put, put_custom_queries, put_json

    with atomic_h5(path, kind="plan") as f:
        put_json(f, "schema", plan.schema.to_dict())
        f.attrs["workload"] = plan.workload.spec
        f.attrs["method"] = plan.method
        f.attrs["layout"] = plan.layout
        put_json(f, "budget", {"beta": plan.budget.beta, "source": plan.budget.source, "delta": plan.budget.delta, "neighbours": plan.budget.neighbours})
        put_json(f, "summary", plan.summary())
        put_custom_queries(f, plan.workload.custom)
        v = new_group(f, "views")
        lengths = [len(a) for a in plan.views]
        put(v, "attrs", np.array([i for a in plan.views for i in a], dtype=np.int64))
        put(v, "offsets", np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
        put(v, "key", np.array(plan.keys, dtype=object))
        put(v, "scale", plan.scales)
        put(v, "loss", plan.losses)
        put(v, "lower_bound", plan.lower_bounds)
        put(v, "sigma2", plan.allocation.sigma2)
        sols = new_group(f, "solutions")
        for key, s in sorted(plan.solutions.items()):
            g = new_group(sols, key)
            write_solution(g, s, compact=True)


def write_solution(g, s: ViewSolution, *, compact: bool = False) -> None:
    """Store one ViewSolution in an HDF5 group (used by plan files and per-solve cache files).

    A lowrank solution held over its query factor (``query_factor``) keeps L beside its arrays
    (solve files); with ``compact`` (plan files) L alone (``storage = "query-factor"``). Wherever L
    is present it defines the operator, B = L^T F: :func:`load_plan` and the workflow's allocate
    re-derive the mechanism from L and the plan's own workload (:mod:`querysmasher.queryfactor`).
    A dense X of at most ``EXACT_PAIR_CELLS`` cells is stored, and read back, as the lowrank
    mechanism of its eigenpairs (the same X; ``storage = "eigenpairs"``)."""
    from .io import put

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
    from . import mechanisms

    if mech.kind == "dense" and mech.cells <= mechanisms.EXACT_PAIR_CELLS:
        # X by its eigenpairs, as the lowrank mechanism (V, w) with the same X = V diag(w) V^T (what
        # the dense solver computed anyway): readers then need no c^3 eigendecomposition nor any
        # c x c product (allocate's variance report, measure, reconstruct; 820 views per random:1,2
        # plan on [20]^40), and the release measures r = rank(X) values, not c. Up to
        # EXACT_PAIR_CELLS cells only, where both kinds' replace costs are exact (above, a lowrank
        # one is bounded, about twice the exact value for X = I).
        g.attrs["kind"] = "lowrank"
        g.attrs["storage"] = "eigenpairs"
        w, v = mech.eigh()[0]
        mech = mechanisms.ViewMechanism("lowrank", mech.sizes, (v, w))
    for i, m in enumerate(mech.mats):
        put(g, f"m{i}", m)
    if mech.rotation is not None:
        put(g, "rotation", mech.rotation)


def read_solution(g) -> ViewSolution:
    """The ViewSolution of a group written by :func:`write_solution`. A compact group (its query
    factor only) gets a placeholder mechanism of its kind and sizes, never measured: the caller
    re-derives it from the workload (:func:`load_plan` does, through
    :func:`querysmasher.queryfactor.rederive_solutions`)."""
    from .errors import InputError
    from .solvers import ViewMechanism

    try:
        sizes = tuple(int(x) for x in g["sizes"][()])
        kind = str(g.attrs["kind"])
        L = np.asarray(g["l"][()]) if "l" in g else None
        if g.attrs.get("storage") == "query-factor":
            if kind != "lowrank" or L is None or L.ndim != 2:
                raise InputError("plan solution", g.name, "is stored as a query factor but is not a lowrank mechanism with a 2-D factor l")
            mechanism = ViewMechanism(kind, sizes, (np.zeros((math.prod(sizes), L.shape[1])), np.zeros(L.shape[1])))
        else:
            count = ViewMechanism.array_count(kind, sizes)
            rot = np.asarray(g["rotation"][()]) if "rotation" in g else None
            mechanism = ViewMechanism(kind, sizes, tuple(np.asarray(g[f"m{i}"][()]) for i in range(count)), rotation=rot)
        return ViewSolution(
            mechanism, float(g.attrs["loss"]), float(g.attrs["lower_bound"]),
            str(g.attrs["solver"]), str(g.attrs["note"]), float(g.attrs["gap"]), L,
        )
    except (KeyError, ValueError, TypeError) as exc:
        raise InputError("plan solution", g.name, f"is malformed ({exc})") from None


def load_plan(path) -> Plan:
    """Read a plan file written by :func:`save_plan`."""
    from .allocation import Allocation
    from .io import get_custom_queries, get_json, open_h5
    from .queryfactor import rederive_solutions

    with open_h5(path, "plan") as f:
        schema = Schema.from_dict(get_json(f, "schema"))
        workload = parse_workload(str(f.attrs["workload"]), schema, get_custom_queries(f))
        b = get_json(f, "budget")
        budget = Budget(b["beta"], b["source"], b["delta"], b.get("neighbours", "add-remove"))
        summary = get_json(f, "summary")
        v = f["views"]
        flat, offs = v["attrs"][()], v["offsets"][()]
        views = [tuple(int(x) for x in flat[offs[i]:offs[i + 1]]) for i in range(len(offs) - 1)]
        keys = [k.decode() if isinstance(k, bytes) else str(k) for k in v["key"][()]]
        sigma2 = v["sigma2"][()]
        losses = v["loss"][()]
        solutions = {k: read_solution(g) for k, g in f["solutions"].items()}
        # lowrank views held over their query factor: B = L^T F with F from the file's own workload
        solutions = rederive_solutions(workload, solutions, views, keys, losses=False)
        finite = np.isfinite(sigma2)
        costs = view_costs(keys, solutions, budget.neighbours)
        alloc = Allocation(sigma2, float(np.sum(sigma2[finite] * losses[finite])), budget.beta, costs)
        certificate = {k: summary[k] for k in ("max_variance_lower_bound", "max_variance_gap", "max_iterations", "max_history") if k in summary}
        return Plan(
            schema, workload, str(f.attrs["method"]), budget, views, keys, v["scale"][()], losses,
            v["lower_bound"][()], alloc, solutions, int(summary["views"]), dict(summary["phase_seconds"]),
            list(summary["notes"]), summary.get("objective", "sum"), certificate or None,
            str(f.attrs.get("layout", "full-domain" if str(f.attrs["method"]) == "mm" else "residual")),
        )
