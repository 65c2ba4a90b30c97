"""Phase 1 of the per-view SDP: multiplicative dual ascent, the tracker of the best certified points,
and the switch rule.

A :class:`DualPoint` is s(p) and diag X(p) at one p; :func:`ascent_step` is the over-relaxed
multiplicative step p_i <- p_i (X(p)_ii / s(p))^tau; :class:`Tracker` keeps the best lower and
upper bounds met by either phase; :func:`phase1_should_stop` decides when phase 2 takes over
(the package docstring, "Phase 1", describes the method).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...linalg import eigh_sym
from .problem import root_spectrum, weighted_gram

__all__ = [
    "PHASE1_MAX_MATRIX_FREE",
    "PHASE1_MAX_BEFORE_SWITCH",
    "DualPoint",
    "dual_point",
    "Tracker",
    "step_length",
    "ascent_step",
    "phase1_should_stop",
]

PHASE1_MAX_MATRIX_FREE = 40  # phase-1 steps before a matrix-free phase 2 (measured: 40 instead of
# 100 saves 60 steps and costs no extra Newton steps on 2,500-cell affine/abs views)
PHASE1_MAX_BEFORE_SWITCH = 100  # phase-1 iterations after which phase 2 (if affordable) takes over
_STALL_WINDOW = 10  # phase 1's convergence rate is measured over this many iterations
_OVER_RELAXATION = 3.0  # largest tau of the multiplicative step (measured: 3 beats 1 and 2 on interior
# optima; 4 oscillates), and its value before a previous step gives a Barzilai-Borwein estimate


@dataclass
class DualPoint:
    """s(p) and diag X(p) at one p (any positive scaling of p)."""

    p: np.ndarray
    s: float  # tr(A^½)
    g: np.ndarray  # diag(W^T A^-½ W), with A's eigenvalues floored at rounding level
    singular: bool  # A(p) is singular to rounding: X(p) misses part of range(G)
    k: np.ndarray  # eigenvalues of A(p) = U diag(k) U^T (ascending)
    z: np.ndarray  # U^T W: X(p) = (z / k^¼)^T (z / k^¼), with no further eigendecomposition

    @property
    def lower(self) -> float:  # D(p / sum p)
        return self.s * self.s / float(self.p.sum())

    @property
    def upper(self) -> float:  # loss of X(p) / max diag
        return np.inf if self.singular else self.s * float(self.g.max())


def dual_point(W: np.ndarray, p: np.ndarray) -> DualPoint:
    """s(p) and diag X(p) from one r x r eigendecomposition of A(p) = W D_p W^T."""
    k, u = eigh_sym(weighted_gram(W, p), upper=True)
    sq, floor = root_spectrum(k)
    z = u.T @ W
    # with the floor, g stays finite when A is singular (p too small where range(G) needs it) and
    # the ascent step raises those p_i; such a p yields no upper bound
    g = ((z**2) / np.sqrt(np.maximum(k, floor))[:, None]).sum(axis=0)
    return DualPoint(p, float(sq.sum()), g, bool(k.min() <= floor), k, z)


class Tracker:
    """Best certified bounds seen so far and how to rebuild the matching X / p."""

    def __init__(self) -> None:
        self.lower = -np.inf
        self.p: np.ndarray | None = None
        self.upper = np.inf
        self.primal: tuple[str, np.ndarray, float] | None = None  # ("dual", p, 0) or ("barrier", lam, mu)
        self.primal_point: DualPoint | None = None  # the dual point behind a ("dual", p) primal, when at hand

    def offer_lower(self, value: float, p: np.ndarray) -> None:
        if value > self.lower:
            self.lower, self.p = value, p

    def offer_upper(
        self, value: float, kind: str, vec: np.ndarray, mu: float = 0.0, point: DualPoint | None = None
    ) -> None:
        if value < self.upper:
            self.upper, self.primal, self.primal_point = value, (kind, vec, mu), point

    def gap(self) -> float:
        return (self.upper - self.lower) / self.upper if self.upper > 0 else 0.0


def step_length(pt: DualPoint, prev: DualPoint | None) -> float:
    """tau of the step from ``pt``: the Barzilai-Borwein length of the last step, clipped to [1, 3].

    In x = log p the step is x <- x + tau r with r = log(X(p)_ii / s), a fixed-point iteration whose
    Jacobian J (dr = -J dx near the optimum) has eigenvalues mu in (0, 1]; a step contracts each mode
    by |1 - tau mu|. tau = 3 suits the small mu of interior optima (prefix / range Grams), but on
    Table 4's random views mu is near 1/2 and tau = 3 overshoots (the gap halves every other step),
    while tau = 2 cuts it tenfold per step. <dx, dx> / <dx, -dr> over the last step (both centred: a
    constant shift of x is the normalisation, not a move) estimates 1 / mu. Measured on the cases of
    the per-view solver benchmark: random [30]^2 views 5 -> 2 steps, Table 7's mixed view 6 -> 3, the
    others unchanged.
    """
    if prev is None or prev.p.shape != pt.p.shape:
        return _OVER_RELAXATION
    m = (pt.p > 0) & (prev.p > 0)
    dx = np.log(pt.p[m]) - np.log(prev.p[m])
    dr = np.log(pt.g[m] / pt.s) - np.log(prev.g[m] / prev.s)
    dx, dr = dx - dx.mean(), dr - dr.mean()
    curvature = -float(dx @ dr)
    if not curvature > 0:  # no decrease of r along the step (or NaN): no estimate
        return _OVER_RELAXATION
    return float(np.clip(float(dx @ dx) / curvature, 1.0, _OVER_RELAXATION))


def ascent_step(
    W: np.ndarray, pt: DualPoint, best: Tracker, counts: dict[str, int], prev: DualPoint | None = None
) -> DualPoint:
    """p <- p (X(p)_ii / s)^tau with tau from :func:`step_length` (3 without a ``prev`` point),
    halved (down to 1, always taken) while s(p) decreases."""
    with np.errstate(divide="ignore"):  # p_i = 0 stays 0
        log_p, log_ratio = np.log(pt.p), np.log(pt.g / pt.s)
    tau = step_length(pt, prev)
    while True:
        # in logs: (g/s)^tau over- or underflows when diag X(p) spans many orders of magnitude
        log_q = log_p + tau * log_ratio
        q = np.exp(log_q - log_q.max())
        cand = dual_point(W, q / q.sum())
        counts["factorizations"] += 1
        if cand.s >= pt.s or tau == 1.0:
            break
        tau = max(1.0, tau / 2)
    best.offer_lower(cand.lower, cand.p)
    best.offer_upper(cand.upper, "dual", cand.p, point=cand)
    return cand


def phase1_should_stop(
    history: list[float], target_gap: float, newton_budget: float, max_steps: int = PHASE1_MAX_BEFORE_SWITCH
) -> bool:
    """Hand over to phase 2 when phase 1's recent linear rate predicts more work than phase 2 costs.

    A boundary dual optimum makes phase 1 sublinear, so its rate stalls and it is stopped after at
    most ``PHASE1_MAX_BEFORE_SWITCH`` steps; an interior one keeps a linear rate and finishes.
    """
    if len(history) <= 2 * _STALL_WINDOW:
        return False
    if len(history) > max_steps:
        return True
    rate = history[-1] / history[-1 - _STALL_WINDOW]
    if rate >= 1.0:
        return True
    remaining = _STALL_WINDOW * np.log(target_gap / history[-1]) / np.log(rate)
    return bool(remaining > newton_budget)
