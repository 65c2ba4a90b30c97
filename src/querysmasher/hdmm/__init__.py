"""HDMM (McKenna et al.): one strategy for the whole, implicitly represented workload (a baseline,
not a per-view method), with Gaussian noise (zCDP) or Laplace noise (pure ε-DP, a :class:`PureBudget`).

>>> from querysmasher.accounting import Budget
>>> p = plan_hdmm("synthetic:n=10,d=8", "prefix:1,2", Budget.from_beta(1.0), restarts=1)
>>> p.template, round(p.rmse, 2)
('kron', 10.16)
"""

from .implicit import ImplicitWorkload, KronStrategy
from .laplace import LaplaceStrategy, PureBudget
from .plan import DEFAULT_TEMPLATES, TEMPLATES, HDMMGroup, HDMMPlan, plan_hdmm

__all__ = [
    "ImplicitWorkload",
    "KronStrategy",
    "LaplaceStrategy",
    "PureBudget",
    "TEMPLATES",
    "DEFAULT_TEMPLATES",
    "HDMMGroup",
    "HDMMPlan",
    "plan_hdmm",
]
