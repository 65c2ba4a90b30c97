"""HDMM's plan kind (``hdmm-plan``): what its plans measure, and their answers from the measurements.

Each strategy group g is one measurement of the full data vector (every attribute, cells
row-major in schema order): its Kronecker blocks' answers A_g x, concatenated, with Gaussian noise
of variance σ_g² (cost: the applied operator's, :meth:`~.implicit.KronStrategy.applied_cost`) or
Laplace noise of scale b_g calibrated to its L1 sensitivity (:func:`~.plan.noise_cost`). Measuring
and reconstructing need the full data vector, so they refuse domains above ``MAX_DOMAIN_CELLS``
before any record is read. Each group's least-squares estimate x̂_g = X_g^+ A_g^T y_g answers the
views of that group (HDMM's OPT_+ error model, which the plan predicts exactly); HDMM gives answers
per query, without per-view tables or per-query variances.
"""

from __future__ import annotations

import numpy as np

from ..decompose import lifted_queries, view_answers
from ..errors import InputError
from ..measurement import LinearMeasurement, Measurements
from .plan import MAX_DOMAIN_CELLS, HDMMPlan, check_domain, noise_cost

__all__ = [
    "hdmm_measurements",
    "check_measurable",
    "HDMMEstimates",
    "HDMMVariances",
]


def _concatenated(strategy):
    return lambda x: np.concatenate(strategy.answer(x), axis=0)


def hdmm_measurements(plan: HDMMPlan, max_domain_cells: int = MAX_DOMAIN_CELLS) -> list[LinearMeasurement]:
    """One measurement per strategy group over every attribute; the one-line InputError first when
    the full data vector would exceed ``max_domain_cells`` (HDMM's real limit)."""
    check_domain(plan, max_domain_cells)
    every = tuple(range(len(plan.schema)))
    laplace = plan.noise == "laplace"
    scales = plan.allocation.scales if laplace else plan.allocation.sigma2
    return [
        LinearMeasurement(
            every,
            int(sum(g.strategy.block_rows())),
            _concatenated(g.strategy),
            plan.noise,
            float(s),
            noise_cost(g.strategy) if laplace else g.strategy.applied_cost(),
            k,
        )
        for k, (g, s) in enumerate(zip(plan.groups, scales))
    ]


ESTIMABLE_RTOL = 1e-8  # the part of a probe outside a strategy's range, relative to the probe


def check_measurable(plan: HDMMPlan) -> None:
    """Refuse (InputError), before any record is read, a plan whose domain exceeds the full data
    vector's limit, or whose strategies do not determine their views' queries: for each group a
    random combination of its views' queries w must be in the range of its strategy, which the
    least-squares estimate relies on (|x̂(A w) - w| = |X^+ X w - w|, through the operators measure
    and reconstruct apply; a part outside the range shows with probability one)."""
    check_domain(plan, MAX_DOMAIN_CELLS)
    rng = np.random.default_rng(0)  # a probe of the plan, not of the data
    for gi, g in enumerate(plan.groups):
        w = sum(
            lifted_queries(
                plan.workload,
                plan.workload.views[j],
                rng.standard_normal(plan.workload.view_count(plan.workload.views[j])),
            )
            for j in g.views
        )
        outside = np.linalg.norm(g.strategy.estimate(g.strategy.answer(w)) - w)
        if not outside <= ESTIMABLE_RTOL * np.linalg.norm(w):
            raise InputError(
                "plan",
                plan.method,
                f"the strategy of group {gi} does not reach its views' queries: measuring the plan would "
                "spend the budget on answers that cannot be given",
            )


class HDMMEstimates:
    """Each group's least-squares estimate of the data vector (computed on first use) and the
    answers of the workload views it answers."""

    def __init__(self, plan: HDMMPlan, meas: Measurements, max_domain_cells: int = MAX_DOMAIN_CELLS):
        check_domain(plan, max_domain_cells)
        self.plan, self.meas = plan, meas
        self._group = {j: gi for gi, g in enumerate(plan.groups) for j in g.views}
        self._view = {id(v): j for j, v in enumerate(plan.workload.views)}
        self._estimates: dict[int, np.ndarray] = {}

    def _estimate(self, gi: int) -> np.ndarray:
        if gi not in self._estimates:
            strategy = self.plan.groups[gi].strategy
            cuts = np.cumsum(strategy.block_rows())[:-1]
            self._estimates[gi] = strategy.estimate(
                tuple(np.split(np.asarray(self.meas.y[gi], dtype=float), cuts))
            ).reshape(self.plan.schema.sizes)
        return self._estimates[gi]

    def view_answers(self, v) -> np.ndarray:
        j = self._view.get(id(v))
        if j is None:
            raise InputError("workload view", v, "is not a view of this plan's workload")
        xhat = self._estimate(self._group[j])
        marg = xhat.sum(axis=tuple(i for i in range(xhat.ndim) if i not in v.attrs)).ravel()
        return view_answers(self.plan.workload, v, marg)


class HDMMVariances:
    """HDMM's answers come without per-query variances or per-view tables (its plan predicts the
    total error exactly: ``plan.rmse``)."""

    def __init__(self, plan: HDMMPlan):
        self.plan = plan

    def view(self, v) -> None:
        return None

    def cells(self, attrs) -> tuple[None, str]:
        return None, f"{self.plan.method} answers have no per-view tables"
