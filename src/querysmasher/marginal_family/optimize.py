"""The marginal-family optimiser: a start from the ``qs`` plan, quasi-Newton descent, and the certified gap.

The problem (:class:`~.problem.MarginalProblem`) is min f(X_1..X_m, tau) subject to
sum_g max diag X_g + tau <= 1 (beta = 1; the total variance at beta is f / beta). f does not
increase when a PSD term is added, so the diagonal of every X_g can be filled up to its largest
entry for free: X_g = t_g C_g with C_g a correlation matrix (unit diagonal), sum t_g + tau = 1. The
descent works on C_g = F F^T (F: the rows of a square R normalised) and softmax shares, with a
log-det barrier -mu sum_g log det C_g (the optimum is typically singular: rank X = rank G on one
affine view) whose weight falls tenfold after every round that raised the certified bound: a first
round of L-BFGS, then rounds of trust-region Newton-Krylov (Hessian products by central differences
of the gradient), with L-BFGS taking the next round whenever one did not raise the bound. After
every round the certificate of :mod:`.certificate` is computed (its s(D) polished once the gap is
within POLISH_GAP, and at the end); the best point and the best bound are kept.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.optimize

from ..threads import at_most
from .basis import subset_dim, to_residual
from .certificate import certificate
from .deadline import Timed, TimeLimit, past
from .problem import MarginalProblem

log = logging.getLogger(__name__)

__all__ = [
    "Solution",
    "folded_view",
    "folded_tau",
    "start_from_residual_plan",
    "filled_correlation",
    "least_mixed",
    "truncated_newton",
    "optimise",
    "DEFAULT_TARGET_GAP",
    "JITTER",
]

DEFAULT_TARGET_GAP = 1e-4
SINGLE_THREAD_CELLS = 400  # views up to this many cells are optimised with single-threaded BLAS
# scipy's trust-krylov (trlib) keeps its Lanczos basis: min(1e9 / n, 2 n) + 1 vectors of n parameters, up to 8 GB
# (Adult's described workload, 44 views of up to 400 cells, ~7 M parameters: peak 8.5 GB against 3.6 GB by L-BFGS
# alone); above this many bytes "auto" takes the truncated Newton steps instead (a few vectors)
KRYLOV_BASIS_BYTES = 1 << 30
MAX_STALLS = 4  # rounds in a row without progress before the optimiser stops
POLISH_GAP = (
    0.05  # a round whose heuristic gap is at most this is certified again with s(D) polished (certificate.maxcut_upper)
)
JITTER = 1e-9  # C <- (1 - JITTER) C + JITTER I at the start: a full-rank factor for every view


@dataclass
class Solution:
    """Per block (one per view, or one shared when tied) its correlation factor ``f`` (C = f f^T)
    and share ``t`` (X_g = t C), the residual-only share ``tau``, the objective and the certificate."""

    factors: list[np.ndarray]
    shares: np.ndarray
    tau: float
    objective: float
    lower_bound: float
    iterations: int
    seconds: float
    history: list[tuple[int, float, float]]

    @property
    def gap(self) -> float:
        return (self.objective - self.lower_bound) / self.objective if self.objective > 0 else 0.0


def _normalise_rows(r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    norms = np.linalg.norm(r, axis=1)
    return r / norms[:, None], norms


def _embed_residual(problem: MarginalProblem, g: tuple[int, ...], s: tuple[int, ...], ys: np.ndarray) -> np.ndarray:
    """(n_g / n_S) embed(Y_S) in g's residual coordinates: Y_S (over S's coordinates) placed at the
    coordinates of g whose attributes outside S are constant."""
    sizes_all = problem.workload.schema.sizes
    gs = tuple(sizes_all[a] for a in g)
    ss = tuple(sizes_all[a] for a in s)
    cells_g = math.prod(gs)
    multi = np.array(np.unravel_index(np.arange(cells_g), gs))
    inside = [l for l, a in enumerate(g) if a in s]
    outside = [l for l, a in enumerate(g) if a not in s]
    pos = np.flatnonzero(np.all(multi[outside] == 0, axis=0)) if outside else np.arange(cells_g)
    sidx = np.ravel_multi_index(tuple(multi[inside][:, pos]), ss) if inside else np.zeros(len(pos), dtype=np.int64)
    out = np.zeros((cells_g, cells_g))
    out[np.ix_(pos, pos)] = ys[np.ix_(sidx, sidx)] * (cells_g / math.prod(ss))
    return out


def folded_view(problem: MarginalProblem, plan, k: int) -> np.ndarray:
    """The ``qs`` plan (beta = 1) folded into marginal view k (block k when tied): each measured
    residual view's mechanism X_S / sigma_S^2 split equally over the marginal views containing S,
    so the Gram over the domain is the plan's. Its Gram Y in the view's full residual coordinates."""
    sizes_all = problem.workload.schema.sizes
    index = {s: i for i, s in enumerate(plan.views)}
    v = problem.views[k]
    y = np.zeros((v.cells, v.cells))
    for r in range(len(v.attrs) + 1):
        for s in _subsets(v.attrs, r):
            i = index.get(s)
            if i is None or not np.isfinite(plan.allocation.sigma2[i]) or subset_dim(sizes_all, s) == 0 and s:
                continue
            count = sum(1 for w in problem.views if set(s) <= set(w.attrs))
            ss = tuple(sizes_all[a] for a in s)
            xs = plan.solutions[plan.keys[i]].mechanism.dense_x() / plan.allocation.sigma2[i]
            yr = to_residual(to_residual(np.atleast_2d(xs), ss).T, ss).T if s else np.atleast_2d(xs)
            y += _embed_residual(problem, v.attrs, s, yr) / count
    return y


def folded_tau(problem: MarginalProblem, plan) -> float:
    """The cost of the ``qs`` plan's mechanisms on the residual-only subsets (beta = 1)."""
    if not problem.residual_only:
        return 0.0
    index = {s: i for i, s in enumerate(plan.views)}
    a = plan.allocation
    return float(
        sum((1.0 if a.costs is None else a.costs[index[s]]) / a.sigma2[index[s]] for s in problem.residual_only)
    )


def filled_correlation(x: np.ndarray) -> tuple[np.ndarray, float]:
    """(C, t) for a cell-basis Gram x: its diagonal filled up to its largest entry t (a PSD term: no
    extra cost, f does not increase), divided by t (unit diagonal)."""
    x = (x + x.T) / 2
    t = float(np.diag(x).max())
    return (x + np.diag(t - np.diag(x))) / t, t


def least_mixed(
    problem: MarginalProblem,
    corrs: list[np.ndarray],
    shares,
    tau: float,
    mixes=(JITTER, 1e-8, 1e-7, 1e-6),
    deadline: float | None = None,
) -> tuple[float, list[np.ndarray] | None, list[np.ndarray] | None]:
    """(f, mixed correlations, their Cholesky factors) of unit-diagonal correlations ``corrs`` (one
    per block, block k's Gram shares[k] C_k) mixed with a little of the identity (the unit diagonal,
    so the cost, kept): an optimum singular to rounding needs it to be factored; the least
    objective over ``mixes`` is kept (it grows with the mix once finite). (inf, None, None) when no
    mix gives a finite objective. Past ``deadline``, the first finite mix is kept."""
    best = (math.inf, None, None)
    for mix in mixes:
        if math.isfinite(best[0]) and past(deadline):
            break
        try:
            cs = [(1 - mix) * c + mix * np.eye(len(c)) for c in corrs]
            fs = [np.linalg.cholesky(c) for c in cs]
            f = problem.evaluate(
                [problem.residual_gram(k, t * c) for k, (t, c) in enumerate(zip(shares, cs))], tau, want_grad=False
            ).f
        except np.linalg.LinAlgError:
            continue
        if f < best[0]:
            best = (f, cs, fs)
        elif math.isfinite(best[0]):
            break
    return best


def start_from_residual_plan(problem: MarginalProblem, plan) -> tuple[list[np.ndarray], np.ndarray, float]:
    """The ``qs`` plan folded into the family (:func:`folded_view`) as the descent's start: each
    view's Gram with its cell diagonal filled up to its largest entry (no extra cost; f does not
    increase), so no view costs more than its parts. Returns (correlation factors, shares t, tau),
    shares and tau summing to 1."""
    tau = folded_tau(problem, plan)
    factors, shares = [], []
    for k in range(1 if problem.tied else len(problem.views)):
        c, t = filled_correlation(problem.cell_gram(k, folded_view(problem, plan, k)))
        c = (1 - JITTER) * c + JITTER * np.eye(len(c))
        factors.append(np.linalg.cholesky(c))
        shares.append(t)
    shares = np.array(shares)
    mult = len(problem.views) if problem.tied else 1
    total = float(shares.sum() * mult + tau)
    return factors, shares / total, tau / total


def _subsets(attrs, r):
    return itertools.combinations(attrs, r)


class _Param:
    """Unconstrained parameters (square factors R per block, share logits) <-> (C, t, tau)."""

    def __init__(self, problem: MarginalProblem, factors, shares, tau):
        self.p = problem
        self.sizes = [f.shape for f in factors]
        self.mult = len(problem.views) if problem.tied else 1
        self.has_tau = bool(problem.residual_only)
        groups = list(np.asarray(shares) * self.mult) + ([tau] if self.has_tau else [])
        self.theta0 = np.log(np.maximum(groups, 1e-300))
        self.x0 = np.concatenate([f.ravel() for f in factors] + [self.theta0])
        self.mu = 0.0

    def unpack(self, x):
        out, o = [], 0
        for shp in self.sizes:
            n = shp[0] * shp[1]
            out.append(x[o : o + n].reshape(shp))
            o += n
        theta = x[o:]
        e = np.exp(theta - theta.max())
        s = e / e.sum()
        return out, s

    def point(self, x):
        rs, s = self.unpack(x)
        fs = [_normalise_rows(r) for r in rs]
        t = s[: len(rs)] / self.mult
        tau = float(s[-1]) if self.has_tau else 0.0
        return rs, fs, s, t, tau

    def fun(self, x):
        if not np.all(np.isfinite(x)):
            return math.inf, np.zeros_like(x)
        rs, fs, s, t, tau = self.point(x)
        ys, cs = [], []
        for k, (f, _) in enumerate(fs):
            c = f @ f.T
            cs.append(c)
            ys.append(self.p.residual_gram(k, t[k] * c))
        try:
            ev = self.p.evaluate(ys, tau)
        except (np.linalg.LinAlgError, ValueError):  # a trial point off the domain (not PD, or overflowed)
            return math.inf, np.zeros_like(x)
        if not math.isfinite(ev.f):
            return math.inf, np.zeros_like(x)
        value = ev.f
        grad_parts, dgroups = [], []
        for k, (f, norms) in enumerate(fs):
            gam = self.p.cell_gram(k, ev.grads[k])  # df/dX_k in the cell basis
            gam = (gam + gam.T) / 2
            dt = float(np.sum(gam * cs[k]))
            dc = t[k] * gam
            if self.mu > 0:  # barrier -mu * views * logdet C_k
                try:
                    ch = np.linalg.cholesky(cs[k])
                except np.linalg.LinAlgError:
                    return math.inf, np.zeros_like(x)
                value -= self.mu * self.mult * 2 * float(np.log(np.diag(ch)).sum())
                cinv = scipy.linalg.cho_solve((ch, True), np.eye(len(ch)))
                dc = dc - self.mu * self.mult * cinv
            gf = 2 * (dc @ f)
            gr = (gf - np.sum(gf * f, axis=1, keepdims=True) * f) / norms[:, None]
            grad_parts.append(gr.ravel())
            dgroups.append(dt / self.mult)
        if self.has_tau:
            dgroups.append(ev.dtau)
        dg = np.array(dgroups)
        dtheta = s * (dg - float(np.dot(s, dg)))
        return value, np.concatenate(grad_parts + [dtheta])


def optimise(
    problem: MarginalProblem,
    factors: list[np.ndarray],
    shares: np.ndarray,
    tau: float,
    *,
    target_gap: float = DEFAULT_TARGET_GAP,
    max_iterations: int = 20000,
    round_iterations: int = 1000,
    max_seconds: float = 3600.0,
    mu_factor: float = 0.1,
    method: str = "auto",
    newton_iterations: int = 30,
    cg_iterations: int = 40,
    mu_start: float = 1e-3,
) -> Solution:
    """Descend from (factors, shares, tau) until the certified gap is at most ``target_gap`` (or the
    iteration or time limit); the best point seen is returned with its certificate."""
    # small blocks: threaded BLAS only adds overhead (and on a loaded machine, a lot of it)
    small = max(v.cells for v in problem.views) <= SINGLE_THREAD_CELLS and problem.lower_dim <= 4 * SINGLE_THREAD_CELLS
    with at_most(1 if small else None):
        return _optimise(
            problem,
            factors,
            shares,
            tau,
            target_gap,
            max_iterations,
            round_iterations,
            max_seconds,
            mu_factor,
            method,
            newton_iterations,
            cg_iterations,
            mu_start,
        )


@dataclass
class _Result:
    x: np.ndarray
    nit: int
    message: str


def truncated_newton(fun, x, iterations: int, cg_iterations: int) -> _Result:
    """Newton steps with the Hessian applied by central differences of the gradient, the Newton
    system solved by at most ``cg_iterations`` conjugate-gradient steps (stopped on negative
    curvature), and a backtracking (Armijo) line search."""
    f, g = fun(x)
    nit = 0
    for nit in range(1, iterations + 1):
        gn = float(np.linalg.norm(g))
        if not math.isfinite(f) or gn == 0:
            break

        def hv(p):
            h = 1e-6 * max(1.0, float(np.linalg.norm(x))) / max(float(np.linalg.norm(p)), 1e-300)
            return (fun(x + h * p)[1] - fun(x - h * p)[1]) / (2 * h)

        d = np.zeros_like(x)
        r = -g
        p = r.copy()
        rr = float(r @ r)
        eta = min(0.5, math.sqrt(gn / max(abs(f), 1e-300)))
        for j in range(cg_iterations):
            hp = hv(p)
            php = float(p @ hp)
            if php <= 0:
                if j == 0:
                    d = -g
                break
            a = rr / php
            d = d + a * p
            r = r - a * hp
            rr_new = float(r @ r)
            if math.sqrt(rr_new) <= eta * gn:
                break
            p = r + (rr_new / rr) * p
            rr = rr_new
        slope = float(g @ d)
        if slope >= 0:
            d, slope = -g, -gn * gn
        t = 1.0
        for _ in range(40):
            fn, gnew = fun(x + t * d)
            if math.isfinite(fn) and fn <= f + 1e-4 * t * slope:
                break
            t *= 0.5
        else:
            return _Result(x, nit - 1, "line search failed")
        x, f, g = x + t * d, fn, gnew
    return _Result(x, nit, "iterations")


def _second_order(n: int) -> str:
    """ "auto"'s second-order round for n parameters: trust-krylov while its Lanczos basis fits in
    KRYLOV_BASIS_BYTES, truncated Newton ("newton") beyond."""
    return "trust-krylov" if (min(int(1e9 / max(n, 1)), 2 * n) + 1) * n * 8 <= KRYLOV_BASIS_BYTES else "newton"


def _optimise(
    problem,
    factors,
    shares,
    tau,
    target_gap,
    max_iterations,
    round_iterations,
    max_seconds,
    mu_factor,
    method,
    newton_iterations,
    cg_iterations,
    mu_start,
) -> Solution:
    t0 = time.perf_counter()
    par = _Param(problem, factors, shares, tau)
    x = par.x0
    history = []
    it = 0
    best = None
    mu = None
    stalls = 0
    while True:
        _, fs, s, t, tau_ = par.point(x)
        obj, low = certificate(problem, [f for f, _ in fs], t, tau_, deadline=t0 + max_seconds)
        if (obj - low) > target_gap * obj and (
            obj - low
        ) <= POLISH_GAP * obj:  # near: the diagonal heuristics may be what is left
            obj, low = certificate(problem, [f for f, _ in fs], t, tau_, polish=True, deadline=t0 + max_seconds)
        # any point's bound bounds the optimum: keep the best bound and the best point
        if best is None or obj < best[0]:
            best = (obj, max(low, best[1]) if best else low, x.copy())
        else:
            best = (best[0], max(best[1], low), best[2])
        lowb = best[1]
        gap = (best[0] - lowb) / best[0]
        history.append((it, best[0], lowb))
        log.info(
            "qsplus: iteration %d, objective %.8g, bound %.8g, gap %.2e, %.1f s",
            it,
            best[0],
            lowb,
            gap,
            time.perf_counter() - t0,
        )
        if gap <= target_gap or it >= max_iterations or time.perf_counter() - t0 > max_seconds:
            break
        # The barrier weight falls only after a round that raised the bound (its point was centred
        # enough to certify); otherwise the same weight gets another round by the other method (a
        # Newton-Krylov round with finite-difference Hessian products can fail to centre where
        # L-BFGS still does). MAX_STALLS rounds in a row that improve neither the point nor the
        # bound end the descent with the best point seen.
        if mu is None:
            mu = mu_start * best[0] / sum(v.cells for v in problem.views)
            mu_floor = 1e-15 * mu
            newton_turn = False
        else:
            prev_obj, prev_low = history[-2][1], history[-2][2]
            raised = lowb - prev_low > 1e-13 * best[0]
            stalls = 0 if raised or prev_obj - best[0] > 1e-13 * best[0] else stalls + 1
            if stalls >= MAX_STALLS:
                log.info("qsplus: %d rounds without progress, stopping at gap %.2e", stalls, gap)
                break
            if raised:
                mu = max(mu * mu_factor, mu_floor)
                newton_turn = True
            else:
                newton_turn = not newton_turn
        par.mu = mu
        how = method if method != "auto" else ((_second_order(x.size)) if newton_turn else "lbfgs")
        fun = Timed(par.fun, t0 + max_seconds)
        try:
            if how == "lbfgs":
                r = scipy.optimize.minimize(
                    fun,
                    x,
                    jac=True,
                    method="L-BFGS-B",
                    options={"maxiter": round_iterations, "maxcor": 30, "ftol": 1e-14, "gtol": 1e-10},
                )
            elif how == "newton":
                r = truncated_newton(fun, x, newton_iterations, cg_iterations)
            else:

                def hessp(z, p, _f=fun):
                    h = 1e-6 * max(1.0, float(np.linalg.norm(z))) / max(float(np.linalg.norm(p)), 1e-300)
                    return (_f(z + h * p)[1] - _f(z - h * p)[1]) / (2 * h)

                r = scipy.optimize.minimize(
                    fun,
                    x,
                    jac=True,
                    hessp=hessp,
                    method=how,
                    options={"maxiter": newton_iterations, "xtol": 1e-12}
                    if how == "Newton-CG"
                    else {"maxiter": newton_iterations, "gtol": 1e-10},
                )
        except TimeLimit:  # the budget ran out mid-round: certify the lowest point it evaluated, then stop
            log.info("qsplus: the time budget (%.0f s) ran out inside a %s round", max_seconds, how)
            r = _Result(fun.best_x if fun.best_x is not None else x, 0, "time budget")
        log.debug("round: mu %.3g, %d iterations, %s", mu, r.nit, r.message)
        it += int(r.nit)
        if not np.all(np.isfinite(r.x)):
            break
        x = r.x
        # re-normalise the factors' rows (the parametrisation is scale-free per row)
        rs, _ = par.unpack(x)
        o = 0
        for rr in rs:
            n = rr.size
            x[o : o + n] = _normalise_rows(rr)[0].ravel()
            o += n
    _, fs, s, t, tau_ = par.point(best[2])
    low = history[-1][2]
    if (best[0] - low) > target_gap * best[0] and not past(t0 + max_seconds):  # the best point's bound, polished once
        low = max(low, certificate(problem, [f for f, _ in fs], t, tau_, polish=True)[1])
    return Solution([f for f, _ in fs], t, tau_, best[0], min(low, best[0]), it, time.perf_counter() - t0, history)
