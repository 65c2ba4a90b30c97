"""Marginal-space mechanisms beyond the residual family (method ``qsplus``): one Gaussian mechanism per workload
view on its whole marginal.

Modules: :mod:`.basis` (residual basis and coordinates), :mod:`.problem` (structure, objective, gradient),
:mod:`.optimize` (the optimiser), :mod:`.certificate` (its dual bound), :mod:`.symmetric` (the exact reduced SDP of
uniform all-pairs workloads, by the attribute permutations' isotypic blocks), :mod:`.symmetric_polish` (the primal
polish of its restricted points), :mod:`.restricted` (every view's top kept to its workload's span on untied problems),
:mod:`.active_newton` (its last mile: Newton steps with the active cells held equal), :mod:`.planner` (:func:`plan` and
the :class:`MarginalPlan` record), :mod:`.operators` (what measure applies and its privacy cost), :mod:`.gls` (noisy
measurements, GLS answers, exact variances).

Integration entry points::

    p = plan(schema, workload, budget, max_view_size=2, target_gap=1e-4)   # -> MarginalPlan
    ops = measurement_operators(p)          # what measure applies (attrs, operator, sigma2)
    applied_privacy_cost(ops)               # the budget re-check on the applied operators
    ys = measure_marginals(p, marginals, noise)   # marginals: {attrs: vector} or callable
    ans = reconstruct(p, ys)                # Answers: per workload view answers, variances, tables
"""

from __future__ import annotations

from .operators import Measurement, applied_privacy_cost, measurement_operators
from .planner import METHOD, MarginalPlan, plan
from .problem import MarginalProblem, build_problem

_RELEASE_MATH = ("Answers", "measure_marginals", "reconstruct")


def __getattr__(name: str):
    # the measure and reconstruct side (.gls) loads on first use: importing the planner never loads
    # it, so the workflow's fingerprints do not tie a plan to the release code
    if name in _RELEASE_MATH:
        from . import gls  # loaded on first use: importing the package never loads it (the workflow's fingerprints)

        return getattr(gls, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "plan",
    "MarginalPlan",
    "METHOD",
    "build_problem",
    "MarginalProblem",
    "Measurement",
    "measurement_operators",
    "applied_privacy_cost",
    "measure_marginals",
    "reconstruct",
    "Answers",
]
