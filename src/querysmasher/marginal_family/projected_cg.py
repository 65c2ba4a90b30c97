"""The Newton step's equality-constrained quadratic model, solved by projected conjugate gradients:
its constraint system, metric and direction.

The model of :mod:`.active_newton` (f's quadratic model, the active cells held at their view's cost,
the views' costs and tau summing to 1) is solved by projected CG (Gould, Hribar and Nocedal, SIAM J.
Sci. Comput. 23, 2001), preconditioned per view by c_g S_g^-1 (.) S_g^-1 with S_g = Y_g^1/2. Why that
metric: at such points f's Hessian on a view acts like Y^-1 D + D Y^-1, whose spread is Y's condition
number (1.6e5 on CPS income x age: 400 unpreconditioned iterations gained 1e-2); in this metric it is
about its square root (about 120 iterations to 1e-6), and the projection's system is per view the
Hadamard square of B S B^T (one Cholesky factor per view and step). With a log-det barrier of weight
mu the metric's root has eigenvalues lambda / (lambda + mu / c)^1/2 instead (:class:`StepSystem`).
Directions are pairs (per view a symmetric matrix, the views' shares [+ tau]).
"""

from __future__ import annotations

import logging

import numpy as np
import scipy.linalg

log = logging.getLogger(__name__)

__all__ = ["StepSystem", "direction", "cell_costs", "dot", "axpy", "CG_RTOL"]

CG_RTOL = 1e-10  # projected CG stops once <r, P r> fell by this factor


def cell_costs(bases, ys) -> list[np.ndarray]:
    """Per view diag(B Y B^T): each cell's cost."""
    return [np.sum((b @ y) * b, axis=1) for b, y in zip(bases, ys)]


class StepSystem:
    """One Newton step's constraint system and metric at a point (module docstring)."""

    def __init__(self, bases, active, eigs, curv, tau_curv, mu: float = 0.0):
        self.nv = len(bases)
        self.has_tau = tau_curv is not None
        self.ab = [b[a] for b, a in zip(bases, active)]  # active cells' basis rows
        # S = Y^1/2 without the barrier; with it (weight mu), S's eigenvalues lambda / (lambda + mu / c)^1/2,
        # so S D S / c on the eigen-pair (i, j) is the inverse of (c (lambda_i lambda_j)^-1/2 + mu (lambda_i
        # lambda_j)^-1) up to a factor at most 2 (geometric against arithmetic means): f's curvature where
        # Y is large, the barrier's where it is small
        self.roots = []
        for (w, v), c in zip(eigs, curv):
            w = np.maximum(w, 0.0)
            self.roots.append((v * (w / np.sqrt(np.maximum(w + mu / c, 1e-300)))) @ v.T)
        self.curv = curv
        hads = []
        for b, s, c in zip(self.ab, self.roots, curv):
            bsb = b @ s @ b.T
            hads.append(bsb * bsb / c)
        diag = np.concatenate([np.diag(h) for h in hads])
        self.share_inv = float(diag.mean()) if diag.size else 1.0  # the shares' inverse metric: the cells' scale
        self.tau_inv = 1.0 / tau_curv if self.has_tau else 0.0
        self.chol, self.ones = [], []
        for h in hads:
            h += self.share_inv  # the view's share enters every one of its cells
            ch = scipy.linalg.cho_factor(h, lower=True, overwrite_a=True, check_finite=False)
            self.chol.append(ch)
            self.ones.append(scipy.linalg.cho_solve(ch, np.full(len(h), -self.share_inv)))
        # the shares' row (sum_g t_g + tau) couples the views: eliminated by its Schur complement
        self.schur = self.nv * self.share_inv + self.tau_inv + self.share_inv * sum(float(u.sum()) for u in self.ones)

    # directions are (list of symmetric matrices, shares [+ tau])
    def jac(self, d) -> list[np.ndarray]:
        dys, dv = d
        rows = [c - dv[k] for k, c in enumerate(cell_costs(self.ab, dys))]
        return rows + [np.array([dv.sum()])]

    def jac_t(self, lam) -> tuple[list[np.ndarray], np.ndarray]:
        dys = [b.T @ (l[:, None] * b) for b, l in zip(self.ab, lam[:-1])]
        dv = np.array([-float(l.sum()) for l in lam[:-1]] + ([0.0] if self.has_tau else [])) + float(lam[-1][0])
        return dys, dv

    def solve(self, w) -> list[np.ndarray]:
        """(J M^-1 J^T)^-1 w by the per-view factors and the shares' row's Schur complement."""
        inner = [scipy.linalg.cho_solve(ch, x, check_finite=False) for ch, x in zip(self.chol, w[:-1])]
        lam0 = (float(w[-1][0]) + self.share_inv * sum(float(x.sum()) for x in inner)) / self.schur
        return [x - lam0 * u for x, u in zip(inner, self.ones)] + [np.array([lam0])]

    def metric_inv(self, d):
        dys, dv = d
        out = np.empty_like(dv)
        out[: self.nv] = dv[: self.nv] * self.share_inv
        if self.has_tau:
            out[self.nv] = dv[self.nv] * self.tau_inv
        return [s @ y @ s / c for s, y, c in zip(self.roots, dys, self.curv)], out

    def project(self, r):
        """(P r, the multipliers) with P = M^-1 - M^-1 J^T (J M^-1 J^T)^-1 J M^-1."""
        mr = self.metric_inv(r)
        lam = self.solve(self.jac(mr))
        corr = self.metric_inv(self.jac_t(lam))
        return ([a - b for a, b in zip(mr[0], corr[0])], mr[1] - corr[1]), lam


def dot(a, b) -> float:
    return sum(float(np.sum(x * y)) for x, y in zip(a[0], b[0])) + float(a[1] @ b[1])


def axpy(alpha, x, y):
    return [alpha * p + q for p, q in zip(x[0], y[0])], alpha * x[1] + y[1]


def direction(st: StepSystem, grad, hess, resid, cg_iterations: int, enough: float = 0.0):
    """The Newton direction by projected CG: (x, the multipliers, CG iterations, the model's value at
    x); CG stops once <r, P r> is below CG_RTOL of its start or below ``enough`` (in the objective's
    units: with the metric near the Hessian, about twice the model's decrease still to come)."""
    x = st.metric_inv(st.jac_t(st.solve(resid)))  # restores the equalities (every active cell at its view's cost)
    r = axpy(1.0, hess(x), grad)
    zr, lam = st.project(r)
    r = axpy(-1.0, st.jac_t(lam), r)  # the residual update (below)
    rz0 = rz = dot(r, zr)
    p = ([-a for a in zr[0]], -zr[1])
    best = (rz, x, lam)
    k = 0
    while k < cg_iterations and rz > max(CG_RTOL * rz0, enough):
        hp = hess(p)
        curvature = dot(p, hp)
        if curvature <= 0:
            break
        alpha = rz / curvature
        x = axpy(alpha, p, x)
        r = axpy(alpha, hp, r)
        zr, step_lam = st.project(r)
        # the residual update of Gould, Hribar and Nocedal: r less its normal part J^T lam (P r is
        # unchanged) keeps r small, so the projection stays accurate, and the multipliers are the
        # sum of the parts taken out; without it rounding grew r's normal part until the iterates
        # left the equalities (a 26-cell problem: 0.4 off after 30 iterations while <r, P r> fell)
        r = axpy(-1.0, st.jac_t(step_lam), r)
        lam = [a + b for a, b in zip(lam, step_lam)]
        rz_new = dot(r, zr)
        k += 1
        if rz_new <= 0 or rz_new > 1e3 * best[0]:  # rounding has taken over
            break
        if rz_new < best[0]:
            best = (rz_new, x, lam)
        p = axpy(rz_new / rz, p, ([-a for a in zr[0]], -zr[1]))
        rz = rz_new
    log.debug(
        "qsplus newton CG: %d iterations, <r, P r> %.3e from %.3e (best %.3e, enough %.3e)", k, rz, rz0, best[0], enough
    )
    _, x, lam = best
    return x, lam, k, dot(grad, x) + 0.5 * dot(x, hess(x))
