"""Privacy accounting for correlated Gaussian mechanisms (paper §3).

The privacy cost beta of a set of Gaussian linear mechanisms is the largest diagonal entry of
sum_i B_i^T Sigma_i^-1 B_i. It is equivalent to

* rho-zCDP with rho = beta / 2,
* mu-Gaussian DP with mu = sqrt(beta),
* (epsilon, delta)-DP for every pair with
  delta = Phi(sqrt(beta)/2 - eps/sqrt(beta)) - e^eps Phi(-sqrt(beta)/2 - eps/sqrt(beta)).

>>> b = Budget.from_rho(0.5)
>>> b.beta, b.mu
(1.0, 1.0)
>>> round(Budget.from_epsilon_delta(1.0, 1e-6).beta, 6)
0.056029
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import InputError

__all__ = ["Budget", "delta_for", "epsilon_for", "beta_for"]

DEFAULT_REPORT_DELTA = 1e-6


def _log_delta_terms(beta: float, eps: float) -> tuple[float, float]:
    from scipy.special import log_ndtr  # imported here: scipy costs ~0.5 s of every CLI start

    s = math.sqrt(beta)
    return log_ndtr(s / 2 - eps / s), eps + log_ndtr(-s / 2 - eps / s)


def delta_for(beta: float, eps: float) -> float:
    """delta(beta, eps) of the Gaussian mechanism with privacy cost beta (exact, stable in logs)."""
    if beta <= 0:
        return 0.0
    a, b = _log_delta_terms(beta, eps)
    if b >= a:  # rounding: the difference is non-negative in exact arithmetic
        return 0.0
    return math.exp(a) * -math.expm1(b - a)


def epsilon_for(beta: float, delta: float) -> float:
    """The smallest epsilon >= 0 with delta(beta, epsilon) <= delta."""
    from scipy.optimize import brentq

    if delta_for(beta, 0.0) <= delta:
        return 0.0
    hi = 1.0
    while delta_for(beta, hi) > delta:
        hi *= 2
    return brentq(lambda e: delta_for(beta, e) - delta, 0.0, hi, xtol=1e-12, rtol=1e-12)


def beta_for(eps: float, delta: float) -> float:
    """The largest beta with delta(beta, eps) <= delta (delta is increasing in beta)."""
    from scipy.optimize import brentq

    lo, hi = 1e-12, 1.0
    while delta_for(hi, eps) <= delta:
        lo, hi = hi, hi * 2
    # A root slightly below the true one is safe: report a beta whose delta does not exceed the target.
    b = brentq(lambda x: delta_for(x, eps) - delta, lo, hi, xtol=1e-14, rtol=1e-13)
    while delta_for(b, eps) > delta:
        b *= 1 - 1e-12
    return b


@dataclass(frozen=True)
class Budget:
    """A privacy budget, held as beta, reported in all four forms.

    ``source`` records how the user gave it (beta, rho, mu or epsilon-delta); ``delta`` is the delta
    at which epsilon is reported (the user's delta, or 1e-6).
    """

    beta: float
    source: str = "beta"
    delta: float = DEFAULT_REPORT_DELTA

    def __post_init__(self) -> None:
        if not (isinstance(self.beta, (int, float)) and math.isfinite(self.beta) and self.beta > 0):
            raise InputError("beta", self.beta, "must be a finite number > 0")
        if not 0 < self.delta < 1:
            raise InputError("delta", self.delta, "must be in (0, 1)")

    @property
    def rho(self) -> float:
        return self.beta / 2

    @property
    def mu(self) -> float:
        return math.sqrt(self.beta)

    @property
    def epsilon(self) -> float:
        return epsilon_for(self.beta, self.delta)

    @classmethod
    def from_beta(cls, beta: float, delta: float = DEFAULT_REPORT_DELTA) -> "Budget":
        return cls(float(beta), "beta", delta)

    @classmethod
    def from_rho(cls, rho: float, delta: float = DEFAULT_REPORT_DELTA) -> "Budget":
        if not (math.isfinite(rho) and rho > 0):
            raise InputError("rho", rho, "must be a finite number > 0")
        return cls(2.0 * rho, "rho", delta)

    @classmethod
    def from_mu(cls, mu: float, delta: float = DEFAULT_REPORT_DELTA) -> "Budget":
        if not (math.isfinite(mu) and mu > 0):
            raise InputError("mu", mu, "must be a finite number > 0")
        return cls(mu * mu, "mu", delta)

    @classmethod
    def from_epsilon_delta(cls, epsilon: float, delta: float) -> "Budget":
        if not (math.isfinite(epsilon) and epsilon > 0):
            raise InputError("epsilon", epsilon, "must be a finite number > 0")
        if not 0 < delta < 1:
            raise InputError("delta", delta, "must be in (0, 1)")
        return cls(beta_for(epsilon, delta), "epsilon-delta", delta)

    def to_dict(self) -> dict:
        return {
            "beta": self.beta,
            "rho": self.rho,
            "mu": self.mu,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "source": self.source,
        }
