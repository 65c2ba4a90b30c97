"""``qsplus``'s plan kind (``marginal-plan``): what a :class:`.planner.MarginalPlan` measures, and its
answers, tables and exact variances from the measurements.

Each marginal view k is one measurement y_k = B_k x_k + N(0, sigma_k^2 I) and each residual-only
subset T one y_T = X_T^1/2 x_T + N(0, sigma_T^2 I) (:func:`.operators.measurement_operators`), each
costed from the operator it applies (:func:`.operators.operator_cost` under the budget's
neighbouring relation). The answers are the GLS estimates of :mod:`.gls` (the normal equations
eliminated once per plan): every workload view's table and answers, their exact variances, and a
table's cell variances where its cells are estimable (:func:`.gls.table_estimable`) and it has at
most :data:`MAX_TABLE_CELLS` cells.
"""

from __future__ import annotations

import math
import weakref

import numpy as np

from ..decompose import view_answers
from ..measurement import LinearMeasurement, Measurements
from .gls import query_variances, solver_of, table_estimable, view_queries, view_table
from .operators import measurement_operators, operator_cost

__all__ = ["marginal_measurements", "MarginalEstimates", "MarginalVariances", "MAX_TABLE_CELLS"]

MAX_TABLE_CELLS = 4096  # cell variances of a table: explicit (cells x cells) up to this many cells

_OPERATORS: weakref.WeakKeyDictionary = (
    weakref.WeakKeyDictionary()
)  # one square root per residual-only mechanism and plan


def _operators(plan):
    ops = _OPERATORS.get(plan)
    if ops is None:
        ops = _OPERATORS[plan] = measurement_operators(plan)
    return ops


def marginal_measurements(plan) -> list[LinearMeasurement]:
    """The plan's measurements in order: marginal views, then residual-only subsets."""
    neighbours = plan.budget.neighbours
    return [
        LinearMeasurement(
            m.attrs,
            int(m.operator.shape[0]),
            m.operator.__matmul__,
            "gaussian",
            float(m.sigma2),
            operator_cost(m.operator, neighbours),
            k,
        )
        for k, m in enumerate(_operators(plan))
    ]


class MarginalEstimates:
    """The GLS estimates of every residual coordinate (solved once), and the tables and answers
    they give."""

    def __init__(self, plan, meas: Measurements):
        self.plan = plan
        self._phi = solver_of(plan).solve(_operators(plan), [np.asarray(y, dtype=float) for y in meas.y])

    def table(self, attrs: tuple[int, ...]) -> np.ndarray:
        return view_table(self.plan, self._phi, tuple(attrs))

    def view_answers(self, v) -> np.ndarray:
        return view_answers(self.plan.workload, v, self.table(v.attrs))


class MarginalVariances:
    """The exact variances of a ``qsplus`` plan's answers, known from the plan alone."""

    def __init__(self, plan):
        self.plan = plan

    def view(self, v) -> np.ndarray:
        return query_variances(self.plan, v.attrs, view_queries(self.plan.workload, v))

    def cells(self, attrs: tuple[int, ...]) -> tuple[np.ndarray | None, str]:
        ok, why = table_estimable(self.plan, tuple(attrs))
        if not ok:
            return None, why
        n = math.prod(self.plan.schema.sizes[a] for a in attrs)
        if n > MAX_TABLE_CELLS:
            return None, f"more than {MAX_TABLE_CELLS} cells: cell variances not computed"
        return query_variances(self.plan, tuple(attrs), np.eye(n)), ""
