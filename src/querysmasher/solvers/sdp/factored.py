"""The factored front end of the per-view SDP: :func:`solve_factored` for G = F^T F given its factor F.

F is m x c, m <= c; the solve takes O(r c) memory and O(r^2 c) time per step and returns
X = V diag(s) V^T of G's rank r, never formed. It shares the interior-point core of
:mod:`querysmasher.solvers.sdp` (:func:`~querysmasher.solvers.sdp.core.solve_core`: phase 1 ascent,
phase 2 barrier Newton path, matrix-free here) and its certificate: the dual value of the final
weights, as :func:`dual_bound_factored` computes it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ...linalg import eigh_sym
from ...threads import at_most
from .core import certificate, middle, solve_core
from .problem import EPS, RANGE_RTOL, Prepared, dual_s, prepare

__all__ = ["FactoredSolveResult", "solve_factored", "dual_bound_factored"]


def _prepare_factor(F: np.ndarray) -> Prepared:
    """As :func:`~querysmasher.solvers.sdp.problem.prepare` for G = F^T F given F (m x c): for m <= c
    an m x m eigendecomposition and no c x c matrix."""
    f = np.array(F, dtype=float)
    if f.ndim != 2 or not np.all(np.isfinite(f)):
        raise ValueError(f"F must be a finite matrix, got shape {f.shape}")
    c = f.shape[1]
    if f.shape[0] > c:  # more rows than cells: the c x c Gram is the smaller object
        return prepare(f.T @ f)
    diag = np.einsum("ij,ij->j", f, f)
    scale = float(diag.max(initial=0.0))
    if scale <= 0:
        return Prepared(c, 0.0, np.zeros((0, c)), np.zeros(0, dtype=int))
    f /= np.sqrt(scale)
    e, u = eigh_sym(f @ f.T)  # F F^T and F^T F share their nonzero spectrum
    keep = e > max(c, 32) * EPS * e.max()
    w_all = u[:, keep].T @ f  # orthogonal rows, squared norms e: W^T W = F^T F
    kept = np.flatnonzero(diag > c * EPS * scale)
    return Prepared(c, scale, w_all, kept)


def _build_lowrank(
    W_all: np.ndarray, kind: str, vec: np.ndarray, mu: float, kept: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(V, s) with X = V diag(s) V^T = W_all^T M W_all / max diag, V with orthonormal columns.

    W_all has orthogonal rows, so X = Q (N M N) Q^T with Q^T its normalised rows; a QR step makes Q
    orthonormal to rounding before the r x r eigendecomposition. Cost O(r^2 c), memory O(r c).
    """
    m = middle(W_all[:, kept], kind, vec, mu)
    norms = np.sqrt(np.einsum("ij,ij->i", W_all, W_all))
    q, rq = np.linalg.qr((W_all / norms[:, None]).T)
    inner = rq @ (norms[:, None] * m * norms[None, :]) @ rq.T
    s, u = np.linalg.eigh((inner + inner.T) / 2)
    v = q @ u
    s = np.maximum(s, 0.0)
    top = float(np.einsum("ij,j,ij->i", v, s, v).max())
    return v, s / top


def _loss_lowrank(W_all: np.ndarray, V: np.ndarray, s: np.ndarray) -> float:
    """tr(W^T W X^+) for X = V diag(s) V^T (orthonormal V), checking range(X) ⊇ range(W^T)."""
    nz = s > s.size * EPS * float(s.max(initial=0.0))
    wv = W_all @ V
    total = float((W_all**2).sum())
    outside = float(((W_all - wv[:, nz] @ V[:, nz].T) ** 2).sum())  # ||(I - X X^+) G^½||_F^2
    if total > 0 and outside > RANGE_RTOL**2 * total:
        raise ValueError(f"range(X) does not contain range(G): relative residual {np.sqrt(outside / total):.2e}")
    return float(((wv[:, nz] ** 2).sum(axis=0) / s[nz]).sum())


@dataclass(frozen=True, eq=False)  # arrays inside: compare fields explicitly
class FactoredSolveResult:
    """Result of :func:`solve_factored`: X = V diag(s) V^T (V c x r, orthonormal columns)."""

    V: np.ndarray
    s: np.ndarray  # X's nonzero eigenvalues; max diag(X) = 1
    loss: float  # tr(G X^+), recomputed from V and s
    lower_bound: float  # dual value of dual_weights, as dual_bound computes it
    gap: float
    iterations: int
    factorizations: int
    seconds: float
    converged: bool
    dual_weights: np.ndarray
    rank: int  # numerical rank of G

    @property
    def X(self) -> np.ndarray:
        """The explicit c x c X (small views and tests only)."""
        return (self.V * self.s) @ self.V.T


def solve_factored(
    F: np.ndarray,
    *,
    target_gap: float = 1e-4,
    max_iterations: int = 500,
    time_limit: float | None = None,
) -> FactoredSolveResult:
    """:func:`~querysmasher.solvers.sdp.solve_dense` for G = F^T F given F (m x c, m <= c), in O(r c) memory and
    O(r^2 c) time per step: the returned X has G's rank r and is never formed. Phase 2 is matrix-free Newton-CG.

    >>> P = np.tril(np.ones((10, 10))); C = np.eye(10) - 1 / 10
    >>> r = solve_factored(P @ C, target_gap=1e-8)
    >>> r.converged, round(r.loss, 6), r.V.shape
    (True, 9.965944, (10, 9))
    """
    with at_most():  # the process's thread budget (one thread unless a face or job gives more)
        return _solve_factored(F, target_gap, max_iterations, time_limit)


def _solve_factored(
    F: np.ndarray, target_gap: float, max_iterations: int, time_limit: float | None
) -> FactoredSolveResult:
    t0 = time.perf_counter()
    prep = _prepare_factor(F)
    c = prep.c
    if prep.scale == 0:
        return FactoredSolveResult(
            np.zeros((c, 0)), np.zeros(0), 0.0, 0.0, 0.0, 0, 1, time.perf_counter() - t0, True, np.full(c, 1.0 / c), 0
        )
    W = prep.W
    best, counts = solve_core(prep, target_gap, max_iterations, time_limit, t0, lowrank=True)
    kind, vec, mu = best.primal
    V, s = _build_lowrank(prep.W_all, kind, vec, mu, prep.kept)
    loss = prep.scale * _loss_lowrank(prep.W_all, V, s)
    p, lower, gap = certificate(prep, best, loss, counts)
    return FactoredSolveResult(
        V,
        s,
        loss,
        lower,
        gap,
        counts["iterations"],
        counts["factorizations"],
        time.perf_counter() - t0,
        bool(gap <= target_gap),
        p,
        W.shape[0],
    )


def dual_bound_factored(F: np.ndarray, p: np.ndarray) -> float:
    """:func:`~querysmasher.solvers.sdp.dual_bound` for G = F^T F given F (no c x c matrix)."""
    prep = _prepare_factor(F)
    q = np.asarray(p, dtype=float).ravel()
    if q.shape != (prep.c,) or not np.all(np.isfinite(q)) or np.any(q < 0) or q.sum() <= 0:
        raise ValueError(f"p must be {prep.c} finite non-negative weights with a positive sum")
    q = q / q.sum()
    return prep.scale * dual_s(prep.W, q[prep.kept]) ** 2
