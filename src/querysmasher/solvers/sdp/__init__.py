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
  is on the boundary of the simplex and the optimal X is singular. The catch: the loss is first order in the error of p
  while D(p) is second order, so a first-order dual method certifies slowly when p* is on the boundary.
* the barrier point ``X(lambda, mu)`` below, divided by its largest diagonal entry.
The returned X is the candidate with the smaller certified loss; ``loss`` is tr(G X^+) recomputed
from the returned matrix (:func:`loss_of`, which also checks range(X) ⊇ range(G)).

Phase 1: over-relaxed multiplicative dual ascent
------------------------------------------------
p_i <- p_i (X(p)_ii / s(p))^tau, normalised. grad s(p) = diag(X(p)) / 2 and sum_i p_i X(p)_ii = s,
so this is exponentiated gradient ascent whose fixed points are the KKT points above; tau = 1 is
the classical multiplicative update. tau = 3 (over-relaxation) roughly halves the iterations on
the interior cases measured here (4 starts to oscillate); from the second step on, tau is the
Barzilai-Borwein length of the last step clipped to [1, 3] (random views want ~2: 5 -> 2 steps);
it is halved, down to 1, while a step would decrease D(p). When the dual optimum is interior (prefix/range
Grams, mixed Grams with a full-rank Kronecker term) this converges linearly and X(p) certifies the optimum; it
costs one r x r eigendecomposition per iteration.

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
that is below ``_MAX_HESSIAN_FLOPS`` (in :mod:`.core`). Otherwise, when r <= c / 2, phase 2 is matrix-free: the scaled
Hessian is applied to a vector as mu v + lam ∘ diag(Z^T (Gamma ∘ (Z diag(lam ∘ v) Z^T)) Z) with
Gamma_ab = 1 / (y_a y_b (rho_a + rho_b)) (two r x r x c products, in float32: only the search
direction depends on them, every bound is recomputed in float64), and each Newton system is solved
by conjugate gradients preconditioned with the Hessian's exact diagonal, to a relative residual of
1e-2 (inexact Newton; the Armijo line search keeps psi_mu increasing). Near-full-rank Grams (r ~ c)
whose dual optimum is on the boundary are left to phase 1, which then may stop at
``max_iterations`` / ``time_limit`` with ``converged=False`` (the returned bounds are still valid).

Factored input (:func:`solve_factored`)
---------------------------------------
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

Modules, one per phase
----------------------
* :mod:`.problem`: input checks, the prepared factor W of G, weighted Grams, s(p), the dual value
  (:func:`dual_bound`) and the loss (:func:`loss_of`);
* :mod:`.dual`: phase 1 (dual points, the multiplicative ascent step, the tracker of the best
  certified points, the switch rule);
* :mod:`.barrier`: phase 2 (barrier points, Hessians formed or matrix-free, the path following);
* :mod:`.core`: the solve loop both front ends share, the certificate, rebuilding X, BLAS threads,
  and the dense front end :func:`solve_dense`;
* :mod:`.factored`: the factored front end :func:`solve_factored` and :func:`dual_bound_factored`.

>>> import numpy as np
>>> P = np.tril(np.ones((10, 10))); C = np.eye(10) - 1 / 10
>>> r = solve_dense(C @ P.T @ P @ C, target_gap=1e-8)
>>> r.converged, round(r.loss, 6), r.lower_bound <= r.loss
(True, 9.965944, True)
"""

from __future__ import annotations

from .core import DenseSolveResult, solve_dense
from .factored import FactoredSolveResult, dual_bound_factored, solve_factored
from .problem import dual_bound, loss_of

__all__ = [
    "DenseSolveResult",
    "solve_dense",
    "dual_bound",
    "loss_of",
    "FactoredSolveResult",
    "solve_factored",
    "dual_bound_factored",
]
