"""HDMM (McKenna et al.) with Gaussian noise: one strategy for the whole, implicitly represented
workload (a baseline, not a per-view method).

>>> from querysmasher.accounting import Budget
>>> p = plan_hdmm("synthetic:n=10,d=40", "prefix:1,2", Budget.from_beta(1.0), restarts=1)
>>> p.optimizer, round(p.rmse, 2)
('kron', 52.35)
"""

from .implicit import ImplicitWorkload, KronStrategy
from .plan import OPTIMIZERS, HDMMGroup, HDMMMeasurements, HDMMPlan, hdmm_measure, hdmm_reconstruct, plan_hdmm

__all__ = [
    "ImplicitWorkload",
    "KronStrategy",
    "OPTIMIZERS",
    "HDMMGroup",
    "HDMMMeasurements",
    "HDMMPlan",
    "hdmm_measure",
    "hdmm_reconstruct",
    "plan_hdmm",
]
