"""A planner plugin with a plan record of its own: each workload view's marginal measured with
Gaussian noise (the identity on that marginal), answers by the view's queries applied to it.

It is the smallest complete *plan kind*: a record (:class:`MarginalsPlan`, ``file_kind``
``example-marginals-plan``), its file format, what it measures (one
:class:`querysmasher.measurement.LinearMeasurement` per view: querysmasher re-checks its privacy
cost, draws the noise and writes the measurements file), and its estimates and variances (from
which querysmasher writes the answers file, CSV tables and a release's tables), declared as one
:class:`querysmasher.plankinds.PlanKind` (:data:`KIND`) and registered through the entry-point
group ``querysmasher.plan_kinds``, so that a fresh ``querysmasher measure`` process loads its plan
files. Not a good mechanism: an example.

Each record adds 1 to one cell of every view's marginal, so under add-remove neighbours the
releases cost sum_v 1 / sigma_v^2 (the largest diagonal of sum_v M_v^T M_v / sigma_v^2); the noise
variances are allocated in closed form (:func:`querysmasher.allocation.allocate`) against the
views' losses ||Q_v||_F^2 (weighted).

>>> from querysmasher.accounting import Budget
>>> from querysmasher.planning import parse_problem
>>> schema, workload = parse_problem("synthetic:n=3,d=2", "marginal:1")
>>> plan = NoisyMarginalsPlanner().plan(schema, workload, Budget.from_beta(1.0))
>>> plan.views, round(plan.rmse, 6)
([(0,), (1,)], 1.414214)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from querysmasher import h5read as r
from querysmasher.accounting import Budget
from querysmasher.allocation import allocate, rmse
from querysmasher.decompose import view_query_matrix
from querysmasher.errors import InputError
from querysmasher.families import query_matrix_1d
from querysmasher.io import atomic_h5, new_group, open_h5, put
from querysmasher.measurement import LinearMeasurement
from querysmasher.planheader import put_plan_header, put_views, read_plan_header, read_views
from querysmasher.plankinds import PlanKind
from querysmasher.schema import Schema
from querysmasher.workload import Workload

__all__ = ["MarginalsPlan", "NoisyMarginalsPlanner", "KIND", "FILE_KIND"]

FILE_KIND = "example-marginals-plan"


def view_queries(workload, v) -> np.ndarray:
    """A workload view's query rows over the cells of its marginal (product families: the
    Kronecker product of their per-attribute queries)."""
    if not v.factors:
        return view_query_matrix(workload, v)
    q = np.ones((1, 1))
    for f, a in zip(v.factors, v.attrs):
        q = np.kron(q, query_matrix_1d(f, workload.schema.sizes[a]))
    return q


@dataclass(eq=False)
class MarginalsPlan:
    """The views measured (each distinct workload view's attributes) and their noise variances."""

    file_kind: ClassVar[str] = FILE_KIND
    schema: Schema
    workload: Workload
    method: str
    budget: Budget
    views: list[tuple[int, ...]]
    sigma2: np.ndarray
    phase_seconds: dict = field(default_factory=dict)

    @property
    def queries(self) -> float:
        return self.workload.query_count(weighted=True)

    @property
    def total_variance(self) -> float:
        index = {a: k for k, a in enumerate(self.views)}
        return float(
            sum(
                v.weight * self.sigma2[index[v.attrs]] * np.sum(view_queries(self.workload, v) ** 2)
                for v in self.workload.views
            )
        )

    @property
    def rmse(self) -> float:
        return rmse(self.total_variance, self.queries)

    def privacy_cost(self) -> float:
        return float(np.sum(1.0 / self.sigma2))

    def summary(self) -> dict:
        return {
            "schema": self.schema.name,
            "workload": self.workload.spec,
            "method": self.method,
            "rmse": self.rmse,
            "total_variance": self.total_variance,
            "queries": self.queries,
            "views": len(self.workload.views),
            "seconds": 0.0,
            "phase_seconds": {},
            "notes": [],
            **self.budget.to_dict(),
        }


class NoisyMarginalsPlanner:
    """The whole-workload planner of :class:`MarginalsPlan` (method ``noisymarginals``)."""

    name = "noisymarginals"
    plan_kind = FILE_KIND  # what the method table reads: its plans are of this kind
    objectives = ("sum",)
    neighbours = ("add-remove",)

    @staticmethod
    def unsupported(workload) -> str:
        return "custom queries are not supported" if any(v.family == "custom" for v in workload.views) else ""

    def plan(self, schema, workload, budget, *, objective: str = "sum") -> MarginalsPlan:
        views = sorted({v.attrs for v in workload.views}, key=lambda a: (len(a), a))
        index = {a: k for k, a in enumerate(views)}
        losses = np.zeros(len(views))
        for v in workload.views:
            losses[index[v.attrs]] += v.weight * float(np.sum(view_queries(workload, v) ** 2))
        return MarginalsPlan(
            schema, workload, self.name, budget, views, np.asarray(allocate(losses, budget.beta).sigma2, dtype=float)
        )


def measurements(plan: MarginalsPlan) -> list[LinearMeasurement]:
    """What measure applies: each view's marginal itself (the identity: one record changes one cell
    by 1, so it costs 1 at unit noise under add-remove) with Gaussian noise of variance sigma2."""
    sizes = plan.schema.sizes
    return [
        LinearMeasurement(a, math.prod(sizes[i] for i in a), _identity, "gaussian", float(s2), 1.0, k)
        for k, (a, s2) in enumerate(zip(plan.views, plan.sigma2))
    ]


def _identity(x: np.ndarray) -> np.ndarray:
    return x


def check(plan: MarginalsPlan) -> None:
    """Every workload view is measured (a view's queries see its marginal only)."""
    missing = {v.attrs for v in plan.workload.views} - set(plan.views)
    if missing:
        raise InputError("plan", plan.method, f"{len(missing)} workload views are not measured")


class Estimates:
    """A view's table is its noisy marginal; its answers, the view's queries applied to it."""

    def __init__(self, plan: MarginalsPlan, meas):
        self.plan = plan
        self._y = {a: np.asarray(y, dtype=float) for a, y in zip(plan.views, meas.y)}

    def table(self, attrs):
        return self._y[tuple(attrs)]

    def view_answers(self, v):
        return view_queries(self.plan.workload, v) @ self.table(v.attrs)


class Variances:
    """Known from the plan alone: sigma2 per cell, sigma2 |q|^2 per query."""

    def __init__(self, plan: MarginalsPlan):
        self.plan = plan
        self._sigma2 = dict(zip(plan.views, plan.sigma2))

    def view(self, v):
        q = view_queries(self.plan.workload, v)
        return self._sigma2[v.attrs] * np.sum(q * q, axis=1)

    def cells(self, attrs):
        if tuple(attrs) not in self._sigma2:
            return None, "not measured"
        return np.full(math.prod(self.plan.schema.sizes[a] for a in attrs), self._sigma2[tuple(attrs)]), ""


def save(plan: MarginalsPlan, path) -> None:
    with atomic_h5(path, kind=FILE_KIND) as f:
        put_plan_header(f, plan)  # schema, workload, method, budget, summary
        g = new_group(f, "views")
        put_views(g, plan.views)
        put(g, "sigma2", np.asarray(plan.sigma2, dtype=np.float64))


def load(path) -> MarginalsPlan:
    """A saved plan, every field checked (one InputError naming it otherwise); runs no planner."""
    with open_h5(path, FILE_KIND) as f, r.h5py_errors(path, "plan file"):
        head = read_plan_header(f, neighbours=("add-remove",))
        g = r.child(f, "views", group=True)
        views = read_views(g, len(head.schema))
        sigma2 = r.array(g, "sigma2", kind="f", shape=(len(views),), positive=True)
    return MarginalsPlan(head.schema, head.workload, head.method, head.budget, views, np.asarray(sigma2, dtype=float))


_M = __name__
KIND = PlanKind(
    FILE_KIND,
    f"{_M}:MarginalsPlan",
    True,
    save=f"{_M}:save",
    load=f"{_M}:load",
    measurements=f"{_M}:measurements",
    check=f"{_M}:check",
    estimates=f"{_M}:Estimates",
    variances=f"{_M}:Variances",
)
