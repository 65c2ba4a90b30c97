"""The exact Gaussian matrix mechanism (method ``mm``): the certified dense solver on the whole domain.

Minimising tr(G X^+) over every privacy Gram X with diag X <= 1, G = W^T W over all N cells (cross
terms between residual spaces included), is the exact matrix-mechanism problem; the dense solver
(:func:`querysmasher.solvers.sdp.solve_dense`) solves it with a certified duality gap. It is a plan
with one "view" holding every attribute and one dense mechanism, so measure applies X^½ to the full
histogram and reconstruct answers every query by generalised least squares over the full domain.

The residual optimum (``qs``) embedded in the full domain, sum_v M_v^T X_v M_v / sigma_v^2 with M_v
the marginal map, is a second candidate: the lower loss is kept, so mm <= qs holds by construction,
while the certificate is the full-domain dual bound. Domains above ``max_cells`` are refused.

>>> from querysmasher.accounting import Budget
>>> p = plan_mm("synthetic:n=10,d=1", "prefix:1", Budget.from_beta(1.0), target_gap=1e-7)
>>> round(p.rmse, 4), p.certified
(1.5561, True)
"""

from __future__ import annotations

import time

import numpy as np

from ..accounting import Budget
from ..fulldomain import DEFAULT_MAX_FULL_CELLS, cell_index, check_fits, full_domain_gram
from ..mechanisms import ViewMechanism
from ..options import Option, check_options
from ..plan import Plan
from ..schema import Schema, parse_schema
from ..solvers.qs import DEFAULT_TARGET_GAP, QSSolver
from ..solvers.sdp import loss_of, solve_dense
from ..workload import Workload, parse_workload
from .residual import plan_residual
from .wholedomain import full_domain_plan

__all__ = ["plan_mm", "residual_plan_as_full_domain", "MMPlanner"]


def residual_plan_as_full_domain(plan) -> np.ndarray:
    """The privacy Gram over the full domain of a residual plan: sum_v M_v^T X_v M_v / sigma_v^2."""
    sizes = plan.schema.sizes
    n = plan.schema.domain_cells()
    total = np.zeros((n, n))
    for attrs, key, s2 in zip(plan.views, plan.keys, plan.allocation.sigma2):
        if np.isfinite(s2):
            idx = cell_index(sizes, attrs)
            total += plan.solutions[key].mechanism.dense_x()[np.ix_(idx, idx)] / s2
    return total


def plan_mm(
    schema: Schema | str,
    workload: Workload | str,
    budget: Budget,
    *,
    all_numeric: bool = False,
    target_gap: float = DEFAULT_TARGET_GAP,
    max_cells: int = DEFAULT_MAX_FULL_CELLS,
):
    """Plan the exact matrix mechanism for a workload whose full domain has at most ``max_cells`` cells."""
    t0 = time.perf_counter()
    if isinstance(schema, str):
        schema = parse_schema(schema, all_numeric=all_numeric)
    if isinstance(workload, str):
        workload = parse_workload(workload, schema)
    check_fits(workload, max_cells, "mm")
    g = full_domain_gram(workload)
    t1 = time.perf_counter()
    r = solve_dense(g, target_gap=target_gap)
    t2 = time.perf_counter()
    candidates = [(r.X, r.loss, "mm")]
    # the residual optimum is a full-domain mechanism too: keep it if the solve stopped above it
    qs = plan_residual(
        workload, "qs", QSSolver(target_gap=target_gap, max_dense_cells=max_cells), Budget.from_beta(1.0)
    )
    x_qs = residual_plan_as_full_domain(qs)
    x_qs = x_qs / float(np.diag(x_qs).max())
    candidates.append((x_qs, loss_of(g, x_qs), "mm/qs"))
    x, loss, which = min(candidates, key=lambda c: c[1])
    low = min(r.lower_bound, loss)
    note = "" if r.converged else f"full-domain solve stopped at gap {r.gap:.2e} (target {target_gap:.0e})"
    phases = {"gram": t1 - t0, "solve": t2 - t1, "residual_candidate": time.perf_counter() - t2}
    return full_domain_plan(
        schema,
        workload,
        "mm",
        budget,
        ViewMechanism("dense", schema.sizes, (x,)),
        loss=loss,
        lower_bound=low,
        solver=which,
        note=note,
        phase_seconds=phases,
    )


SOLVE_DENSE_ARRAYS = 8  # the full-domain solve's cells x cells arrays held at once
RELEASE_DENSE_ARRAYS = 3  # measure / reconstruct: X, X^1/2 and X^+1/2


class MMPlanner:
    """Method ``mm``: the exact matrix mechanism (a whole-workload planner, :mod:`querysmasher.methods`).

    Options: :attr:`option_specs`."""

    name = "mm"
    objectives = ("sum",)
    option_specs = (
        Option(
            "target_gap",
            "number",
            "relative duality gap of the full-domain solve (default 1e-4)",
            low=0,
            high=1,
            open_low=True,
            open_high=True,
        ),
        Option(
            "max_dense_cells", "int", f"largest full domain planned (default {DEFAULT_MAX_FULL_CELLS:,} cells)", low=1
        ),
    )

    @staticmethod
    def resources(workload, stage: str) -> dict:
        """What a job of ``stage`` holds beyond the workflow's own model
        (:mod:`querysmasher.pipeline.resources`): the dense full-domain solve's arrays (allocate),
        else the one full-domain mechanism (X, its square root and pseudo-inverse root) and the
        full data vector, for domains up to the default ``max_dense_cells``."""
        c = min(workload.schema.domain_cells(), DEFAULT_MAX_FULL_CELLS)
        if stage == "allocate":
            return {"mem_mb": SOLVE_DENSE_ARRAYS * 8.0 * c * c / 2**20, "seconds": 0.0}
        return {"mem_mb": (RELEASE_DENSE_ARRAYS * 8.0 * c * c + 8.0 * 6 * c) / 2**20, "seconds": 0.0}

    def __init__(self, target_gap: float = DEFAULT_TARGET_GAP, max_dense_cells: int = DEFAULT_MAX_FULL_CELLS):
        opts = check_options(
            self.name, self.option_specs, {"target_gap": target_gap, "max_dense_cells": max_dense_cells}
        )
        self.target_gap, self.max_cells = opts["target_gap"], opts["max_dense_cells"]

    def plan(self, schema: Schema, workload: Workload, budget: Budget, *, objective: str = "sum") -> Plan:
        return plan_mm(schema, workload, budget, target_gap=self.target_gap, max_cells=self.max_cells)
