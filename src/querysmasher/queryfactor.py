"""Low-rank mechanisms held over their view's query factor: X = F^T L L^T F, measured as B = L^T F.

A ``lowrank`` mechanism X = V diag(s) V^T of a residual view has range(X) = range(G) = range(F^T),
where G = F^T F is the view's unit-trace subworkload Gram and F its stacked subquery factor (rows x
cells; :meth:`querysmasher.decompose.SubworkloadGram.factor`, 199 x 10,000 for a 100 x 100 affine
pair). So X = F^T L L^T F with L = (F F^T)^+ F V diag(s)^(1/2) (rows x r), and B = L^T F is an
operator with B^T B = X. A plan file stores L (0.3 MB for that pair) in place of V (16 MB).

Only views whose every Gram term is dense are held this way: their F is the normalised subquery
matrix itself, computed by plain arithmetic from the workload, never by an eigendecomposition
(whose basis is arbitrary for repeated eigenvalues), so every process that decomposes the plan's
workload gets the same F. The mechanism is always re-derived from (F, L) by
:func:`mechanism_from_factor`: its thin SVD F^T L = V diag(sqrt s) W^T gives V, s and the rotation W,
and measure applies B = W diag(s)^(1/2) V^T = L^T F, the same operator whatever basis the SVD picks
(measure and reconstruct run in different processes). The QS solver keeps the re-derived mechanism
(:func:`express_over_factor`), the workflow's allocate re-derives it from the plan's own workload
before allocating, and :func:`load_plan <querysmasher.planfile.load_plan>` re-derives it from the file's
workload (:func:`rederive_solutions`): the plan in memory, the plan that is allocated and the plan
measure loads hold the same operator, and measure rechecks its cost before reading any record
(:func:`querysmasher.measure.check_budget`).

>>> import numpy as np
>>> f = np.array([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, -1.0]])  # G = F^T F, rank 2 of 4 cells
>>> v = f.T / np.sqrt(2.0)                                          # X = V diag(s) V^T, range(G)
>>> mech, L = express_over_factor(ViewMechanism("lowrank", (4,), (v, np.array([1.0, 0.5]))), f)
>>> V, s = mech.mats
>>> L.shape, bool(np.allclose(V @ np.diag(s) @ V.T, v @ np.diag([1.0, 0.5]) @ v.T))
((2, 2), True)
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .decompose import decompose
from .errors import InputError
from .linalg import pinv_psd
from .solvers.base import ViewMechanism, ViewSolution

__all__ = [
    "REL_TOL",
    "holds_query_factor",
    "mechanism_from_factor",
    "factor_loss",
    "express_over_factor",
    "rederive_solutions",
]

# The re-derived X must act on V as the solver's X does to this relative accuracy (measured: 1e-12
# on a 10,000-cell affine view); otherwise V itself is kept (range(X) outside range(F^T)).
REL_TOL = 1e-9


def holds_query_factor(gram) -> bool:
    """Whether a view's mechanism may be held over its query factor: every term dense (F is then
    computed from the workload by arithmetic alone, identically in every process)."""
    return bool(gram.terms) and all(t.dense for t in gram.terms)


def mechanism_from_factor(sizes: tuple[int, ...], F: np.ndarray, L: np.ndarray) -> ViewMechanism:
    """The lowrank mechanism of B = L^T F: X = B^T B = V diag(s) V^T with V orthonormal and the
    rotation W, B = W diag(s)^(1/2) V^T (thin SVD of F^T L: O(c r^2), no c x c matrix)."""
    u, sv, vt = np.linalg.svd(F.T @ L, full_matrices=False)
    return ViewMechanism("lowrank", tuple(int(n) for n in sizes), (u, sv * sv), rotation=vt.T)


def factor_loss(F: np.ndarray, mech: ViewMechanism) -> float:
    """tr(F^T F X^+) = ||F V diag(s)^(-1/2)||_F^2 over s > 0 (range(X) contains range(F^T))."""
    v, s = mech.mats
    nz = s > 0
    return float(np.sum((F @ v[:, nz]) ** 2 / s[nz]))


def express_over_factor(mech: ViewMechanism, F: np.ndarray) -> tuple[ViewMechanism, np.ndarray | None]:
    """(the mechanism re-derived from (F, L), L) for a lowrank mechanism whose range lies in F's row
    space; (``mech``, None) otherwise (other kinds, a factor with as many rows as cells, or a
    re-derived X that differs by more than :data:`REL_TOL`)."""
    if mech.kind != "lowrank" or F.ndim != 2 or F.shape[1] != mech.cells or F.shape[0] >= mech.cells:
        return mech, None
    v, s = mech.mats
    L = (pinv_psd(F @ F.T) @ (F @ v)) * np.sqrt(s)
    new = mechanism_from_factor(mech.sizes, F, L)
    v2, s2 = new.mats
    err = np.linalg.norm(v2 @ (s2[:, None] * (v2.T @ v)) - v * s)  # (X' - X) V, X V = V diag(s)
    if not err <= REL_TOL * max(float(np.linalg.norm(s)), np.finfo(float).tiny):
        return mech, None
    return new, L


def rederive_solutions(
    workload, solutions: dict[str, ViewSolution], views, keys, *, losses: bool = True
) -> dict[str, ViewSolution]:
    """``solutions`` with every one that holds a query factor L re-derived from L and the F of
    ``workload`` itself (one decomposition, only when there is such a solution): mechanism (and,
    with ``losses``, loss and gap) of B = L^T F. ``views``/``keys``: the plan's residual views and
    their keys (a key's F is that of its first view, as the solver saw it). A key that is not a
    subproblem of the workload, a non-dense view, or an L that does not fit its F is an InputError
    (a plan file edited, or written by another version)."""
    todo = {k for k, s in solutions.items() if s.query_factor is not None}
    if not todo:
        return solutions
    d = decompose(workload)
    first: dict[str, tuple] = {}
    for a, k in zip(views, keys):
        first.setdefault(k, a)
    out = solutions.copy()  # a dict, or a mapping that reads its solutions when asked (pipeline.cache.StoredSolutions)
    for key in sorted(todo):
        sol = solutions[key]
        a = first.get(key)
        g = d.grams.get(a) if a is not None else None
        if g is None or d.keys[a][0] != key or not holds_query_factor(g):
            raise InputError(
                "plan solution",
                key,
                "is not a dense subproblem of the plan's workload (the file was edited, or written by another version)",
            )
        F = g.scaled(1.0 / d.keys[a][1]).factor(d.store)
        L = sol.query_factor
        if L.ndim != 2 or L.shape[0] != F.shape[0] or L.dtype != np.float64 or not np.all(np.isfinite(L)):
            raise InputError(
                "plan solution",
                key,
                f"holds a query factor of shape {L.shape} ({L.dtype}), expected ({F.shape[0]}, r) finite float64",
            )
        mech = mechanism_from_factor(g.sizes, F, L)
        if losses:
            loss = factor_loss(F, mech)
            gap = (loss - sol.lower_bound) / loss if loss > 0 else 0.0
            out[key] = dataclasses.replace(sol, mechanism=mech, loss=loss, gap=gap)
        else:
            out[key] = dataclasses.replace(sol, mechanism=mech)
    return out
