r"""The certified optimal per-view solver (QuerySmasher, Eq. 4), in numpy/scipy only.

Problem
-------
Given a c x c PSD Gram G, minimise L(X) = tr(G X^+) over PSD X with range(X) ⊇ range(G) and
diag(X) <= 1. X is the privacy Gram of a Gaussian mechanism at cost 1 and L its weighted variance.

Certificate (weak duality)
--------------------------
With multipliers lambda >= 0 on diag(X) <= 1, minimising the Lagrangian over X gives
2 tr((Λ^½ G Λ^½)^½) - sum(lambda); writing lambda = t p with p on the simplex and maximising over
t gives the dual value

    D(p) = s(p)^2,   s(p) = tr((D_p^½ G D_p^½)^½),

and every p on the simplex gives D(p) <= L* (:func:`dual_bound`). All work is done with a factor
G = W^T W (W = r x c, r = numerical rank of G, rows = scaled eigenvectors): D_p^½ G D_p^½ has the
same nonzero spectrum as the r x r matrix A(p) = W D_p W^T, so s(p) = tr(A(p)^½) costs O(r^2 c).
The reported ``lower_bound`` is D(p) of the returned ``dual_weights`` p, evaluated by that formula.

Primal candidates (upper bounds)
--------------------------------
* ``X(p) = W^T A(p)^-½ W`` (= D_p^-½ (D_p^½ G D_p^½)^½ D_p^-½ when p > 0, and defined for any p
  whose support spans the rows of W). Its range is range(G) and, since D_p W^T A^-3/2 W D_p is a
  generalised inverse of it, tr(G X(p)^+) = s(p). Divided by m = max_i X(p)_ii it is feasible with
  loss m s(p). At a dual optimum p* with A(p*) nonsingular the KKT conditions give
  X(p*)_ii <= s(p*) with equality on the support of p*, so m = s and the gap closes -- also when p*
  is on the boundary of the simplex and the optimal X is singular. The catch: the loss is first order in the error of p while D(p) is
  second order, so a first-order dual method certifies slowly when p* is on the boundary.
* the barrier point ``X(lambda, mu)`` below, divided by its largest diagonal entry.
The returned X is the candidate with the smaller certified loss; ``loss`` is tr(G X^+) recomputed
from the returned matrix (:func:`loss_of`, which also checks range(X) ⊇ range(G)).

Phase 1: over-relaxed multiplicative dual ascent
------------------------------------------------
p_i <- p_i (X(p)_ii / s(p))^tau, normalised. grad s(p) = diag(X(p)) / 2 and sum_i p_i X(p)_ii = s,
so this is exponentiated gradient ascent whose fixed points are the KKT points above; tau = 1 is
the classical multiplicative update. tau = 3 (over-relaxation) roughly halves the iterations on
the interior cases measured here (4 starts to oscillate); it is halved, down to 1, while a step
would decrease D(p). When the dual optimum is interior (prefix/range Grams, mixed Grams with a
full-rank Kronecker term) this converges linearly and X(p) certifies the optimum; it costs one
r x r eigendecomposition per iteration.

Phase 2: dual barrier path following (Newton), when phase 1 is slow
-------------------------------------------------------------------
Phase 1 hands over when its linear rate over the last 10 steps predicts more work than ~15 Newton
steps (costed in flops), or after 100 steps; on a boundary optimum it becomes sublinear, so this
happens after a few dozen cheap steps. Phase 2 starts from phase 1's p with mu = gap / c.
For mu > 0 consider min tr(G X^-1) - mu logdet X s.t. diag(X) <= 1. Its Lagrange dual function
psi_mu(lambda) (lambda > 0) is smooth and strictly concave, and its minimiser over X is

    X(lambda, mu) = mu Λ^-1 + W^T S W,   S = g_mu(A),  A = W Λ W^T,  g_mu(k) = 1 / (mu/2 + sqrt(mu^2/4 + k))

(the r x r form of Λ^-½ [mu/2 I + (mu^2/4 I + Λ^½ G Λ^½)^½] Λ^-½). With A = U diag(k) U^T,
y = mu/2 + rho, rho = sqrt(mu^2/4 + k), Z = U^T W:

    psi_mu = sum_a (k_a/y_a + y_a - mu log y_a) + (c - r)(mu - mu log mu) + mu sum log lambda - sum lambda
    d psi / d lambda_i = X_ii - 1
    d^2 psi / d lambda_i d lambda_j = -mu delta_ij / lambda_i^2 - sum_ab Z_ai Z_bi Z_aj Z_bj / (y_a y_b (rho_a + rho_b))

(the second term is the Daleckii-Krein derivative of g_mu, whose divided differences are
-1/(y_a y_b (rho_a + rho_b)) exactly, with no cancellation). The Hessian is assembled as mu I +
(Phi Λ)^T (Phi Λ) with Phi the r(r+1)/2 x c matrix of scaled products Z_a ∘ Z_b (a syrk of
r^2 c^2 / 2 flops) and factorised by Cholesky. Each stage maximises psi_mu by damped Newton
(Armijo backtracking, lambda kept positive) until the squared Newton decrement is below 4 mu, then
mu is multiplied by sigma with a predictor step along the central path in log-log coordinates
(d log lambda / d log mu from the same Cholesky factor; lambda_i ∝ mu for the inactive constraints,
which is what makes the predicted point nearly centred). sigma (0.02 .. 0.5) halves while stages need
at most two corrector steps and doubles when one needs more than three. From every Newton point a
few multiplicative steps (as in phase 1) start at p = lambda / sum(lambda): the barrier leaves
~n mu of weight on the inactive constraints, which they remove, sharpening the lower bound.

Why it converges and what certifies it: psi_mu is strictly concave for mu > 0 even though the
dual optimum of the original problem is not unique and the optimal X is singular, so damped Newton
converges to the centre lambda(mu). At a centre diag X(lambda, mu) = 1 and the gap between
tr(G X^-1) and the Lagrangian value at lambda is sum_a (y_a - sqrt k_a)^2 / y_a + (c - r) mu <= c mu,
so both candidates and the dual value D(lambda / sum lambda) converge as mu -> 0. The stopping test
uses the closed forms above (D(p) of an explicit p, the exact loss of an explicit feasible X), and
the returned loss, bound and gap are recomputed from the returned X and p.

Phase 2 with a formed Hessian needs ~r^2 c^2 / 2 flops and c^2 memory per step; it is used when
that is below ``_MAX_HESSIAN_FLOPS``. Otherwise, when r <= c / 2, phase 2 is matrix-free: the scaled
Hessian is applied to a vector as mu v + lam ∘ diag(Z^T (Gamma ∘ (Z diag(lam ∘ v) Z^T)) Z) with
Gamma_ab = 1 / (y_a y_b (rho_a + rho_b)) (two r x r x c products, in float32: only the search
direction depends on them, every bound is recomputed in float64), and each Newton system is solved
by conjugate gradients preconditioned with the Hessian's exact diagonal, to a relative residual of
1e-3 (inexact Newton; the Armijo line search keeps psi_mu increasing). Near-full-rank Grams (r ~ c)
whose dual optimum is on the boundary are left to phase 1, which then may stop at
``max_iterations`` / ``time_limit`` with ``converged=False`` (the returned bounds are still valid).

Factored input (:func:`querysmasher.solvers.sdp_factored.solve_factored`)
-------------------------------------------------------------------------
Given F with G = F^T F (m x c, m < c: a view's subquery matrix), the factor W comes from the m x m
eigendecomposition of F F^T, phase 2 is matrix-free, and the primal candidates are kept at G's rank:
X(p) = W^T A^-½ W and W^T g_mu(A) W (the barrier point without its full-rank mu Λ^-1 part; its loss
is tr(g_mu(A)^-1) = sum y). The result is X = V diag(s) V^T with V (c x r) orthonormal, its loss
recomputed from V and s: memory O(r c), time O(r^2 c) per step, and no c x c matrix anywhere.
Measured (bench/bench_sdp.py --table): 10,000 cells of rank 197 certified to 1e-4 in well under a
minute and 0.2 GB, where the dense solver needed minutes and 6 GB.

Preprocessing: G is symmetrised and validated, divided by its largest diagonal entry (the result
is scaled back), factored at its numerical rank (eigenvalues <= max(c, 32) eps max dropped), and
cells with a zero diagonal (to rounding) are removed: they get X_ii = 1 and no coupling.

Limits (measured): Grams whose spectrum spans up to ~1e-8 (random eigenvectors) certify a 1e-4 gap;
at ~1e-10, or with cell scales spread over ~1e16, the barrier Hessian is too ill-conditioned for
phase 2 to finish and some solves stop with converged=False (with valid bounds, gaps ~1e-4..1e-1).

>>> import numpy as np
>>> P = np.tril(np.ones((10, 10))); C = np.eye(10) - 1 / 10
>>> r = solve_dense(C @ P.T @ P @ C, target_gap=1e-8)
>>> r.converged, round(r.loss, 6), r.lower_bound <= r.loss
(True, 9.965944, True)
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla

from ..linalg import eigh_sym

__all__ = ["DenseSolveResult", "solve_dense", "dual_bound", "loss_of"]  # the factored form: solvers.sdp_factored

logger = logging.getLogger(__name__)

_EPS = float(np.finfo(float).eps)
_SYM_RTOL = 1e-8  # |G - G^T| allowed, relative to max |G|: Grams assembled in floating point
_PSD_RTOL = 1e-8  # most negative eigenvalue allowed, relative to the largest |eigenvalue|
_RANGE_RTOL = 1e-8  # ||(I - X X^+) G^½||_F / ||G^½||_F accepted as "range(X) contains range(G)"
_MAX_HESSIAN_FLOPS = 5e11  # phase 2 (r^2 c^2 / 2 flops per Newton step) only below this
# BLAS threads of a solve: measured 0.05 s (1 thread) against 0.54 s (2 threads) per phase-1 step
# at r = 197, c = 10,000 on this 2-core machine shared with other processes (OpenBLAS threads spin
# while waiting for a core), so a solve uses BLAS's threads only when the machine is otherwise idle
_BLAS_THREADS = 1
_IDLE_LOAD_PER_CORE = 0.25  # 1-minute load average per core below which the machine counts as idle


def _blas_threads() -> int | None:
    """1 on a busy machine, None (BLAS's default) on an idle one."""
    try:
        idle = os.getloadavg()[0] < _IDLE_LOAD_PER_CORE * (os.cpu_count() or 1)
    except OSError:
        idle = False
    return None if idle else _BLAS_THREADS

_DENSE_THREADED_CELLS = 1000  # solve_dense on at least this many cells uses BLAS's default threads
_HESSIAN_DTYPE = np.float32
_CG_PRODUCTS_EXPECTED = 60  # Hessian products of a typical matrix-free Newton step (for costing)
_CG_MAX_PRODUCTS = 300  # conjugate-gradient products per Newton system, at most
_CG_RTOL = 1e-2  # relative residual of the inexact Newton steps (the line search keeps them safe);
# measured on 2,500-cell affine/abs views: 1e-2 needs 15-25 % fewer products than 1e-3, same steps
_PHASE1_MAX_MATRIX_FREE = 40  # phase-1 steps before a matrix-free phase 2 (measured: 40 instead of
# 100 saves 60 steps and costs no extra Newton steps on 2,500-cell affine/abs views)
_HESSIAN_CHUNK_BYTES = 64 << 20  # rows of Phi are built and accumulated in blocks of this size
_PHASE1_MAX_BEFORE_SWITCH = 100  # phase-1 iterations after which phase 2 (if affordable) takes over
_STALL_WINDOW = 10  # phase 1's convergence rate is measured over this many iterations
_NEWTON_STEPS_EXPECTED = 15  # a typical phase 2 (measured: 10-16 Newton steps to a 1e-4 gap)
_POLISH_STEPS = 6  # multiplicative steps from each phase-2 point to sharpen the lower bound
_OVER_RELAXATION = 3.0  # tau of the multiplicative step (measured: 3 beats 1, 2 and adaptive; 4 oscillates)


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


# ----------------------------------------------------------------------------- input handling


def _as_square(m: np.ndarray, name: str) -> np.ndarray:
    a = np.array(m, dtype=float)  # a copy: callers' arrays are never modified
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"{name} must be a square matrix, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} contains NaN or infinite entries")
    return a


def _symmetrised(m: np.ndarray, name: str) -> np.ndarray:
    scale = float(np.abs(m).max(initial=0.0))
    if float(np.abs(m - m.T).max(initial=0.0)) > _SYM_RTOL * scale:
        raise ValueError(f"{name} is not symmetric (max |{name} - {name}^T| exceeds {_SYM_RTOL:g} x max |{name}|)")
    return (m + m.T) / 2


def _check_psd(e: np.ndarray, name: str) -> None:
    scale = float(np.abs(e).max(initial=0.0))
    if e.size and float(e.min()) < -_PSD_RTOL * scale:
        raise ValueError(f"{name} is not positive semidefinite (smallest eigenvalue {e.min():.3g}, largest |eigenvalue| {scale:.3g})")


@dataclass(frozen=True)
class _Prepared:
    """G / scale = W_all^T W_all (numerical rank); the solve uses the columns ``kept``."""

    c: int
    scale: float  # max diag(G); 0 for G == 0
    W_all: np.ndarray  # r x c factor of G / scale
    kept: np.ndarray  # cells with a nonzero diagonal

    @property
    def W(self) -> np.ndarray:
        return self.W_all[:, self.kept]


def _prepare(G: np.ndarray) -> _Prepared:
    g = _symmetrised(_as_square(G, "G"), "G")
    c = g.shape[0]
    diag = np.diag(g)
    scale = float(diag.max(initial=0.0))
    e, v = eigh_sym(g / scale if scale > 0 else g)
    _check_psd(e, "G")
    if scale <= 0:  # PSD with a zero diagonal: G == 0
        return _Prepared(c, 0.0, np.zeros((0, c)), np.zeros(0, dtype=int))
    # eigenvalues at rounding level are zero (the rule of numpy.linalg.matrix_rank, at least 32 eps)
    keep = e > max(c, 32) * _EPS * e.max()
    w_all = (v[:, keep] * np.sqrt(e[keep])).T
    kept = np.flatnonzero(diag > c * _EPS * scale)
    return _Prepared(c, scale, w_all, kept)


# ----------------------------------------------------------------------------- public helpers


def _weighted_gram(W: np.ndarray, p: np.ndarray) -> np.ndarray:
    """W D_p W^T (upper triangle) for p >= 0 by one symmetric rank-k update: half a general product."""
    a = W * np.sqrt(p)
    if a.shape[0] == 0:
        return np.zeros((0, 0))
    return sla.blas.dsyrk(1.0, a.T, trans=1, lower=0)  # a.T is Fortran-ordered: read in place


def _root_spectrum(k: np.ndarray) -> tuple[np.ndarray, float]:
    """(sqrt(max(k - e, 0)), e) for the computed eigenvalues k of a PSD r x r matrix A = W D_p W^T.

    e = r eps max(k) bounds the rounding error of each computed eigenvalue (forming A and the
    symmetric eigensolver are backward stable, and Weyl's inequality carries that to eigenvalues).
    The square root magnifies an error d in a small eigenvalue k to d / (2 sqrt k): ~1e-8 relative
    for the eigenvalues that are exactly 0. Lowering every eigenvalue by e before the root keeps
    s(p), hence the dual bound, below its exact value.
    """
    floor = k.size * _EPS * max(float(k.max(initial=0.0)), 0.0)
    return np.sqrt(np.maximum(k - floor, 0.0)), floor


def _dual_s(W: np.ndarray, p: np.ndarray) -> float:
    """s(p) = tr((W D_p W^T)^½)."""
    if W.shape[0] == 0:
        return 0.0
    return float(_root_spectrum(np.linalg.eigvalsh(_weighted_gram(W, p), UPLO="U"))[0].sum())


def dual_bound(G: np.ndarray, p: np.ndarray) -> float:
    """The dual value (tr (D_p^½ G D_p^½)^½)^2 for p >= 0 normalised to sum 1: a lower bound on min L.

    >>> round(dual_bound(np.diag([1.0, 4.0]), np.array([0.5, 0.5])), 12)  # (sqrt .5 + sqrt 2)^2
    4.5
    >>> round(dual_bound(np.diag([1.0, 4.0]), np.array([0.2, 0.8])), 12)  # p ∝ diag: the optimum tr G
    5.0
    """
    prep = _prepare(G)
    q = np.asarray(p, dtype=float).ravel()
    if q.shape != (prep.c,) or not np.all(np.isfinite(q)) or np.any(q < 0) or q.sum() <= 0:
        raise ValueError(f"p must be {prep.c} finite non-negative weights with a positive sum")
    q = q / q.sum()
    return prep.scale * _dual_s(prep.W, q[prep.kept]) ** 2


def _loss_from_factor(W_all: np.ndarray, X: np.ndarray) -> float:
    """tr(W^T W X^+) for PSD X with range(X) ⊇ range(W^T) (checked); W^T W is G up to rounding."""
    return _loss_and_eig(W_all, X)[0]


def _loss_and_eig(W_all: np.ndarray, X: np.ndarray) -> tuple[float, tuple[np.ndarray, np.ndarray]]:
    """:func:`_loss_from_factor` and the eigendecomposition of X it used."""
    e, v = eigh_sym(X)
    top = float(np.abs(e).max(initial=0.0))
    _check_psd(e, "X")
    # eigenvalues at rounding level are zero, as for G
    nz = e > X.shape[0] * _EPS * top
    wv = W_all @ v  # row a, column k: <w_a, v_k>
    total = float((W_all**2).sum())
    outside = float((wv[:, ~nz] ** 2).sum())  # ||(I - X X^+) G^½||_F^2
    if total > 0 and outside > _RANGE_RTOL**2 * total:
        raise ValueError(f"range(X) does not contain range(G): relative residual {np.sqrt(outside / total):.2e}")
    return float(((wv[:, nz] ** 2).sum(axis=0) / e[nz]).sum()), (e, v)


def loss_of(G: np.ndarray, X: np.ndarray) -> float:
    """tr(G X^+), after checking that X is PSD and range(X) ⊇ range(G) (ValueError otherwise).

    Eigenvalues of G and X at rounding level (<= c eps max) count as zero; the range condition is
    accepted when ||(I - X X^+) G^½||_F <= 1e-8 ||G^½||_F.

    >>> loss_of(np.diag([1.0, 4.0]), np.diag([1.0, 0.5]))
    9.0
    """
    prep = _prepare(G)
    x = _symmetrised(_as_square(X, "X"), "X")
    if x.shape[0] != prep.c:
        raise ValueError(f"X is {x.shape[0]} x {x.shape[0]} but G is {prep.c} x {prep.c}")
    return prep.scale * _loss_from_factor(prep.W_all, x)


# ----------------------------------------------------------------------------- phase 1


@dataclass
class _DualPoint:
    """s(p) and diag X(p) at one p (any positive scaling of p)."""

    p: np.ndarray
    s: float  # tr(A^½)
    g: np.ndarray  # diag(W^T A^-½ W), with A's eigenvalues floored at rounding level
    singular: bool  # A(p) is singular to rounding: X(p) misses part of range(G)

    @property
    def lower(self) -> float:  # D(p / sum p)
        return self.s * self.s / float(self.p.sum())

    @property
    def upper(self) -> float:  # loss of X(p) / max diag
        return np.inf if self.singular else self.s * float(self.g.max())


def _dual_point(W: np.ndarray, p: np.ndarray) -> _DualPoint:
    k, u = eigh_sym(_weighted_gram(W, p), upper=True)
    sq, floor = _root_spectrum(k)
    # with the floor, g stays finite when A is singular (p too small where range(G) needs it) and
    # the ascent step raises those p_i; such a p yields no upper bound
    g = (((u.T @ W) ** 2) / np.sqrt(np.maximum(k, floor))[:, None]).sum(axis=0)
    return _DualPoint(p, float(sq.sum()), g, bool(k.min() <= floor))


# ----------------------------------------------------------------------------- phase 2


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
        return float(_root_spectrum(self.k)[0].sum()) ** 2 / float(self.lam.sum())

    def upper_barrier(self) -> float:
        """Loss of X(lambda, mu) / max diag: tr(G X^-1) = tr((S + mu A^-1)^-1) (Woodbury)."""
        with np.errstate(divide="ignore"):
            return float(self.d.max()) * float(np.sum(1.0 / (1.0 / self.y + self.mu / self.k)))

    def upper_lowrank(self) -> float:
        """Loss of W^T g_mu(A) W / max diag (rank r, no mu Λ^-1 part): tr(g_mu(A)^-1) = sum(y)."""
        return float(np.max(self.d - self.mu / self.lam)) * float(self.y.sum())

    def upper_dual(self) -> float:
        """Loss of X(p) / max diag for p ∝ lambda, from the same eigendecomposition."""
        sq, floor = _root_spectrum(self.k)
        if self.k.min() <= floor:
            return np.inf
        return float(sq.sum()) * float(((self.z**2) / sq[:, None]).sum(axis=0).max())


def _barrier_point(W: np.ndarray, lam: np.ndarray, mu: float) -> _BarrierPoint:
    r, c = W.shape
    k, u = eigh_sym(_weighted_gram(W, lam), upper=True)
    k = np.maximum(k, 0.0)
    rho = np.sqrt(mu * mu / 4 + k)
    y = mu / 2 + rho
    z = u.T @ W
    d = mu / lam + ((z**2) / y[:, None]).sum(axis=0)
    psi = float(np.sum(k / y + y - mu * np.log(y)) + (c - r) * (mu - mu * np.log(mu)) + mu * np.log(lam).sum() - lam.sum())
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


# ----------------------------------------------------------------------------- the solver


class _Tracker:
    """Best certified bounds seen so far and how to rebuild the matching X / p."""

    def __init__(self) -> None:
        self.lower = -np.inf
        self.p: np.ndarray | None = None
        self.upper = np.inf
        self.primal: tuple[str, np.ndarray, float] | None = None  # ("dual", p, 0) or ("barrier", lam, mu)

    def offer_lower(self, value: float, p: np.ndarray) -> None:
        if value > self.lower:
            self.lower, self.p = value, p

    def offer_upper(self, value: float, kind: str, vec: np.ndarray, mu: float = 0.0) -> None:
        if value < self.upper:
            self.upper, self.primal = value, (kind, vec, mu)

    def gap(self) -> float:
        return (self.upper - self.lower) / self.upper if self.upper > 0 else 0.0


def _middle(W: np.ndarray, kind: str, vec: np.ndarray, mu: float) -> np.ndarray:
    """The r x r M of a low-rank candidate X = W^T M W: A(p)^-½ ("dual") or g_mu(A) ("lowbarrier")."""
    k, u = eigh_sym(_weighted_gram(W, vec), upper=True)
    k = np.maximum(k, 0.0)
    if kind == "dual":
        f = 1.0 / np.sqrt(np.maximum(k, _root_spectrum(k)[1]))
    else:
        f = 1.0 / (mu / 2 + np.sqrt(mu * mu / 4 + k))
    return (u * f) @ u.T


def _build_x(W: np.ndarray, kind: str, vec: np.ndarray, mu: float) -> np.ndarray:
    """X(p) = W^T A^-½ W or X(lambda, mu) = mu Λ^-1 + W^T g_mu(A) W, divided by its max diagonal."""
    k, u = eigh_sym(_weighted_gram(W, vec), upper=True)
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


def _ascent_step(W: np.ndarray, pt: _DualPoint, best: _Tracker, counts: dict[str, int]) -> _DualPoint:
    """p <- p (X(p)_ii / s)^tau with tau = 3, halved (down to 1, always taken) while s(p) decreases."""
    with np.errstate(divide="ignore"):  # p_i = 0 stays 0
        log_p, log_ratio = np.log(pt.p), np.log(pt.g / pt.s)
    tau = _OVER_RELAXATION
    while True:
        # in logs: (g/s)^tau over- or underflows when diag X(p) spans many orders of magnitude
        log_q = log_p + tau * log_ratio
        q = np.exp(log_q - log_q.max())
        cand = _dual_point(W, q / q.sum())
        counts["factorizations"] += 1
        if cand.s >= pt.s or tau == 1.0:
            break
        tau = max(1.0, tau / 2)
    best.offer_lower(cand.lower, cand.p)
    best.offer_upper(cand.upper, "dual", cand.p)
    return cand


def _phase1_should_stop(history: list[float], target_gap: float, newton_budget: float, max_steps: int = _PHASE1_MAX_BEFORE_SWITCH) -> bool:
    """Hand over to phase 2 when phase 1's recent linear rate predicts more work than phase 2 costs.

    A boundary dual optimum makes phase 1 sublinear, so its rate stalls and it is stopped after at
    most ``_PHASE1_MAX_BEFORE_SWITCH`` steps; an interior one keeps a linear rate and finishes.
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


def _solve_core(prep: _Prepared, target_gap: float, max_iterations: int, time_limit: float | None, t0: float, lowrank: bool) -> tuple[_Tracker, dict[str, int]]:
    """Phases 1 and 2 on the prepared factor; returns the best certified candidates found."""
    W = prep.W
    r, n = W.shape  # n = cells left after dropping zero-diagonal ones
    deadline = np.inf if time_limit is None else t0 + float(time_limit)
    best = _Tracker()
    counts = {"iterations": 0, "factorizations": 1}  # the eigendecomposition of G

    def done() -> bool:
        return best.gap() <= target_gap or counts["iterations"] >= max_iterations or time.perf_counter() >= deadline

    # phase 1: multiplicative dual ascent from the uniform p
    pt = _dual_point(W, np.full(n, 1.0 / n))
    counts["factorizations"] += 1
    best.offer_lower(pt.lower, pt.p)
    best.offer_upper(pt.upper, "dual", pt.p)
    # flops of one phase-1 step (two r x r x n products and an r x r eigendecomposition) and of one
    # Newton step, in phase-1 steps: the price of a typical phase 2. The Hessian is formed (r^2 n^2 / 2
    # flops, n^2 memory) when that is cheaper than a typical conjugate-gradient solve and allowed.
    step_flops = 4.0 * r * r * n + 10.0 * r**3
    dense_newton = (r * (r + 1) / 2) * float(n) ** 2 + n**3 / 3
    matrix_free_newton = _CG_PRODUCTS_EXPECTED * 4.0 * r * r * n
    # a near-full-rank G whose Hessian is too big is left to phase 1 (products cost as much as a
    # dense Hessian there; such Grams have interior optima, which phase 1 certifies)
    matrix_free = lowrank or (dense_newton > _MAX_HESSIAN_FLOPS and r <= n / 2)
    use_newton = lowrank or matrix_free or dense_newton <= _MAX_HESSIAN_FLOPS
    newton_flops = matrix_free_newton if matrix_free else dense_newton
    newton_budget = _NEWTON_STEPS_EXPECTED * (newton_flops + (_POLISH_STEPS + 2) * step_flops) / step_flops
    history = [best.gap()]
    while not done():
        if use_newton and _phase1_should_stop(history, target_gap, newton_budget, _PHASE1_MAX_MATRIX_FREE if matrix_free else _PHASE1_MAX_BEFORE_SWITCH):
            break
        pt = _ascent_step(W, pt, best, counts)
        counts["iterations"] += 1
        history.append(best.gap())
        if counts["iterations"] % 10 == 0:
            logger.debug("phase 1: iteration %d, gap %.3e, %.2f s", counts["iterations"], best.gap(), time.perf_counter() - t0)
    logger.debug("phase 1 done: %d iterations, gap %.3e, %.2f s (cells %d, rank %d)", counts["iterations"], best.gap(), time.perf_counter() - t0, n, r)
    if use_newton and not done():
        _barrier_phase(W, pt, best, counts, done, matrix_free=matrix_free, lowrank=lowrank, t0=t0)
    return best, counts


def _certificate(prep: _Prepared, best: _Tracker, loss: float, counts: dict[str, int]) -> tuple[np.ndarray, float, float]:
    """(dual weights p over all c cells, lower bound, relative gap) of a finished solve with ``loss``."""
    p = np.zeros(prep.c)
    p[prep.kept] = best.p / best.p.sum()
    # exactly the arithmetic of dual_bound(G, p), so that the two agree to the last bit
    lower = prep.scale * _dual_s(prep.W, (p / p.sum())[prep.kept]) ** 2
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
    from threadpoolctl import threadpool_limits

    # small views single-threaded (see _BLAS_THREADS); large dense ones keep BLAS's own threading
    threads = _BLAS_THREADS if np.shape(G)[0] < _DENSE_THREADED_CELLS else None
    with threadpool_limits(limits=threads, user_api="blas"):
        return _solve_dense(G, target_gap, max_iterations, time_limit)


def _solve_dense(G: np.ndarray, target_gap: float, max_iterations: int, time_limit: float | None) -> DenseSolveResult:
    t0 = time.perf_counter()
    prep = _prepare(G)
    c = prep.c
    if prep.scale == 0:  # G == 0: any feasible X is optimal
        return DenseSolveResult(np.eye(c), 0.0, 0.0, 0.0, 0, 1, time.perf_counter() - t0, True, np.full(c, 1.0 / c))
    W = prep.W
    best, counts = _solve_core(prep, target_gap, max_iterations, time_limit, t0, lowrank=False)

    # the answer: rebuild the best X, recompute its loss from the matrix, re-evaluate the bound
    kind, vec, mu = best.primal
    x_kept = _build_x(W, kind, vec, mu)
    X = np.eye(c)
    X[np.ix_(prep.kept, prep.kept)] = x_kept
    loss, eig = _loss_and_eig(prep.W_all, X)
    loss *= prep.scale
    p, lower, gap = _certificate(prep, best, loss, counts)
    return DenseSolveResult(
        X, loss, lower, gap, counts["iterations"], counts["factorizations"], time.perf_counter() - t0, bool(gap <= target_gap), p, eig
    )


def _barrier_phase(
    W: np.ndarray, start: _DualPoint, best: _Tracker, counts: dict[str, int], done: Callable[[], bool], *, matrix_free: bool, lowrank: bool, t0: float
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
        pt = _dual_point(W, b.lam / b.lam.sum())
        counts["factorizations"] += 1
        for _ in range(_POLISH_STEPS):
            pt = _ascent_step(W, pt, best, counts)
        logger.debug(
            "phase 2: iteration %d, mu %.2e, gap %.3e, %.2f s (%d Hessian products so far)",
            counts["iterations"], b.mu, best.gap(), time.perf_counter() - t0, counts.get("hessian_products", 0),
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
        if b.mu * n <= _EPS * best.upper:  # the centre is exact to rounding: nothing left to gain
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
