"""An example querysmasher plugin: a per-view solver and a whole-workload planner.

``scaledid`` (entry-point group ``querysmasher.solvers``) is the scaled identity on each residual
view's subspace; ``fullident`` (group ``querysmasher.planners``) measures the whole data vector with
the identity (every cell's count with noise), a whole-workload planner in a dozen lines.

The solver:

A residual view's queries live in the subspace P = ⊗ (I - J/n_i) of its marginal (the contract:
X = P X P). This solver measures that subspace with independent noise: X = c · P, with c chosen so
the privacy cost max diag(X) equals ``scale`` (<= 1), and reports the loss tr(G X^+) = tr(G) / c. It
has no optimality certificate, so its lower bound is 0.0. At ``scale=1`` it is ResidualPlanner's
mechanism (``rp``); a smaller scale spends less than the view's share, which the allocation then
compensates. It is the smallest complete plugin, not a good mechanism.

>>> from querysmasher.testing import plan_with
>>> plan_with(ScaledIdentitySolver(), "prefix:1").method
'scaledid'
"""

from __future__ import annotations

import numpy as np

from querysmasher.solvers import ViewMechanism, ViewSolution, mechanism_loss

__all__ = ["ScaledIdentitySolver", "FullIdentityPlanner"]


class ScaledIdentitySolver:
    """X = c · ⊗ (I - J/n_i), one factor per attribute (a ``kron`` mechanism), cost ``scale``."""

    name = "scaledid"

    def __init__(self, scale: float = 1.0):
        if not 0 < float(scale) <= 1:
            raise ValueError(f"scaledid: scale must be in (0, 1], not {scale!r}")
        self.scale = float(scale)

    def solve(self, gram, store) -> ViewSolution:
        # each factor (I - J/n) * n/(n-1) has unit diagonal; the scale goes on the first one
        factors = [(np.eye(n) - 1.0 / n) * (n / (n - 1)) for n in gram.sizes]
        if factors:  # the 0-attribute (total) view has no factor: X = [1]
            factors[0] = factors[0] * self.scale
        mech = ViewMechanism("kron", gram.sizes, tuple(factors))
        return ViewSolution(mech, mechanism_loss(gram, store, mech), 0.0, self.name)


class FullIdentityPlanner:
    """A whole-workload planner: the identity on the full domain (X = I over every cell, a ``kron``
    mechanism of identities at cost 1), for domains of at most ``max_cells`` cells. Its plan is a
    :class:`querysmasher.plan.Plan` of layout ``full-domain``, so every stage, the release and the
    workflow handle it as any other plan.

    >>> from querysmasher.accounting import Budget
    >>> from querysmasher.planning import parse_problem
    >>> schema, workload = parse_problem("synthetic:n=3,d=2", "marginal:2")
    >>> round(FullIdentityPlanner().plan(schema, workload, Budget.from_beta(1.0)).rmse, 6)
    1.0
    """

    name = "fullident"
    objectives = ("sum",)  # what the method table reads (the defaults: gaussian noise, both relations)

    def __init__(self, max_cells: int = 4096):
        if isinstance(max_cells, bool) or not isinstance(max_cells, int) or max_cells < 1:
            raise ValueError(f"fullident: max_cells must be an integer >= 1, not {max_cells!r}")
        self.max_cells = max_cells

    @staticmethod
    def unsupported(workload) -> str:
        cells = workload.schema.domain_cells()
        return "" if cells <= 4096 else f"the full domain has {cells} cells (at most 4096)"

    def plan(self, schema, workload, budget, *, objective: str = "sum"):
        from querysmasher.mechanisms import ViewMechanism
        from querysmasher.planners.wholedomain import full_domain_plan

        if schema.domain_cells() > self.max_cells:
            raise ValueError(
                f"fullident: the full domain has {schema.domain_cells()} cells, more than max_cells={self.max_cells}"
            )
        identity = ViewMechanism("kron", schema.sizes, tuple(np.eye(n) for n in schema.sizes))
        return full_domain_plan(schema, workload, self.name, budget, identity)
