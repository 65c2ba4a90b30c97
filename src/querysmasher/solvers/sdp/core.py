"""The solve of the per-view SDP shared by both front ends, and its dense front end :func:`solve_dense`.

:func:`solve_core` runs phase 1 (:mod:`.dual`) and, when it is slow and affordable, phase 2
(:mod:`.barrier`) on a prepared factor; :func:`certificate` turns the best dual point into the
returned weights, bound and gap; :func:`middle` and ``_build_x`` rebuild the best primal candidate. A solve
uses the process's thread budget (:mod:`querysmasher.threads`) for BLAS on large views and one thread on small ones.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np

from ...linalg import eigh_sym
from ...threads import BLAS_THREADED_CELLS, at_most
from .barrier import CG_PRODUCTS_EXPECTED, POLISH_STEPS, barrier_phase
from .dual import (
    PHASE1_MAX_BEFORE_SWITCH,
    PHASE1_MAX_MATRIX_FREE,
    DualPoint,
    Tracker,
    ascent_step,
    dual_point,
    phase1_should_stop,
)
from .problem import Prepared, dual_s, loss_and_eig, prepare, root_spectrum, weighted_gram

__all__ = ["DenseSolveResult", "solve_dense", "solve_core", "certificate", "middle"]

logger = logging.getLogger(__name__)

_MAX_HESSIAN_FLOPS = 5e11  # phase 2 (r^2 c^2 / 2 flops per Newton step) only below this
_NEWTON_STEPS_EXPECTED = 15  # a typical phase 2 (measured: 10-16 Newton steps to a 1e-4 gap)


@dataclass(frozen=True, eq=False)  # arrays inside: compare fields explicitly
class DenseSolveResult:
    """Result of :func:`solve_dense` (loss and bounds in the units of the input G)."""

    X: np.ndarray  # c x c PSD, max diag <= 1: the privacy Gram at cost 1
    loss: float  # tr(G X^+), the upper bound
    lower_bound: float  # certified dual value D(dual_weights) (<= optimum)
    gap: float  # (loss - lower_bound) / loss   (0 if loss == 0)
    iterations: int
    factorizations: int  # eigendecompositions + Cholesky factorisations used
    seconds: float
    converged: bool  # gap <= target_gap
    dual_weights: np.ndarray  # the p on the simplex that certifies lower_bound (dual_bound(G, p))
    eig: tuple[np.ndarray, np.ndarray] | None = None  # np.linalg.eigh(X), computed for the loss anyway


def middle(W: np.ndarray, kind: str, vec: np.ndarray, mu: float) -> np.ndarray:
    """The r x r M of a low-rank candidate X = W^T M W: A(p)^-½ ("dual") or g_mu(A) ("lowbarrier")."""
    k, u = eigh_sym(weighted_gram(W, vec), upper=True)
    k = np.maximum(k, 0.0)
    if kind == "dual":
        f = 1.0 / np.sqrt(np.maximum(k, root_spectrum(k)[1]))
    else:
        f = 1.0 / (mu / 2 + np.sqrt(mu * mu / 4 + k))
    return (u * f) @ u.T


def _build_x(W: np.ndarray, kind: str, vec: np.ndarray, mu: float, point: DualPoint | None = None) -> np.ndarray:
    """X(p) = W^T A^-½ W or X(lambda, mu) = mu Λ^-1 + W^T g_mu(A) W, divided by its max diagonal
    (X(p) from the eigendecomposition ``point`` already holds, when it is the point of p)."""
    if point is not None and kind == "dual" and point.p is vec:
        k, z = np.maximum(point.k, 0.0), point.z
    else:
        k, u = eigh_sym(weighted_gram(W, vec), upper=True)
        k = np.maximum(k, 0.0)
        z = u.T @ W
    if kind == "dual":
        f = z / k[:, None] ** 0.25
        x = f.T @ f
    else:
        f = z / np.sqrt(mu / 2 + np.sqrt(mu * mu / 4 + k))[:, None]
        x = f.T @ f
        if kind == "barrier":
            x[np.diag_indices_from(x)] += mu / vec
    x = (x + x.T) / 2
    return x / float(np.diag(x).max())


def solve_core(
    prep: Prepared, target_gap: float, max_iterations: int, time_limit: float | None, t0: float, lowrank: bool
) -> tuple[Tracker, dict[str, int]]:
    """Phases 1 and 2 on the prepared factor; returns the best certified candidates found."""
    W = prep.W
    r, n = W.shape  # n = cells left after dropping zero-diagonal ones
    deadline = np.inf if time_limit is None else t0 + float(time_limit)
    best = Tracker()
    counts = {"iterations": 0, "factorizations": 1}  # the eigendecomposition of G

    def done() -> bool:
        return best.gap() <= target_gap or counts["iterations"] >= max_iterations or time.perf_counter() >= deadline

    # phase 1: multiplicative dual ascent from p ∝ diag(G) (the optimum when G is diagonal; measured
    # against the uniform start: one step fewer on Table 4's random and Table 7's mixed views, the
    # same on affine / abs, one more on the 1-D prefix)
    start = np.einsum("ij,ij->j", W, W)
    pt = dual_point(W, start / start.sum())
    counts["factorizations"] += 1
    best.offer_lower(pt.lower, pt.p)
    best.offer_upper(pt.upper, "dual", pt.p, point=pt)
    # flops of one phase-1 step (two r x r x n products and an r x r eigendecomposition) and of one
    # Newton step, in phase-1 steps: the price of a typical phase 2. The Hessian is formed (r^2 n^2 / 2
    # flops, n^2 memory) when that is cheaper than a typical conjugate-gradient solve and allowed.
    step_flops = 4.0 * r * r * n + 10.0 * r**3
    dense_newton = (r * (r + 1) / 2) * float(n) ** 2 + n**3 / 3
    matrix_free_newton = CG_PRODUCTS_EXPECTED * 4.0 * r * r * n
    # a near-full-rank G whose Hessian is too big is left to phase 1 (products cost as much as a
    # dense Hessian there; such Grams have interior optima, which phase 1 certifies)
    matrix_free = lowrank or (dense_newton > _MAX_HESSIAN_FLOPS and r <= n / 2)
    use_newton = lowrank or matrix_free or dense_newton <= _MAX_HESSIAN_FLOPS
    newton_flops = matrix_free_newton if matrix_free else dense_newton
    newton_budget = _NEWTON_STEPS_EXPECTED * (newton_flops + (POLISH_STEPS + 2) * step_flops) / step_flops
    history = [best.gap()]
    prev = None
    while not done():
        if use_newton and phase1_should_stop(
            history, target_gap, newton_budget, PHASE1_MAX_MATRIX_FREE if matrix_free else PHASE1_MAX_BEFORE_SWITCH
        ):
            break
        prev, pt = pt, ascent_step(W, pt, best, counts, prev)
        counts["iterations"] += 1
        history.append(best.gap())
        if counts["iterations"] % 10 == 0:
            logger.debug(
                "phase 1: iteration %d, gap %.3e, %.2f s", counts["iterations"], best.gap(), time.perf_counter() - t0
            )
    logger.debug(
        "phase 1 done: %d iterations, gap %.3e, %.2f s (cells %d, rank %d)",
        counts["iterations"],
        best.gap(),
        time.perf_counter() - t0,
        n,
        r,
    )
    if use_newton and not done():
        barrier_phase(W, pt, best, counts, done, matrix_free=matrix_free, lowrank=lowrank, t0=t0)
    return best, counts


def certificate(prep: Prepared, best: Tracker, loss: float, counts: dict[str, int]) -> tuple[np.ndarray, float, float]:
    """(dual weights p over all c cells, lower bound, relative gap) of a finished solve with ``loss``."""
    p = np.zeros(prep.c)
    p[prep.kept] = best.p / best.p.sum()
    # exactly the arithmetic of dual_bound(G, p), so that the two agree to the last bit
    lower = prep.scale * dual_s(prep.W, (p / p.sum())[prep.kept]) ** 2
    counts["factorizations"] += 3
    return p, lower, (loss - lower) / loss if loss > 0 else 0.0


def solve_dense(
    G: np.ndarray,
    *,
    target_gap: float = 1e-4,
    max_iterations: int = 500,
    time_limit: float | None = None,
) -> DenseSolveResult:
    """Minimise tr(G X^+) s.t. X PSD, range(X) ⊇ range(G), diag(X) <= 1, with a certified gap.

    ``iterations`` counts phase-1 updates plus phase-2 Newton steps; the solve stops at
    ``target_gap``, ``max_iterations`` or ``time_limit`` seconds, and always returns a feasible X
    with its exact loss and a valid dual bound (the module docstring describes the method).

    >>> r = solve_dense(np.array([[2.0, 1.0], [1.0, 2.0]]))  # optimum 2 + sqrt(3), X = I
    >>> r.converged, round(r.loss, 6), bool(r.X.diagonal().max() <= 1)
    (True, 3.732051, True)
    """
    # small views single-threaded (threads cost more than they save there); large dense ones may
    # use the process's whole thread budget
    with at_most(1 if np.shape(G)[0] < BLAS_THREADED_CELLS else None):
        return _solve_dense(G, target_gap, max_iterations, time_limit)


def _solve_dense(G: np.ndarray, target_gap: float, max_iterations: int, time_limit: float | None) -> DenseSolveResult:
    t0 = time.perf_counter()
    prep = prepare(G)
    c = prep.c
    if prep.scale == 0:  # G == 0: any feasible X is optimal
        return DenseSolveResult(np.eye(c), 0.0, 0.0, 0.0, 0, 1, time.perf_counter() - t0, True, np.full(c, 1.0 / c))
    W = prep.W
    best, counts = solve_core(prep, target_gap, max_iterations, time_limit, t0, lowrank=False)

    # the answer: rebuild the best X, recompute its loss from the matrix, re-evaluate the bound
    kind, vec, mu = best.primal
    x_kept = _build_x(W, kind, vec, mu, best.primal_point)
    X = np.eye(c)
    X[np.ix_(prep.kept, prep.kept)] = x_kept
    loss, eig = loss_and_eig(prep.W_all, X)
    loss *= prep.scale
    p, lower, gap = certificate(prep, best, loss, counts)
    return DenseSolveResult(
        X,
        loss,
        lower,
        gap,
        counts["iterations"],
        counts["factorizations"],
        time.perf_counter() - t0,
        bool(gap <= target_gap),
        p,
        eig,
    )
