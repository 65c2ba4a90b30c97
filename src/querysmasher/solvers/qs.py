"""QuerySmasher's per-view solver (method ``qs``): the optimal mechanism, with a certificate.

For each distinct subproblem:

* a one-term Gram coef·(G_1 ⊗ ... ⊗ G_k) is solved factor by factor: with X = ⊗ X_i the loss is
  coef·∏ tr(G_i X_i^+) and the privacy cost ∏ max diag(X_i), so the optimum is coef·∏ L_i and the
  product of the factor lower bounds certifies it (the dual of a Kronecker problem contains the
  Kronecker product of the factor duals). Marginal, prefix, range, circular and hybrid workloads of
  any schema therefore need only 1-D solves, each done once per distinct factor.
* a Gram with several terms over at most ``max_dense_cells`` cells is solved densely
  (:func:`querysmasher.solvers.sdp.solve_dense`, certified to ``target_gap``).
* a larger several-term Gram falls back to the better of the closed-form solvers, with a warning;
  the solution's ``note`` records the reason, and no certificate is claimed.

Every candidate is compared with ``wff`` and ``rp`` (per factor for Kronecker Grams) and the lowest
loss is kept, so qs <= wff and qs <= rp hold by construction.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from ..decompose import SubworkloadGram
from ..linalg import MatrixStore, centering
from .base import ViewMechanism, ViewSolution
from .closed_form import RPSolver, WFFSolver, _circulant_from_weights, wff_weights_1d
from .sdp import DenseSolveResult, solve_dense

__all__ = ["QSSolver", "DEFAULT_MAX_DENSE_CELLS", "DEFAULT_TARGET_GAP"]

DEFAULT_MAX_DENSE_CELLS = 2500
DEFAULT_TARGET_GAP = 1e-4
# 1-D factors are cheap and their gaps compound in a Kronecker product (a k-way view's relative gap
# is about the sum of its factors'), so factors are certified much tighter than the view target.
FACTOR_TARGET_GAP = 1e-8


class QSSolver:
    """The certified optimal per-view solver."""

    name = "qs"

    def __init__(self, target_gap: float = DEFAULT_TARGET_GAP, max_dense_cells: int = DEFAULT_MAX_DENSE_CELLS):
        self.target_gap = float(target_gap)
        self.max_dense_cells = int(max_dense_cells)
        self._factors: dict[str, tuple[np.ndarray, float, float, str]] = {}

    def _solve_factor(self, key: str, store: MatrixStore) -> tuple[np.ndarray, float, float, str]:
        """(X_i, loss_i, lower_i, solver) for one unit-trace 1-D factor, cached by content key."""
        if key not in self._factors:
            g = store[key]
            n = g.shape[0]
            r = solve_dense(g, target_gap=min(self.target_gap, FACTOR_TARGET_GAP))
            w, gamma = wff_weights_1d(g)
            candidates = [
                (r.X, r.loss, "qs"),
                (_circulant_from_weights(w), gamma * gamma, "wff"),
                (centering(n) * (n / (n - 1)), (n - 1) / n * float(np.trace(g)), "rp"),
            ]
            x, loss, which = min(candidates, key=lambda c: c[1])
            self._factors[key] = (x, loss, min(r.lower_bound, loss), which)
        return self._factors[key]

    def solve(self, gram: SubworkloadGram, store: MatrixStore) -> ViewSolution:
        if not gram.sizes:  # the total: measure it directly (X = [1]) — optimal, L = G
            return ViewSolution(ViewMechanism("kron", (), ()), gram.trace, gram.trace, self.name, gap=0.0)
        if gram.single_kron:
            t = gram.terms[0]
            parts = [self._solve_factor(f, store) for f in t.factors]
            loss = t.coef * math.prod(p[1] for p in parts)
            low = t.coef * math.prod(p[2] for p in parts)
            mech = ViewMechanism("kron", gram.sizes, tuple(p[0] for p in parts))
            return ViewSolution(mech, loss, low, self.name, gap=_gap(loss, low))
        closed = [WFFSolver().solve(gram, store), RPSolver().solve(gram, store)]
        if gram.cells <= self.max_dense_cells:
            r: DenseSolveResult = solve_dense(gram.dense(store), target_gap=self.target_gap)
            best = min([ViewSolution(ViewMechanism("dense", gram.sizes, (r.X,)), r.loss, 0.0, self.name), *closed], key=lambda s: s.loss)
            low = min(r.lower_bound, best.loss)
            note = "" if r.converged else f"dense solve stopped at gap {r.gap:.2e} (target {self.target_gap:.0e})"
            return ViewSolution(best.mechanism, best.loss, low, best.solver if best.solver == self.name else f"qs/{best.solver}", note, _gap(best.loss, low))
        best = min(closed, key=lambda s: s.loss)
        note = (
            f"view {gram.attrs} has {gram.cells} cells and {len(gram.terms)} Gram terms, above max_dense_cells="
            f"{self.max_dense_cells}: fell back to {best.solver} (not certified)"
        )
        warnings.warn(note, RuntimeWarning, stacklevel=2)
        return ViewSolution(best.mechanism, best.loss, 0.0, f"qs/{best.solver}", note)


def _gap(loss: float, low: float) -> float:
    return (loss - low) / loss if loss > 0 else 0.0

