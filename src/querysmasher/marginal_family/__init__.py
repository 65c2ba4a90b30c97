"""Marginal-space mechanisms beyond the residual family (method ``qsplus``): one Gaussian mechanism per workload view on its whole marginal.

Modules: :mod:`.basis` (residual basis and coordinates), :mod:`.problem` (structure, objective,
gradient), :mod:`.optimize` (the optimiser and its certificate), :mod:`.planner` (``plan`` and the
:class:`MarginalPlan` record), :mod:`.gls` (measurement operators, GLS answers, exact variances).
"""

from __future__ import annotations

__all__: list[str] = []
