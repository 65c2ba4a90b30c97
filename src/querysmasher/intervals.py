"""Confidence intervals of released estimates: the multiplier z of ``estimate +- z * std_error``.

Every estimate a release publishes is a linear, unbiased function of the noisy measurements, and
its variance is known from the plan alone. Under Gaussian noise the error of such an estimate is
itself exactly Gaussian (a linear combination of independent Gaussians), so with
z = Phi^-1(1 - (1 - c) / 2) the interval covers the true value with probability exactly c: no
asymptotics, no record count, no assumption on the data. Under Laplace noise (HDMM's pure-DP
plans) the error is a sum of Laplace variables whose quantiles have no closed form; there
z = 1 / sqrt(1 - c) (Chebyshev's inequality): the coverage is at least c, conservatively.

``multiplier(c, cells=m)`` is Bonferroni's simultaneous z over m estimates (each at level
1 - (1 - c) / m); the published simultaneous intervals are :mod:`querysmasher.simultaneous`'s.

>>> round(multiplier(0.95), 4), round(multiplier(0.95, gaussian=False), 4)
(1.96, 4.4721)
>>> round(multiplier(0.95, cells=12), 4)
2.8653
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

from .documents import as_number
from .errors import InputError

__all__ = ["DEFAULT_CONFIDENCE", "check_confidence", "multiplier", "bounds", "is_gaussian", "interval_kind"]

DEFAULT_CONFIDENCE = 0.95


def check_confidence(value, field: str = "confidence") -> float:
    """``value`` as a confidence level strictly between 0 and 1, else one InputError naming ``field``."""
    c = as_number(value, field)
    if not (math.isfinite(c) and 0.0 < c < 1.0):
        raise InputError(field, value, "must be a number strictly between 0 and 1 (e.g. 0.95)")
    return c


def multiplier(confidence: float, *, gaussian: bool = True, cells: int = 1) -> float:
    """z for ``estimate +- z * std_error`` at ``confidence``, simultaneous over ``cells`` estimates
    (Bonferroni; 1: one estimate): exact under Gaussian noise, Chebyshev's bound otherwise."""
    alpha = (1.0 - float(confidence)) / max(int(cells), 1)
    if gaussian:
        return NormalDist().inv_cdf(1.0 - alpha / 2.0)
    return 1.0 / math.sqrt(alpha)


def is_gaussian(plan) -> bool:
    """Whether ``plan``'s noise is Gaussian (its budget says: a pure-DP budget is Laplace noise)."""
    return getattr(plan.budget, "noise", "gaussian") == "gaussian"


def bounds(estimates, variances, z: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(std_error, lower, upper) of ``estimates`` with ``variances``: estimate -+ z std_error."""
    estimates = np.asarray(estimates, dtype=float)
    se = np.sqrt(np.maximum(np.asarray(variances, dtype=float), 0.0))
    return se, estimates - z * se, estimates + z * se


def interval_kind(gaussian: bool) -> str:
    """What the intervals' coverage is, in the words the published index uses."""
    if gaussian:
        return (
            "exact: Gaussian noise and unbiased linear estimates, so estimate +- z std_error covers the true value "
            "with the stated probability"
        )
    return "at least the stated probability: Laplace noise, Chebyshev's inequality (conservative)"
