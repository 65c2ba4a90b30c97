"""Closed-form budget allocation across residual views (paper §6.4).

Each view's mechanism has privacy cost 1 and loss L_v. Scaling its noise by sigma_v^2 costs
1/sigma_v^2 and gives loss sigma_v^2 L_v. Minimising sum sigma_v^2 L_v subject to
sum 1/sigma_v^2 = beta gives sigma_v^2 = gamma / sqrt(L_v), gamma = sum sqrt(L_v) / beta, and a total
weighted variance (sum sqrt(L_v))^2 / beta. Views with L_v = 0 need no measurement.

>>> a = allocate([1.0, 4.0], beta=1.0)
>>> round(a.total_variance, 6), a.sigma2.round(6).tolist()
(9.0, [3.0, 1.5])

The allocation spends beta (1 - BUDGET_MARGIN), so rounding never overshoots beta.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .errors import InputError

__all__ = ["Allocation", "allocate", "rmse", "relative_gap", "is_certified", "PredictedError", "BUDGET_MARGIN"]

# Relative budget left unspent: far above the rounding of a sum over 10^5 views (~1e-11), far
# below any tolerance a reader would notice.
BUDGET_MARGIN = 1e-10


@dataclass(frozen=True, eq=False)
class Allocation:
    sigma2: np.ndarray  # per view; inf where the view is not measured (L = 0)
    total_variance: float
    beta: float
    costs: np.ndarray | None = None  # per-view privacy cost at sigma^2 = 1 (None: all 1)

    @property
    def privacy_cost(self) -> float:
        """sum c_v / sigma_v^2: the budget actually spent (at most beta)."""
        finite = np.isfinite(self.sigma2)
        c = np.ones_like(self.sigma2) if self.costs is None else self.costs
        return float(np.sum(c[finite] / self.sigma2[finite]))


def allocate(losses, beta: float, costs=None) -> Allocation:
    """Optimal noise scales for views with losses L_v at privacy costs c_v (default 1).

    With the actual costs (a mechanism's max diagonal, at most 1) the optimum is
    sigma_v^2 = gamma sqrt(c_v / L_v), gamma = sum sqrt(c_v L_v) / beta, total (sum sqrt(c_v L_v))^2 / beta,
    and sum c_v / sigma_v^2 = beta (1 - BUDGET_MARGIN): the reported budget is the spent one up to
    a relative 1e-10 kept so that no rounding (here or when measure recomputes the cost) exceeds beta.
    """
    losses = np.asarray(losses, dtype=float)
    costs = np.ones_like(losses) if costs is None else np.asarray(costs, dtype=float)
    if np.any(losses < 0) or not np.all(np.isfinite(losses)):
        raise ValueError("losses must be finite and non-negative")
    if costs.shape != losses.shape or np.any(costs <= 0) or not np.all(np.isfinite(costs)):
        raise ValueError("costs must be finite, positive and one per view")
    roots = np.sqrt(losses * costs)
    total = float(roots.sum())
    if total == 0:
        return Allocation(np.full(losses.shape, np.inf), 0.0, beta, costs)
    target = beta * (1 - BUDGET_MARGIN)
    gamma = total / target
    measured = roots > 0
    sigma2 = np.full(losses.shape, np.inf)
    sigma2[measured] = gamma * np.sqrt(costs[measured] / losses[measured])
    # Within the margin rounding cannot reach beta; the rescale only guards pathological inputs.
    spent = float(np.sum(costs[measured] / sigma2[measured]))
    if spent > target:
        sigma2 = sigma2 * (spent / target)
    if not np.all(np.isfinite(sigma2[measured])) or not np.all(sigma2[measured] > 0):
        # a view left unmeasured would be reconstructed as 0 with variance 0: refuse instead

        bad = int(np.sum(~(np.isfinite(sigma2[measured]) & (sigma2[measured] > 0))))
        raise InputError(
            "budget beta",
            beta,
            f"cannot be allocated: the noise scale of {bad} view(s) is not a finite positive number "
            "(the budget is too small or too large for their losses)",
        )
    return Allocation(sigma2, float(np.sum(sigma2[measured] * losses[measured])), beta, costs)


def rmse(total_variance: float, queries: float) -> float:
    """sqrt(total weighted variance / number of queries, weights counted as multiplicities)."""
    return math.sqrt(total_variance / queries) if queries else float("nan")


def relative_gap(total_variance: float, lower_bound: float) -> float:
    """How far a plan can be from optimal within its family at most: (variance - certified lower
    bound) / variance, the one definition every report uses (plan summaries, ``plan.json``, the
    evaluation, the paper tables; from RMSEs it is 1 - (lower RMSE / RMSE)^2, the same number).

    >>> relative_gap(10.0, 9.0)
    0.1
    """
    return (total_variance - lower_bound) / total_variance if total_variance > 0 else 0.0


def is_certified(summary) -> bool:
    """Whether a plan summary (any plan kind's ``summary()``, or ``plan.json``) carries a certificate:
    a positive finite lower bound on the optimal variance of the plan's family. The one definition
    ``plan.json``, the evaluation, the command line and the paper tables use.

    >>> is_certified({"lower_bound": 2.5}), is_certified({"lower_bound": 0.0}), is_certified({"rmse": 1.0})
    (True, False, False)
    """
    lb = summary.get("lower_bound")
    return isinstance(lb, (int, float)) and not isinstance(lb, bool) and math.isfinite(lb) and lb > 0


class PredictedError:
    """Mixin for plans: queries, total variance and RMSE from ``self.workload`` and ``self.allocation``."""

    @property
    def queries(self) -> float:
        return self.workload.query_count(weighted=True)

    @property
    def total_variance(self) -> float:
        return self.allocation.total_variance

    @property
    def rmse(self) -> float:
        return rmse(self.total_variance, self.queries)
