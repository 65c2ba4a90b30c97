"""A cvxpy oracle for the per-view problem, for testing :mod:`querysmasher.solvers.sdp` on small views.

With G = W^T W (W = r x c, r = rank G, from an eigendecomposition) the problem
min tr(G X^+) s.t. X PSD, range(X) ⊇ range(G), diag(X) <= 1 is the standard SDP

    minimise tr(Y)  s.t.  [[Y, W], [W^T, X]] PSD,  diag(X) <= 1,

because the block matrix is PSD iff X is PSD, range(W^T) ⊆ range(X) and Y ⪰ W X^+ W^T (Schur
complement). A generic conic solver handles it in seconds for a few dozen cells and in minutes for
a hundred, so it is an oracle, not a solver.

>>> X, L = solve_reference(np.diag([1.0, 4.0]))  # the optimum is tr G, at X = I
>>> round(L, 6), bool(np.allclose(X, np.eye(2), atol=1e-6))
(5.0, True)
"""

from __future__ import annotations

import numpy as np

from .sdp.problem import prepare

__all__ = ["solve_reference"]


def solve_reference(G: np.ndarray, *, solver: str = "CLARABEL", max_cells: int = 64) -> tuple[np.ndarray, float]:
    """(X, optimal L) for the per-view SDP, solved by cvxpy with ``solver``.

    G is validated like :func:`querysmasher.solvers.sdp.solve_dense` does and scaled to unit
    largest diagonal for the solve (L is scaled back). Views with more than ``max_cells`` cells
    raise a ValueError (pass a larger ``max_cells`` to force them). The returned X is the conic
    solver's, accurate to its tolerances (about 1e-8), not re-certified.
    """
    prep = prepare(G)
    c = prep.c
    if c > max_cells:
        raise ValueError(
            f"the cvxpy oracle is for views of at most {max_cells} cells (got {c}); raise max_cells to force it"
        )
    r = prep.W_all.shape[0]
    if r == 0:  # G == 0
        return np.eye(c), 0.0

    import cvxpy as cp  # heavy, and only the tests need it

    x = cp.Variable((c, c), symmetric=True)
    y = cp.Variable((r, r), symmetric=True)
    block = cp.bmat([[y, prep.W_all], [prep.W_all.T, x]])
    problem = cp.Problem(cp.Minimize(cp.trace(y)), [block >> 0, cp.diag(x) <= 1])
    problem.solve(solver=solver)
    if problem.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) or x.value is None:
        raise RuntimeError(f"cvxpy/{solver} did not solve the reference problem (status {problem.status})")
    X = (x.value + x.value.T) / 2
    return X, prep.scale * float(problem.value)
