"""The marginal family's certificate: a lower bound on the family's optimum at any point, by weak duality.

f is convex and homogeneous of degree -1, so for the current X and any feasible X'
f(X') >= f(X) + <grad f, X' - X> = 2 f(X) + <grad f, X'>, and the minimum of the last term over the
feasible set puts all the budget on one block: -max(max_g s(D_g), L_res / tau^2), with D_g =
-grad_{X_g} f (PSD) and s(D) = max{<D, X'> : X' PSD, diag X' <= 1}. Any positive diagonal L with
D <= lambda_max(L^-1/2 D L^-1/2) L bounds s(D) <= lambda_max(..) tr L (weak duality); L = diag(D C)
(exact at the optimum by complementary slackness) and L = diag(D) are tried; ``polish``
adds :func:`maxcut_upper` (s(D) itself, to about 1e-6). The lower bound is
2 f - max(..), the relative gap (f - bound) / f. When the views are tied (one shared mechanism,
symmetric workloads) the bound is that of the tied problem, whose optimum is the untied one's by
convexity and symmetry.

:func:`sdp_upper` (diagonal heuristics, optionally polished) and :func:`maxcut_upper` bound s(D);
:func:`certificate` turns a point of :mod:`.optimize` into (objective, bound), and
:mod:`.symmetric` bounds s(D) of its solver's dual blocks with the same two functions.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.linalg
import scipy.optimize

from .deadline import Timed, TimeLimit, past
from .problem import MarginalProblem

__all__ = ["certificate", "sdp_upper", "maxcut_upper"]


def sdp_upper(
    d: np.ndarray | None,
    c: np.ndarray,
    refine: int = 0,
    polish: bool = False,
    extra=(),
    basis: np.ndarray | None = None,
    projected: np.ndarray | None = None,
    deadline: float | None = None,
) -> float:
    """An upper bound on max{<D, X> : X PSD, diag X <= 1} (see the module docstring) at a point
    with correlation matrix ``c``; ``extra``: more positive diagonals L to try (a solver's cost
    multipliers); ``polish``: also :func:`maxcut_upper`'s smoothed descent from the best L found.
    ``basis``: orthonormal columns R; the maximum is then over X = R S R^T only (range in R),
    bounded through R^T D R <= lambda R^T L R, so lambda_max is that of the pencil on R.
    ``projected``: R^T D R itself, with ``c`` the point's Gram in R's coordinates (S, any scale);
    then no N x N matrix is formed. ``deadline``: the polish stops there (:func:`maxcut_upper`)."""
    best = math.inf
    if projected is not None:
        if basis is None:
            raise ValueError("projected needs basis")
        dr = (projected + projected.T) / 2
        dd = np.einsum("ij,jk,ik->i", basis, dr, basis)
        dc = np.einsum("ij,jk,ik->i", basis, dr @ c, basis)
    else:
        dd = np.diag(d)
        dc = np.einsum("ij,ji->i", d, c)
        dr = None if basis is None else basis.T @ d @ basis
    scale = max(float(np.mean(np.abs(dc))), 1e-300)
    cands = [dc + kappa * scale for kappa in (0.0, 1e-9, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2)] + [dd]
    # given multipliers, with small floors too: supported on fewer cells than the basis has columns,
    # R^T Diag(lam) R is singular and the pencil's top eigenvalue unreachable
    cands += [
        np.asarray(e) + kappa * float(np.mean(np.abs(e))) for e in extra for kappa in (0.0, 1e-9, 1e-7, 1e-5, 1e-3)
    ]
    floor = 1e-300 + 1e-14 * max(float(dd.max(initial=0.0)), 0.0)

    def top_ratio(lam: np.ndarray) -> float:
        """lambda_max of D against Diag(lam) (on the range of ``basis`` when given)."""
        if dr is None:
            s = 1.0 / np.sqrt(lam)
            return float(np.linalg.eigvalsh(d * s[:, None] * s[None, :])[-1])
        try:
            return float(scipy.linalg.eigh(dr, (basis * lam[:, None]).T @ basis, eigvals_only=True)[-1])
        except (np.linalg.LinAlgError, ValueError):
            return math.inf

    best_lam = None
    for lam in cands:
        lam = np.maximum(lam, floor)
        if not np.all(np.isfinite(lam)):
            continue
        val = max(top_ratio(lam), 0.0) * float(lam.sum())
        if val < best:
            best, best_lam = val, lam
    # a few multiplicative steps towards the fixed point lambda_i / sum(lambda) = v_i^2 (v: the top
    # eigenvector of L^-1/2 D L^-1/2); every step is a valid bound, the least is kept
    lam = best_lam
    for _ in range(refine if lam is not None and basis is None else 0):
        s = 1.0 / np.sqrt(lam)
        w, v = np.linalg.eigh(d * s[:, None] * s[None, :])
        top = v[:, -1] ** 2
        target = np.maximum(top * lam.sum(), floor)
        lam = np.maximum(np.sqrt(lam * target), floor)
        best = min(best, max(top_ratio(lam), 0.0) * float(lam.sum()))
    if polish and best_lam is not None:
        best = min(best, maxcut_upper(d, best_lam, basis=basis, projected=projected, deadline=deadline))
    return best


def maxcut_upper(
    d: np.ndarray | None,
    start: np.ndarray,
    *,
    max_iterations: int = 400,
    basis: np.ndarray | None = None,
    projected: np.ndarray | None = None,
    deadline: float | None = None,
) -> float:
    """An upper bound on s(D) = max{<D, X> : X PSD, diag X <= 1} for a symmetric D with a
    non-negative diagonal (then the maximum is attained with diag X = 1, and weak duality gives
    s(D) <= psi(mu) = sum(mu) + N lambda_max(D - Diag mu) for *every* mu; min over mu is s(D)).

    psi is minimised from ``start`` by L-BFGS on a log-sum-exp smoothing of the top eigenvalue
    (temperature falling tenfold from 1e-2 to 1e-7 of max |D|); the least psi evaluated exactly
    (one eigvalsh) is returned, so the bound is valid whatever the descent reaches. The diagonal
    heuristics of :func:`sdp_upper` stop 1e-3 to 1e-2 above s(D) on the symmetric reduction's
    duals ([10]^40 abs: 2.0e-3 of the objective); this reaches 8e-5 there in 5 s.

    ``basis``: orthonormal columns R (N x r); the maximum is then over X = R S R^T only, and
    <D, X> = <D - Diag mu, X> + <mu, diag X> <= N max(lambda_max(R^T (D - Diag mu) R), 0) + sum(mu)
    for every mu >= 0 (tr X <= N): psi is that, over r x r matrices, with mu kept non-negative.
    ``projected``: R^T D R itself (then ``d`` is not needed: N x N is never formed). ``deadline``:
    the descent stops there (every psi evaluated is a bound: the least so far is returned)."""
    if projected is not None:
        if basis is None:
            raise ValueError("projected needs basis")
        dr = (projected + projected.T) / 2
        n = basis.shape[0]
        scale = max(float(np.abs(dr).max(initial=0.0)), 1e-300)
    else:
        d = (d + d.T) / 2
        n = d.shape[0]
        if n == 0 or (basis is None and np.any(np.diag(d) < 0)):
            return math.inf  # the equality-constrained dual would not bound the inequality problem
        # restricted: the spectrum of R^T (D - Diag mu) R with a zero appended (the max(., 0) above)
        dr = d if basis is None else basis.T @ d @ basis
        scale = max(float(np.abs(d).max()), 1e-300)
    if n == 0:
        return math.inf

    def spectrum(mu):
        if basis is None:
            return np.linalg.eigh(dr - np.diag(mu))
        w, v = np.linalg.eigh(dr - (basis * mu[:, None]).T @ basis)
        return np.append(w, 0.0), v

    def psi(mu):
        return float(mu.sum()) + n * float(spectrum(mu)[0].max())

    def smoothed(mu, t):
        w, v = spectrum(mu)
        top = float(w.max())
        e = np.exp((w - top) / t)
        z = float(e.sum())
        p = e[: v.shape[1]] / z
        rv = v if basis is None else basis @ v
        return float(mu.sum()) + n * (top + t * math.log(z)), 1.0 - n * np.einsum("ik,k,ik->i", rv, p, rv)

    mu = np.asarray(start, dtype=float).copy()
    bounds = None
    if basis is not None:
        mu = np.maximum(mu, 0.0)
        bounds = [(0.0, None)] * n
    best = psi(mu)
    for t in (1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7):
        fun = Timed(smoothed, deadline)
        try:
            r = scipy.optimize.minimize(
                fun,
                mu,
                args=(t * scale,),
                jac=True,
                method="L-BFGS-B",
                bounds=bounds,
                options={"maxiter": max_iterations},
            )
            x, stop = r.x, False
        except TimeLimit:
            x, stop = fun.best_x, True
        if x is not None and np.all(np.isfinite(x)):
            mu = x if basis is None else np.maximum(x, 0.0)
            best = min(best, psi(mu))
        if stop:
            break
    return max(best, 0.0)


def _bound_at(
    problem: MarginalProblem, factors, shares, tau, delta: float, polish: bool = False, deadline: float | None = None
) -> tuple[float, float]:
    """(f at the point, the dual bound from Phi = X_d^-1 G X_d^-1 at X_d = X + delta t I per view;
    ``polish``: each s(D_g) by :func:`maxcut_upper` too)."""
    ys, cs = [], []
    for k, f in enumerate(factors):
        c = (f @ f.T + delta * np.eye(f.shape[0])) / (1 + delta)
        cs.append(c)
        ys.append(problem.residual_gram(k, shares[k] * c))
    ev = problem.evaluate(ys, tau)
    if not math.isfinite(ev.f):
        return math.inf, 0.0
    lres = problem.residual_loss
    marg = ev.f - (lres / tau if lres > 0 and tau > 0 else 0.0)
    mult = len(problem.views) if problem.tied else 1
    mu = 0.0
    for k in range(len(factors)):
        d = -problem.cell_gram(k, ev.grads[k])
        d = (d + d.T) / 2
        mu = max(mu, sdp_upper(d, cs[k], polish=polish, deadline=deadline) / mult)
    if mu <= 0 or not math.isfinite(mu):
        return ev.f, 0.0
    return ev.f, (marg + math.sqrt(lres * mu)) ** 2 / mu


def certificate(
    problem: MarginalProblem,
    factors: list[np.ndarray],
    shares: np.ndarray,
    tau: float,
    deltas=(0.0, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3),
    polish: bool = False,
    deadline: float | None = None,
) -> tuple[float, float]:
    """(objective, certified lower bound on the family's optimum) at a point.

    Weak duality: for any PSD Phi over the domain and any feasible X', f_marg(X') >= 2 T - tr(Phi X')
    with T = tr((Phi^1/2 G Phi^1/2)^1/2), and tr(Phi X') <= mu (1 - tau') with mu = max_g s(D_g)
    (D_g: Phi seen from view g; one shared view: s(sum_g D_g) / m); L_res / tau' >= 2 sqrt(L_res mu) -
    mu tau'. Scaling Phi optimally gives (T + sqrt(L_res mu))^2 / mu. For Phi = X_d^-1 G X_d^-1, T is
    f_marg(X_d) and D_g is minus the gradient at X_d: any positive definite X_d gives a bound, and a
    slightly regularised copy of the current point (X + delta t I, a few deltas) avoids the blow-up
    of the gradient along directions where X is nearly singular. ``polish``: the delta whose bound
    is best is evaluated again with every s(D_g) polished by :func:`maxcut_upper` (seconds per
    view of a few hundred cells). Past ``deadline`` (a ``time.perf_counter()`` time) no further
    delta and no polish is tried (the first delta, 0, always is): the bound is the best of those
    computed, still valid."""
    obj = None
    best, best_delta = 0.0, None
    for i, delta in enumerate(deltas):
        if i and past(deadline):
            break
        f, low = _bound_at(problem, factors, shares, tau, delta)
        if delta == 0.0:
            obj = f
        if low > best:
            best, best_delta = low, delta
    if polish and best_delta is not None and not past(deadline):
        best = max(best, _bound_at(problem, factors, shares, tau, best_delta, polish=True, deadline=deadline)[1])
    return obj, min(best, obj)
