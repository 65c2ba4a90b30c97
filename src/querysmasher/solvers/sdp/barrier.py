"""Phase 2 of the per-view SDP: Newton path following on the barrier dual psi_mu (:func:`barrier_phase`).

Barrier points (psi_mu, diag X(lambda, mu) and the r x r eigendecomposition behind them), the
scaled Hessian formed (syrk, then Cholesky) or applied matrix-free (conjugate gradients), and the
path-following loop with its predictor and polishing steps (the package docstring, "Phase 2",
describes the method).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla

from ...linalg import eigh_sym
from .dual import DualPoint, Tracker, ascent_step, dual_point
from .problem import EPS, root_spectrum, weighted_gram

__all__ = ["CG_PRODUCTS_EXPECTED", "POLISH_STEPS", "barrier_phase"]

logger = logging.getLogger(__name__)

_HESSIAN_DTYPE = np.float32
CG_PRODUCTS_EXPECTED = 60  # Hessian products of a typical matrix-free Newton step (for costing)
_CG_MAX_PRODUCTS = 300  # conjugate-gradient products per Newton system, at most
_CG_RTOL = 1e-2  # relative residual of the inexact Newton steps (the line search keeps them safe);
# measured on 2,500-cell affine/abs views: 1e-2 needs 15-25 % fewer products than 1e-3, same steps
_HESSIAN_CHUNK_BYTES = 64 << 20  # rows of Phi are built and accumulated in blocks of this size
POLISH_STEPS = 6  # multiplicative steps from each phase-2 point to sharpen the lower bound


@dataclass
class _BarrierPoint:
    """psi_mu, diag X(lambda, mu) and the r x r eigendecomposition behind them, at one lambda."""

    lam: np.ndarray
    mu: float
    k: np.ndarray  # eigenvalues of A = W Λ W^T = U diag(k) U^T
    z: np.ndarray  # U^T W
    y: np.ndarray  # mu/2 + rho
    rho: np.ndarray  # sqrt(mu^2/4 + k)
    d: np.ndarray  # diag X(lambda, mu)
    psi: float

    @property
    def lower(self) -> float:
        return float(root_spectrum(self.k)[0].sum()) ** 2 / float(self.lam.sum())

    def upper_barrier(self) -> float:
        """Loss of X(lambda, mu) / max diag: tr(G X^-1) = tr((S + mu A^-1)^-1) (Woodbury)."""
        with np.errstate(divide="ignore"):
            return float(self.d.max()) * float(np.sum(1.0 / (1.0 / self.y + self.mu / self.k)))

    def upper_lowrank(self) -> float:
        """Loss of W^T g_mu(A) W / max diag (rank r, no mu Λ^-1 part): tr(g_mu(A)^-1) = sum(y)."""
        return float(np.max(self.d - self.mu / self.lam)) * float(self.y.sum())

    def upper_dual(self) -> float:
        """Loss of X(p) / max diag for p ∝ lambda, from the same eigendecomposition."""
        sq, floor = root_spectrum(self.k)
        if self.k.min() <= floor:
            return np.inf
        return float(sq.sum()) * float(((self.z**2) / sq[:, None]).sum(axis=0).max())


def _barrier_point(W: np.ndarray, lam: np.ndarray, mu: float) -> _BarrierPoint:
    r, c = W.shape
    k, u = eigh_sym(weighted_gram(W, lam), upper=True)
    k = np.maximum(k, 0.0)
    rho = np.sqrt(mu * mu / 4 + k)
    y = mu / 2 + rho
    z = u.T @ W
    d = mu / lam + ((z**2) / y[:, None]).sum(axis=0)
    psi = float(
        np.sum(k / y + y - mu * np.log(y)) + (c - r) * (mu - mu * np.log(mu)) + mu * np.log(lam).sum() - lam.sum()
    )
    return _BarrierPoint(lam, mu, k, z, y, rho, d, psi)


def _dk_weights(b: _BarrierPoint) -> np.ndarray:
    """Gamma_ab = 1 / (y_a y_b (rho_a + rho_b)): the Daleckii-Krein divided differences of g_mu."""
    return 1.0 / (np.outer(b.y, b.y) * (b.rho[:, None] + b.rho[None, :]))


class _MatrixFreeHessian:
    """Λ (-Hessian of psi_mu) Λ applied to vectors in O(r^2 c), never formed (c x c is too big).

    (Phi Λ)^T (Phi Λ) v = lam ∘ diag(Z^T (Gamma ∘ (Z diag(lam ∘ v) Z^T)) Z): two r x r x c products
    per application. Systems are solved by conjugate gradients preconditioned with the exact
    diagonal, mu + lam_i^2 sum_ab Gamma_ab Z_ai^2 Z_bi^2.
    """

    def __init__(self, b: _BarrierPoint):
        self.b = b
        self.gamma = _dk_weights(b)
        z2 = b.z * b.z
        self.diag = b.mu + b.lam**2 * np.einsum("ai,ai->i", z2, self.gamma @ z2)
        self.products = 0
        self.z = b.z.astype(_HESSIAN_DTYPE)
        self.gamma_t = self.gamma.astype(_HESSIAN_DTYPE)

    def apply(self, v: np.ndarray) -> np.ndarray:
        b, z = self.b, self.z
        m = (z * (b.lam * v).astype(_HESSIAN_DTYPE)) @ z.T
        self.products += 1
        return b.mu * v + b.lam * np.einsum("ai,ai->i", z, (self.gamma_t * m) @ z).astype(float)

    def solve(self, rhs: np.ndarray, rtol: float, maxiter: int) -> np.ndarray:
        """Preconditioned CG from 0 until ||H x - rhs|| <= rtol ||rhs|| or ``maxiter`` products."""
        x = np.zeros_like(rhs)
        res = rhs.copy()
        z = res / self.diag
        d = z.copy()
        rz = float(res @ z)
        stop = rtol * float(np.linalg.norm(rhs))
        for _ in range(maxiter):
            if float(np.linalg.norm(res)) <= stop:
                break
            hd = self.apply(d)
            dhd = float(d @ hd)
            if dhd <= 0:  # rounding: H is positive definite in exact arithmetic
                break
            alpha = rz / dhd
            x += alpha * d
            res -= alpha * hd
            z = res / self.diag
            rz_new = float(res @ z)
            d = z + (rz_new / rz) * d
            rz = rz_new
        return x


def _scaled_hessian(b: _BarrierPoint) -> np.ndarray:
    """Upper triangle of Λ (-Hessian of psi_mu) Λ = mu I + (Phi Λ)^T (Phi Λ)."""
    r, c = b.z.shape
    ia, ib = np.triu_indices(r)
    weight = np.sqrt(np.where(ia == ib, 1.0, 2.0) / (b.y[ia] * b.y[ib] * (b.rho[ia] + b.rho[ib])))
    zl = b.z * b.lam
    h = np.zeros((c, c), order="F")
    step = max(1, _HESSIAN_CHUNK_BYTES // (8 * c))
    for lo in range(0, ia.size, step):
        sl = slice(lo, lo + step)
        phi = zl[ia[sl]] * b.z[ib[sl]]
        phi *= weight[sl, None]
        # phi.T is Fortran-ordered: BLAS reads it in place and adds phi^T phi to h
        h = sla.blas.dsyrk(1.0, phi.T, beta=1.0, c=h, trans=0, lower=0, overwrite_c=1)
    h[np.diag_indices(c)] += b.mu
    return h


def _cholesky(h: np.ndarray) -> tuple[tuple[np.ndarray, bool], int]:
    """Cholesky factor of a PD matrix (upper triangle used), with growing jitter if rounding breaks it."""
    jitter, tries = 0.0, 0
    while True:
        tries += 1
        try:
            m = h if jitter == 0 else h + jitter * np.eye(h.shape[0])
            return sla.cho_factor(m, lower=False, check_finite=False), tries
        except np.linalg.LinAlgError:
            jitter = max(jitter * 100, 1e-14 * float(np.diag(h).max()))


def barrier_phase(
    W: np.ndarray,
    start: DualPoint,
    best: Tracker,
    counts: dict[str, int],
    done: Callable[[], bool],
    *,
    matrix_free: bool,
    lowrank: bool,
    t0: float,
) -> None:
    """Phase 2: Newton path following on the barrier dual psi_mu, from phase 1's last p (sum 1).

    With ``matrix_free`` the Newton systems are solved by preconditioned CG (O(r^2 n) per product,
    no n x n matrix); with ``lowrank`` the barrier candidate is its rank-r part W^T g_mu(A) W.
    """
    n = W.shape[1]
    # mu from the current gap (a centre's gap is <= n mu); lambda = s^2 p is the optimal scaling of
    # p, and the inactive constraints get lambda_i ~ mu / (1 - X(p)_ii / s) so that X_ii ~ 1 at once
    mu = max((best.upper - best.lower) / n, 1e-300)
    slack = np.maximum(1.0 - start.g / start.s, 0.05)
    b = _barrier_point(W, start.s**2 * start.p + mu / slack, mu)
    counts["factorizations"] += 1
    sigma, correctors = 0.2, 0
    while not done():
        if matrix_free:
            hess = _MatrixFreeHessian(b)

            def solve(rhs: np.ndarray) -> np.ndarray:
                before = hess.products
                out = hess.solve(rhs, _CG_RTOL, _CG_MAX_PRODUCTS)
                counts["hessian_products"] = counts.get("hessian_products", 0) + hess.products - before
                return out
        else:
            cf, tries = _cholesky(_scaled_hessian(b))
            counts["factorizations"] += tries

            def solve(rhs: np.ndarray) -> np.ndarray:
                return sla.cho_solve(cf, rhs, check_finite=False)

        counts["iterations"] += 1
        best.offer_lower(b.lower, b.lam)
        if lowrank:
            best.offer_upper(b.upper_lowrank(), "lowbarrier", b.lam, b.mu)
        else:
            best.offer_upper(b.upper_barrier(), "barrier", b.lam, b.mu)
        best.offer_upper(b.upper_dual(), "dual", b.lam)
        # lambda / sum(lambda) carries ~ n mu of weight on the inactive constraints, which costs the
        # lower bound about n mu: a few multiplicative steps remove most of it (O(r^2 n) each)
        pt = dual_point(W, b.lam / b.lam.sum())
        counts["factorizations"] += 1
        prev = None
        for _ in range(POLISH_STEPS):
            prev, pt = pt, ascent_step(W, pt, best, counts, prev)
        logger.debug(
            "phase 2: iteration %d, mu %.2e, gap %.3e, %.2f s (%d Hessian products so far)",
            counts["iterations"],
            b.mu,
            best.gap(),
            time.perf_counter() - t0,
            counts.get("hessian_products", 0),
        )
        if done():
            return
        rhs = b.lam * (b.d - 1.0)
        delta = solve(rhs)  # relative Newton step: Λ^-1 Δlambda
        decrement = float(rhs @ delta)
        if decrement > 4.0 * b.mu:  # not centred yet: a damped Newton (corrector) step
            correctors += 1
            neg = delta < 0
            alpha = min(1.0, 0.9 / float(np.max(-delta[neg]))) if neg.any() else 1.0
            while alpha >= 1e-6:  # Armijo backtracking on the concave psi_mu
                trial = _barrier_point(W, b.lam * (1.0 + alpha * delta), b.mu)
                counts["factorizations"] += 1
                if trial.psi >= b.psi + 0.25 * alpha * decrement:
                    break
                alpha /= 2
            else:
                trial = None  # psi is flat to rounding along the step (ill-conditioned G): move on
            if trial is not None:
                b = trial
                continue
        if b.mu * n <= EPS * best.upper:  # the centre is exact to rounding: nothing left to gain
            return
        # shrink mu by sigma (faster while stages need at most two corrector steps, slower when they
        # need more) and predict lambda(sigma mu) along d log lambda / d log mu
        if correctors <= 2:
            sigma = max(0.02, sigma / 2)
        elif correctors > 3:
            sigma = min(0.5, sigma * 2)
        fmu = 1.0 / b.lam - ((b.z**2) / (2 * b.y * b.rho)[:, None]).sum(axis=0)  # d diag X / d mu
        slope = b.mu * solve(b.lam * fmu)
        b = _barrier_point(W, b.lam * np.exp(np.clip(slope * np.log(sigma), -50.0, 50.0)), b.mu * sigma)
        counts["factorizations"] += 1
        correctors = 0
