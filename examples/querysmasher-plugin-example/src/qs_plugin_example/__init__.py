"""An example querysmasher solver plugin: the scaled identity on each residual view's subspace.

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

__all__ = ["ScaledIdentitySolver"]


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
