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
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import ClassVar

import numpy as np

from . import maxvar
from .accounting import Budget
from .allocation import Allocation, PredictedError, relative_gap, rmse
from .schema import Schema
from .solvers import ViewSolution
from .svd_bound import svd_bound
from .workload import Workload

log = logging.getLogger(__name__)

__all__ = ["Plan", "LAYOUTS"]

LAYOUTS: tuple[str, ...] = ("residual", "full-domain")


@dataclass(eq=False)
class Plan(PredictedError):
    """Everything the measure and reconstruct stages need, plus the predicted error."""

    file_kind: ClassVar[str] = "plan"  # its kind in querysmasher.plankinds (files, release stages)
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
        return relative_gap(self.total_variance, self.lower_bound)

    @cached_property
    def svd_bound(self) -> float | None:
        """The SVD bound on every Gaussian mechanism's total variance at this budget, where exactly
        computable (:func:`querysmasher.svd_bound.svd_bound`); None otherwise."""
        t0 = time.perf_counter()
        b = svd_bound(self.workload)
        self.phase_seconds["svd_bound"] = time.perf_counter() - t0
        return None if b is None else b / self.budget.beta

    @cached_property
    def max_variance(self) -> tuple[float, int, int]:
        """(largest weighted query variance, workload view index, query index within the view)."""
        t0 = time.perf_counter()
        out = maxvar.max_variance_of(self)
        self.phase_seconds["max_variance"] = time.perf_counter() - t0
        return out

    def summary(self, max_variance: bool = True) -> dict:
        """The plan's figures (predicted errors, certificate, phases); ``max_variance=False`` leaves
        out the largest query variance, whose per-query report costs O(queries x cells^2) per dense
        view (35 minutes of one core on Table 4's random row at n = 50)."""
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
        }
        if max_variance:
            value, j, i = self.max_variance
            v = self.workload.views[j]
            out["max_variance"] = value
            out["max_variance_query"] = {
                "view": [self.schema.names[a] for a in v.attrs],
                "family": v.family,
                "index": i,
            }
        if self.max_certificate is not None:
            out.update(self.max_certificate)
        if self.certified and self.lower_bound > 0:
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
        return (
            f"Plan({self.method}, {self.workload.spec} over {self.schema.name}: RMSE {self.rmse:.4g}, "
            f"{len(self.views)} residual views, {len(self.solutions)} distinct solves, beta {self.budget.beta:.4g})"
        )
