"""Privacy accounting for correlated Gaussian mechanisms (paper §3).

The privacy cost beta of a set of Gaussian linear mechanisms with privacy Gram
X = sum_i B_i^T Sigma_i^-1 B_i depends on the neighbouring relation:

* ``add-remove`` (default): data sets differ by one record added or removed, the data vector by
  e_i, and beta = max_i X_ii;
* ``replace``: data sets of the same size differ in one record, the data vector by e_i - e_j, and
  beta = max_{i != j} (e_i - e_j)^T X (e_i - e_j) (up to 4 max_i X_ii; the record count is public).

Either way beta is equivalent to

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
import sys
from dataclasses import dataclass

from .errors import InputError

__all__ = [
    "Budget",
    "PureBudget",
    "make_budget",
    "parse_budget",
    "BUDGET_FORMS",
    "BUDGET_PATTERN",
    "DEFAULT_REPORT_DELTA",
    "delta_for",
    "epsilon_for",
    "beta_for",
    "MIN_BETA",
    "MIN_DELTA",
    "check_delta",
    "NEIGHBOURS",
    "view_costs",
]

DEFAULT_REPORT_DELTA = 1e-6
NEIGHBOURS: tuple[str, ...] = ("add-remove", "replace")
# The smallest delta a budget may have (asked for, or reported at). delta_for is accurate to 1e-9
# relative only while its result is a normal float: below 2.2e-308 (subnormals) digits are lost, and
# from about 1e-318 down the beta chosen for a delta had a true delta up to 1.5 times the one asked
# (5e-324). The floor keeps every delta compared well inside normal floats; no guarantee needs less.
MIN_DELTA = 1e-300


_ASYMPTOTIC_BELOW = -30.0  # log Phi(x) by its asymptotic series below this (erfc underflows near -37)
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def _mills_tail(t: float) -> float:
    """t R(t) - 1 for t >= -_ASYMPTOTIC_BELOW (= 30), R(t) = Phi(-t) / phi(t) the Mills ratio, by its
    asymptotic series -1/t^2 + 3/t^4 - 15/t^6 + ...: at t >= 30 the terms fall by a factor of at
    least 36 each, so twelve of them are exact to double precision."""
    inv2 = 1.0 / (t * t)
    term, total = 1.0, 0.0
    for k in range(1, 13):
        term *= -(2 * k - 1) * inv2
        total += term
    return total


def _mills(t: float) -> float:
    """Phi(-t) / phi(t) for t >= -1 and t/sqrt(2) < 26 (exp(z^2) erfc(z), both in range)."""
    z = t / math.sqrt(2.0)
    return math.sqrt(math.pi / 2.0) * math.exp(z * z) * math.erfc(z)


def _log_mills(t: float) -> float:
    """log R(t) for t >= 0 (R the Mills ratio), without the cancellation of log Phi(-t) + t^2 / 2."""
    if t < -_ASYMPTOTIC_BELOW:
        return math.log(_mills(t))
    return math.log1p(_mills_tail(t)) - math.log(t)


def log_ndtr(x: float) -> float:
    """log Phi(x), the log of the standard normal CDF, to about 1e-15 relative for every float x
    (the values of ``scipy.special.log_ndtr``, which the tests compare it with; scipy's import
    costs about half a second in every pipeline job that reports a budget in (epsilon, delta)).

    >>> round(log_ndtr(0.0), 12) == round(math.log(0.5), 12), log_ndtr(-40.0) < -800
    (True, True)
    """
    if x >= _ASYMPTOTIC_BELOW:
        if x > 0:  # Phi(x) = 1 - Phi(-x): log1p keeps the tiny upper tail
            return math.log1p(-0.5 * math.erfc(x / math.sqrt(2.0)))
        return math.log(0.5 * math.erfc(-x / math.sqrt(2.0)))
    return -0.5 * x * x - _LOG_SQRT_2PI + _log_mills(-x)  # Phi(x) = phi(x) R(-x)


def _log_delta_terms(beta: float, eps: float) -> tuple[float, float]:
    """The logs of delta's two terms, Phi(x) and e^eps Phi(-t), with x = (beta/2 - eps)/s and
    t = (beta/2 + eps)/s, s = sqrt(beta). The second is phi(x) R(t) (t^2 = x^2 + 2 eps), which
    cancels nothing, where eps + log Phi(-t) cancels two numbers of about beta/2: from beta ~ 1e16
    it lost the digits delta needs (at beta 1e20 it reported epsilon 5e19 at delta 1e-6 for a true
    delta of 1). beta/2 - eps is exact when the two are close (Sterbenz), so x keeps its digits."""
    s = math.sqrt(beta)
    x, t = (beta / 2 - eps) / s, (beta / 2 + eps) / s
    return log_ndtr(x), -0.5 * x * x - _LOG_SQRT_2PI + _log_mills(t)


def check_delta(delta: float, field: str = "delta") -> float:
    """``delta`` when it is in [:data:`MIN_DELTA`, 1), else an InputError naming ``field``.

    >>> check_delta(1e-6), check_delta(1e-300)
    (1e-06, 1e-300)
    >>> check_delta(5e-324, "--delta")
    Traceback (most recent call last):
        ...
    querysmasher.errors.InputError: --delta 5e-324: must be in [1e-300, 1): smaller deltas exceed float accuracy
    """
    if not MIN_DELTA <= delta < 1:  # nan fails too
        why = ": smaller deltas exceed float accuracy" if 0 < delta < MIN_DELTA else ""
        raise InputError(field, delta, f"must be in [{MIN_DELTA:g}, 1){why}")
    return delta


# delta_for is accurate to about 1e-9 relative (tests compare it with 60-digit arithmetic, and
# tests/test_parser_properties.py with as many digits as the cancellations need, up to beta 1e300);
# budgets are chosen so that the delta they report holds with this margin to spare.
DELTA_RTOL = 1e-8
_SMALL_S = 1e-2  # below this sqrt(beta), the Mills-ratio form; above, the log form
_SQRT_2PI = math.sqrt(2.0 * math.pi)


def _one_minus_t_mills(t: float) -> float:
    """1 - t R(t), R the Mills ratio, for t >= -1: directly below 30, where it loses at most 3
    digits to cancellation; from 30 on (exp(z^2) overflows from t = 36.8) by the asymptotic series."""
    if t < -_ASYMPTOTIC_BELOW:
        return 1.0 - t * _mills(t)
    return -_mills_tail(t)


def _delta_small(s: float, eps: float) -> float:
    """delta for sqrt(beta) = s < _SMALL_S without cancellation. With u = eps/s - s/2, x = -u and
    y = x - s, e^eps phi(y) = phi(x), so delta = phi(u) (R(u) - R(u + s)) with R the Mills ratio,
    and R(u) - R(u + s) = int_u^{u+s} (1 - t R(t)) dt (R' = t R - 1): a positive, smooth integrand,
    here by Simpson's rule (relative error below s^4 / 2880)."""
    u = eps / s - s / 2.0
    phi_u = math.exp(-0.5 * u * u) / _SQRT_2PI
    g = _one_minus_t_mills
    return phi_u * s / 6.0 * (g(u) + 4.0 * g(u + s / 2.0) + g(u + s))


def delta_for(beta: float, eps: float) -> float:
    """delta(beta, eps) of the Gaussian mechanism with privacy cost beta, to about 1e-9 relative for
    every beta and a result of at least :data:`MIN_DELTA`: in logs without cancellation
    (:func:`_log_delta_terms`) or, for tiny beta, where the two terms of the definition cancel to
    the last digit, through the Mills ratio (:func:`_delta_small`).

    >>> delta_for(1.0, 4.8866) < 1e-6 < delta_for(1.0, 4.8865)
    True
    """
    if beta <= 0:
        return 0.0
    s = math.sqrt(beta)
    if s < _SMALL_S:
        return _delta_small(s, eps)
    a, b = _log_delta_terms(beta, eps)
    if a == -math.inf or b >= a:  # Phi(x) = 0; or rounding: the difference is non-negative exactly
        return 0.0
    return math.exp(a) * -math.expm1(b - a)


def _bisect(holds, ok: float, bad: float, rtol: float = 1e-14) -> float:
    """The end ``ok`` of an interval narrowed by bisection to a relative width of ``rtol``, where
    ``holds`` is monotone, True at ``ok`` and False at ``bad``: a value at which it provably holds.
    (Hand-written because scipy.optimize's import costs about half a second in every pipeline job
    that reports a budget, and an answer on the safe side is wanted, not a bracketed root.)"""
    for _ in range(2000):
        mid = (ok + bad) / 2
        if abs(bad - ok) <= rtol * max(abs(ok), abs(bad)) or mid in (ok, bad):
            break
        if holds(mid):
            ok = mid
        else:
            bad = mid
    return ok


def epsilon_for(beta: float, delta: float) -> float:
    """The smallest epsilon >= 0 with delta(beta, epsilon) <= delta, to a relative 1e-14, from above
    (the epsilon reported always has delta(beta, epsilon) <= delta, with :data:`DELTA_RTOL` to
    spare: delta decreases in epsilon).

    >>> e = epsilon_for(1.0, 1e-6)
    >>> round(e, 5), delta_for(1.0, e) <= 1e-6
    (4.88655, True)
    """

    def holds(e: float) -> bool:
        return delta_for(beta, e) * (1 + DELTA_RTOL) <= delta

    if holds(0.0):
        return 0.0
    hi = 1.0
    while not holds(hi):
        hi *= 2
    return _bisect(holds, hi, hi / 2 if hi > 1 else 0.0)


# The smallest privacy cost a budget may have: below it the noise scales of a plan overflow (a view
# with loss L gets sigma^2 = L / beta up to the allocation's factor), so views would go unmeasured.
MIN_BETA = 1e-250


def beta_for(eps: float, delta: float) -> float:
    """The largest beta with delta(beta, eps) <= delta, to a relative 1e-14, from below (delta
    increases in beta): the guarantee asked for holds exactly at the returned beta. When even
    :data:`MIN_BETA` gives a larger delta, no plan can meet the request: an InputError says what
    delta is achievable at that epsilon.

    >>> b = beta_for(1e-3, 1e-6); delta_for(b, 1e-3) <= 1e-6
    True
    """

    def holds(b: float) -> bool:
        return delta_for(b, eps) * (1 + DELTA_RTOL) <= delta

    if holds(1.0):
        lo, hi = 1.0, 2.0
        while holds(hi):
            lo, hi = hi, hi * 2
    else:
        hi, lo = 1.0, 0.5
        while not holds(lo):
            if lo < MIN_BETA:
                raise InputError(
                    "(epsilon, delta)",
                    (eps, delta),
                    f"cannot be met: at epsilon {eps:g} even the smallest budget beta {MIN_BETA:g} has delta "
                    f"{delta_for(MIN_BETA, eps):.3g}; ask for a larger epsilon or delta",
                )
            hi, lo = lo, lo / 2
    beta = _bisect(holds, lo, hi)
    if not holds(beta):  # _bisect keeps the end where it holds; this only guards the invariant
        raise InputError("(epsilon, delta)", (eps, delta), "no budget with exactly this guarantee was found")
    return beta


@dataclass(frozen=True)
class Budget:
    """A privacy budget, held as beta, reported in all four forms.

    ``source`` records how the user gave it (beta, rho, mu or epsilon-delta); ``delta`` is the delta
    at which epsilon is reported (the user's delta, or 1e-6); ``neighbours`` is the neighbouring
    relation the guarantee is for (``add-remove`` or ``replace``).
    """

    beta: float
    source: str = "beta"
    delta: float = DEFAULT_REPORT_DELTA
    neighbours: str = "add-remove"
    noise = "gaussian"

    def __post_init__(self) -> None:
        if not (isinstance(self.beta, (int, float)) and math.isfinite(self.beta) and self.beta > 0):
            raise InputError("beta", self.beta, "must be a finite number > 0")
        if self.beta < MIN_BETA:
            raise InputError(
                "beta", self.beta, f"is below {MIN_BETA:g}: the noise would overflow and views would go unmeasured"
            )
        check_delta(self.delta)
        if self.neighbours not in NEIGHBOURS:
            raise InputError("neighbours", self.neighbours, f"must be one of {', '.join(NEIGHBOURS)}")

    def with_neighbours(self, neighbours: str) -> Budget:
        """The same budget under another neighbouring relation."""
        return Budget(self.beta, self.source, self.delta, neighbours)

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
    def from_beta(cls, beta: float, delta: float = DEFAULT_REPORT_DELTA) -> Budget:
        return cls(float(beta), "beta", delta)

    @classmethod
    def from_rho(cls, rho: float, delta: float = DEFAULT_REPORT_DELTA) -> Budget:
        if not (math.isfinite(rho) and rho > 0):
            raise InputError("rho", rho, "must be a finite number > 0")
        return cls(2.0 * rho, "rho", delta)

    @classmethod
    def from_mu(cls, mu: float, delta: float = DEFAULT_REPORT_DELTA) -> Budget:
        if not (math.isfinite(mu) and mu > 0):
            raise InputError("mu", mu, "must be a finite number > 0")
        return cls(mu * mu, "mu", delta)

    @classmethod
    def from_epsilon_delta(cls, epsilon: float, delta: float) -> Budget:
        if not (math.isfinite(epsilon) and epsilon > 0):
            raise InputError("epsilon", epsilon, "must be a finite number > 0")
        return cls(beta_for(epsilon, check_delta(delta)), "epsilon-delta", delta)

    def to_dict(self) -> dict:
        return {
            "beta": self.beta,
            "rho": self.rho,
            "mu": self.mu,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "source": self.source,
            "neighbours": self.neighbours,
        }


@dataclass(frozen=True)
class PureBudget:
    """A pure ε-DP budget (Laplace noise, HDMM as its paper defines it): δ = 0, add-remove neighbours.

    >>> PureBudget(0.5).to_dict()["privacy"]
    'pure epsilon-DP'
    """

    epsilon: float
    noise = "laplace"
    neighbours = "add-remove"

    def __post_init__(self) -> None:
        if not (isinstance(self.epsilon, (int, float)) and math.isfinite(self.epsilon) and self.epsilon > 0):
            raise InputError("epsilon", self.epsilon, "must be a finite number > 0")

    def to_dict(self) -> dict:
        return {
            "epsilon": self.epsilon,
            "delta": 0.0,
            "source": "epsilon",
            "noise": "laplace",
            "privacy": "pure epsilon-DP",
        }


BUDGET_FORMS: tuple[str, ...] = ("beta", "rho", "mu", "epsilon")


def make_budget(
    *,
    beta=None,
    rho=None,
    mu=None,
    epsilon=None,
    delta=None,
    neighbours: str = "add-remove",
    noise: str = "gaussian",
    prefix: str = "",
) -> Budget | PureBudget:
    """The one rule every face applies to a budget: exactly one of beta, rho (zCDP), mu (GDP) or
    epsilon (which needs delta); none means beta = 1; with the other forms, delta is the delta at which
    epsilon is reported (default :data:`DEFAULT_REPORT_DELTA`). ``prefix`` is how the face names the
    fields in its errors (``--`` for the CLI, ``release spec: budget.`` for a release spec).

    >>> make_budget(rho=0.5).beta, make_budget(epsilon=1.0, delta=1e-6).source, make_budget().beta
    (1.0, 'epsilon-delta', 1.0)
    >>> make_budget(rho=1, mu=1, prefix="--")
    Traceback (most recent call last):
        ...
    querysmasher.errors.InputError: budget '--rho/--mu': give exactly one of --beta, --rho, --mu, --epsilon
    """
    values = {"beta": beta, "rho": rho, "mu": mu, "epsilon": epsilon}
    given = [k for k in BUDGET_FORMS if values[k] is not None]
    for k, v in [*values.items(), ("delta", delta)]:
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise InputError(prefix + k, v, "must be a number")
        if isinstance(v, int) and abs(v) > sys.float_info.max:  # an int no float holds
            raise InputError(prefix + k, v, "must be a finite number")
    if noise == "laplace":  # pure epsilon-DP: epsilon alone
        others = [prefix + k for k in (*given, *(["delta"] if delta is not None else [])) if k != "epsilon"]
        if others:
            raise InputError(
                f"{prefix}noise laplace", " ".join(others), f"takes only {prefix}epsilon (pure epsilon-DP, delta = 0)"
            )
        if epsilon is None:
            raise InputError(f"{prefix}noise laplace", "", f"needs {prefix}epsilon")
        if neighbours != "add-remove":
            raise InputError(
                prefix + "neighbours",
                neighbours,
                "pure epsilon-DP (Laplace) plans are accounted for add-remove neighbours only",
            )
        return PureBudget(epsilon)
    if noise != "gaussian":
        raise InputError(prefix + "noise", noise, "must be gaussian or laplace")
    if len(given) > 1:
        raise InputError(
            "budget",
            "/".join(prefix + k for k in given),
            "give exactly one of " + ", ".join(prefix + k for k in BUDGET_FORMS),
        )
    if epsilon is not None:
        if delta is None:
            raise InputError(prefix + "epsilon", epsilon, f"needs {prefix}delta")
        budget = Budget.from_epsilon_delta(float(epsilon), check_delta(float(delta), prefix + "delta"))
    else:
        report = check_delta(DEFAULT_REPORT_DELTA if delta is None else float(delta), prefix + "delta")
        form = "rho" if rho is not None else "mu" if mu is not None else "beta"
        value = 1.0 if values[form] is None else float(values[form])
        try:
            budget = {"beta": Budget.from_beta, "rho": Budget.from_rho, "mu": Budget.from_mu}[form](value, report)
        except InputError as exc:  # named as given (--mu 1e200), not as the beta it converts to
            reason = exc.reason if exc.field == form else f"gives beta {exc.value!r}, which {exc.reason}"
            raise InputError(prefix + form, value, reason) from None
    return budget.with_neighbours(neighbours)


BUDGET_PATTERN = r"^(?:(?:beta|rho|mu)=[0-9.eE+-]+|(?:eps|epsilon)=[0-9.eE+-]+,delta=[0-9.eE+-]+)$"


def parse_budget(value, delta: float | None = None, neighbours: str = "add-remove") -> Budget:
    """A budget written as one value (the workflow grid's ``budgets:``): a number (beta) or
    ``beta=B``, ``rho=R``, ``mu=U``, ``eps=E,delta=D``; ``delta`` is the report delta of the other
    forms. The rule is :func:`make_budget`'s.

    >>> parse_budget("rho=0.5").beta, parse_budget(2).beta, parse_budget("eps=1,delta=1e-6").source
    (1.0, 2.0, 'epsilon-delta')
    """
    import re  # import querysmasher.cli stays fast

    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise InputError("budget", value, "must be a number (beta) or beta=B, rho=R, mu=U, eps=E,delta=D")
    if isinstance(value, (int, float)):
        return make_budget(beta=value, delta=delta, neighbours=neighbours)
    text = value.strip()
    if not re.match(BUDGET_PATTERN, text):
        raise InputError("budget", value, "must be a number (beta) or beta=B, rho=R, mu=U, eps=E,delta=D")
    try:
        nums = {("epsilon" if k == "eps" else k): float(v) for k, v in (p.split("=", 1) for p in text.split(","))}
    except ValueError:
        raise InputError("budget", value, "holds a value that is not a number") from None
    if "epsilon" not in nums:
        nums["delta"] = delta
    return make_budget(**nums, neighbours=neighbours)


def view_costs(keys, solutions, neighbours: str = "add-remove"):
    """Each view's privacy cost at sigma^2 = 1 under the neighbouring relation, computed once per key
    (``solutions[key].mechanism``), as every allocation (sum or max objective) charges it.

    Under ``replace`` a view can cost 0 (the total count is invariant); it is charged a floor of
    1e-12 times the largest cost so that it is still measured, with finite noise (over-charging is safe).
    """
    import numpy as np  # loads numpy: import querysmasher.cli stays fast

    per_key = {k: solutions[k].mechanism.cost(neighbours) for k in set(keys)}
    costs = np.array([per_key[k] for k in keys], dtype=float)
    if costs.size:
        costs = np.maximum(costs, 1e-12 * costs.max() if costs.max() > 0 else 1.0)
    return costs
