"""What a marginal-family plan's measure applies: its operators and their privacy cost.

Each marginal view k releases y_k = B_k x_k + N(0, sigma_k^2 I) with B_k = F^T (the view's unit-
diagonal correlation factor) and sigma_k^2 = 1 / share_k, so its privacy Gram B^T B / sigma^2 is
the planned X_k; each residual-only subset T releases y_T = X_T^1/2 x_T + N(0, sigma_T^2 I) with
its ``qs`` mechanism, as ``qs`` measures it. Planning (the privacy cost under ``replace``), the
privacy re-check before measuring and the measurement itself (:mod:`.gls`) all read these.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..linalg import psd_power
from ..mechanisms.base import factor_pair_distance

__all__ = ["Measurement", "measurement_operators", "operator_cost", "applied_privacy_cost"]


@dataclass(frozen=True)
class Measurement:
    """One released vector: y = ``operator`` @ (marginal on ``attrs``) + N(0, ``sigma2`` I)."""

    attrs: tuple[int, ...]
    operator: np.ndarray  # rows x cells of the marginal
    sigma2: float
    kind: str  # "marginal" (a marginal view) or "residual" (a residual-only subset, qs mechanism)


def measurement_operators(plan) -> list[Measurement]:
    """The operators measure applies, in order: marginal views, then residual-only subsets."""
    out = []
    for k, attrs in enumerate(plan.views):
        f = plan.factors[int(plan.factor_of[k])]
        out.append(Measurement(tuple(attrs), f.T, 1.0 / float(plan.shares[k]), "marginal"))
    for j, attrs in enumerate(plan.residual_views):
        mech = plan.residual_mechanism(j)
        out.append(
            Measurement(tuple(attrs), psd_power(mech.dense_x(), 0.5), float(plan.residual_sigma2[j]), "residual")
        )
    return out


def operator_cost(operator: np.ndarray, neighbours: str = "add-remove") -> float:
    """The privacy cost at unit noise of releasing ``operator`` @ (a marginal) (rows x cells).
    Add-remove: one record adds one cell to the marginal, so it costs the largest squared column
    norm. Replace: one record moves from one cell to another (or stays), so it costs the largest
    |B (e_i - e_j)|^2 over cell pairs (:func:`~querysmasher.mechanisms.base.factor_pair_distance`)."""
    if neighbours == "add-remove":
        return float(np.max(np.einsum("ij,ij->j", operator, operator)))
    if neighbours == "replace":
        return float(factor_pair_distance(operator.T))
    raise ValueError(f"neighbours must be add-remove or replace, not {neighbours!r}")


def applied_privacy_cost(measurements: list[Measurement], neighbours: str = "add-remove") -> float:
    """The privacy cost of the operators actually applied, summed over the measurements (each
    :func:`operator_cost` over its sigma^2); under replace the sum over-reports when no record pair
    reaches every measurement's worst pair at once, which is safe."""
    return float(sum(operator_cost(m.operator, neighbours) / m.sigma2 for m in measurements))
