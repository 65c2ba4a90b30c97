"""The restricted descent: every marginal view's top kept to its workload's span, for problems
the symmetric reduction does not cover.

The lemma of :mod:`.symmetric` holds for any marginal view g, tied or not: split g's residual
coordinates into R (its lower residuals and the range of its top's workload Gram G_tt,g) and C
(the rest of its top). C carries no query (G is PSD, so G_tt,g = 0 on C means G vanishes on C's
rows) and no other view touches g's top, so the objective depends on Y_g only through its Schur
complement S on R; Y' = R S R^T has the same objective and Y_g - Y' is PSD, so no cell of g costs
more. The family's optimum is therefore the optimum over Grams with range in R, and any bound on
that restricted problem bounds the family. On the paper's Table 3 schemas with ``affine:2`` or
``abs:2`` pairs this keeps a few hundred coordinates of a pair's thousands (CPS income x age: 147
of its 4,851 top coordinates), so every pair gets a marginal mechanism.

The restricted problem is a :class:`~.problem.MarginalProblem` whose views carry their ``basis``
(cells x kept coordinates); :func:`restrict` builds it. :func:`descend` minimises
log f(Y) + (1 + mu dims) log c(Y, tau) - mu (sum_g log det Y_g + log tau) over Y_g = L_g L_g^T
(f: the total variance, homogeneous of degree -1; c: sum over views of a log-sum-exp of the cells'
costs diag(B_g Y_g B_g^T), plus the residual-only mechanisms' share tau = exp(theta); the whole is
scale-free) by L-BFGS, then truncated Newton steps, at temperatures and barrier weights falling
together (relative 1e-2 to 1e-7), from the ``qs`` plan folded into the family and restricted (its
Schur complement: the same objective at no more cost). The barrier keeps each point central, so
that minus its gradient is at most (f / c) B^T Diag(p) B (p: the log-sum-exp's weights): a dual whose
bound (:func:`bound`: the weak duality of :mod:`.certificate` with s(D_g) on the kept subspace,
``projected`` = minus the gradient in the kept coordinates, no cells x cells matrix formed) is
within about the barrier's weight of the point. Without it, a near-optimal but uncentred point's
gradient bounded [4]^2 ``affine:2`` only to 8e-3 with its objective at the optimum. After each
temperature, Newton steps with the active cells held equal (:mod:`.active_newton`) take the best
point the last mile: the gradient's dual is first-order in the point's error, so the descent alone
stalls (CPS affine: 7.2e-3 after 20 minutes), while Newton steps on a log-det barrier falling from
the temperature's certify Table 3's problems far below 1e-4 (BENCHMARKS.md).
:func:`cell_factors` turns the optimum into the plan's unit-diagonal factors (the cell diagonal
filled up to the view's cost, which never raises the objective).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, replace

import numpy as np
import scipy.linalg
import scipy.optimize

from .active_newton import UnionSpace, newton_steps
from .basis import view_basis
from .certificate import sdp_upper
from .deadline import Timed, TimeLimit, check_deadline, past
from .optimize import JITTER, filled_correlation, folded_tau, folded_view, least_mixed, truncated_newton
from .problem import MarginalProblem, MarginalView, WorkloadBlock

log = logging.getLogger(__name__)

__all__ = [
    "restrict",
    "kept_tops",
    "restricted_gram",
    "restricted_start",
    "descend",
    "bound",
    "cell_factors",
    "RestrictedPoint",
    "kept_fraction",
    "TEMPERATURES",
]

KEEP_RTOL = 1e-10  # eigenvalues of a top's workload Gram above this fraction of its largest span the kept top
TEMPERATURES = (1e-3, 1e-4, 1e-5, 1e-6, 1e-7)  # of each view's largest cell cost, one L-BFGS run each
NEWTON_BELOW = 1e-5  # temperatures from this one on end with truncated Newton steps after L-BFGS
DELTAS = (0.0, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4)  # regularised copies of the point whose gradients are tried as duals


def _kept_top(gtt: np.ndarray) -> np.ndarray:
    """Orthonormal columns spanning the range of a top's workload Gram (at least one column)."""
    w, v = np.linalg.eigh((gtt + gtt.T) / 2)
    keep = w > KEEP_RTOL * max(float(w.max(initial=0.0)), 1e-300)
    if not keep.any():  # no query on this top: one direction keeps the view's shapes non-empty
        keep[-1] = True
    return v[:, keep]


def kept_tops(problem: MarginalProblem, deadline: float | None = None) -> list[np.ndarray]:
    """Per view, the kept top's columns Rt (computed once per problem: an eigendecomposition of
    each top's workload Gram, a minute at 10,000 cells; views sharing queries share it).
    :class:`~.optimize.TimeLimit` once ``deadline`` passes (checked between views)."""
    cached = getattr(problem, "_kept_tops", None)
    if cached is None:
        by_gram: dict[int, np.ndarray] = {}
        for v in problem.views:
            if id(v.gtt) not in by_gram:
                check_deadline(deadline)
                by_gram[id(v.gtt)] = _kept_top(v.gtt)
        cached = [by_gram[id(v.gtt)] for v in problem.views]
        problem._kept_tops = cached
    return cached


def kept_fraction(problem: MarginalProblem, deadline: float | None = None) -> float:
    """Kept top coordinates over all top coordinates of the (untied) problem's views (``deadline``:
    as for :func:`kept_tops`)."""
    tops = sum(len(v.top) for v in problem.views)
    return sum(rt.shape[1] for rt in kept_tops(problem, deadline)) / max(tops, 1)


def restrict(problem: MarginalProblem, deadline: float | None = None) -> tuple[MarginalProblem, list[np.ndarray]]:
    """(The restricted problem, per view the kept top's columns Rt in the view's top coordinates).

    Every view's coordinates become [its low positions, Rt's columns]; its ``basis`` holds their
    cell-basis vectors; the workload blocks are compressed to the same coordinates. Untied problems
    only (a tied one goes to :mod:`.symmetric`). ``deadline``: as for :func:`kept_tops`."""
    if problem.tied:
        raise ValueError("restrict() is for untied problems (tied all-pairs problems have the symmetric reduction)")
    kept = kept_tops(problem, deadline)
    views = []
    for v, rt in zip(problem.views, kept):
        nl, k = len(v.low), rt.shape[1]
        u = view_basis(v.sizes)
        basis = np.concatenate([u[:, v.low], u[:, v.top] @ rt], axis=1)
        views.append(replace(v, top=nl + np.arange(k), low=np.arange(nl), gtt=rt.T @ v.gtt @ rt, basis=basis))
    blocks = []
    for b in problem.blocks:
        cols = [len(b.low_pos)] + [kept[o].shape[1] for o, _ in b.tops]
        p = np.zeros((b.w.shape[0], sum(cols)))
        p[b.low_pos, np.arange(len(b.low_pos))] = 1.0
        tops, off = [], len(b.low_pos)
        for (o, rows), k in zip(b.tops, cols[1:]):
            p[rows, off : off + k] = kept[o]
            tops.append((o, off + np.arange(k)))
            off += k
        w = p.T @ b.w @ p
        blocks.append(WorkloadBlock(b.attrs, (w + w.T) / 2, np.arange(len(b.low_pos)), b.low_glob, tops))
    return replace(problem, views=views, blocks=blocks), kept


@dataclass
class RestrictedPoint:
    """A point of the restricted problem: per view its Gram Y_g (kept coordinates), the residual-only
    share tau, scaled so that the views' largest cell costs and tau sum to 1; its objective f and
    certified ``lower_bound`` (on the whole family's optimum)."""

    ys: list[np.ndarray]
    tau: float
    objective: float = math.inf
    lower_bound: float = 0.0

    @property
    def gap(self) -> float:
        return (self.objective - self.lower_bound) / self.objective if self.objective > 0 else 0.0


def _view_cost(view: MarginalView, y: np.ndarray) -> float:
    """The largest cell cost of Y in a restricted view: max diag(B Y B^T)."""
    return float(np.einsum("ij,jk,ik->i", view.basis, y, view.basis).max())


def _cell_costs(rp: MarginalProblem, ys) -> np.ndarray:
    return np.array([_view_cost(v, y) for v, y in zip(rp.views, ys)])


def _normalised(rp: MarginalProblem, ys, tau) -> tuple[list[np.ndarray], float]:
    total = float(_cell_costs(rp, ys).sum()) + tau
    return [y / total for y in ys], tau / total


def restricted_gram(view: MarginalView, rt: np.ndarray, y: np.ndarray) -> np.ndarray:
    """A view's Gram ``y`` (full residual coordinates) on its kept coordinates [low, rt's columns]:
    the Schur complement eliminating the rest of its top, (P^T y^-1 P)^-1 for P the kept
    coordinates' columns (the same objective, no cell costs more). ``y`` + 1e-12 of its largest
    diagonal entry times I is factored (qs's top mechanisms may be singular): one Cholesky factor,
    never the rest of the top's basis (at 10,000 cells an eigendecomposition of it took minutes)."""
    n = y.shape[0]
    p = np.zeros((n, len(view.low) + rt.shape[1]))
    p[view.low, np.arange(len(view.low))] = 1.0
    p[view.top, len(view.low) :] = rt
    eps = 1e-12 * max(float(np.diag(y).max(initial=0.0)), 1e-300)
    ch = scipy.linalg.cho_factor((y + y.T) / 2 + eps * np.eye(n), lower=True)
    w = scipy.linalg.solve_triangular(ch[0], p, lower=True)  # L^-1 P: P^T y^-1 P = W^T W
    inner = w.T @ w
    out = scipy.linalg.cho_solve(scipy.linalg.cho_factor((inner + inner.T) / 2), np.eye(len(inner)))
    return (out + out.T) / 2


def restricted_start(
    problem: MarginalProblem, rp: MarginalProblem, kept: list[np.ndarray], residual_plan, deadline: float | None = None
) -> RestrictedPoint:
    """The ``qs`` plan folded into the family (:func:`.optimize.folded_view`, one view at a time)
    and restricted: each view's Schur complement on its kept coordinates (the same objective, no
    more cost), scaled to cost 1. :class:`~.optimize.TimeLimit` once ``deadline`` passes."""
    ys = []
    for k, (v, rt) in enumerate(zip(problem.views, kept)):
        check_deadline(deadline)
        yrr = restricted_gram(v, rt, folded_view(problem, residual_plan, k))
        # a positive definite start (the descent factors it): a little of the identity, JITTER of the cost
        ys.append(yrr + JITTER * _view_cost(rp.views[k], yrr) * np.eye(len(yrr)))
    ys, tau = _normalised(rp, ys, folded_tau(problem, residual_plan))
    return RestrictedPoint(ys, tau)


class _Smoothed:
    """log f + log c over x = [L_g flattened..., theta]: Y_g = L_g L_g^T, tau = exp(theta), c the
    views' log-sum-exp cell costs (temperature ``temps[g]``) plus tau (scale-free: f has degree -1)."""

    def __init__(self, rp: MarginalProblem):
        self.rp = rp
        self.dims = [v.dim for v in rp.views]
        self.has_tau = bool(rp.residual_only)
        self.temps = np.ones(len(self.dims))
        self.mu = 0.0  # weight of the barrier -mu sum_g log det Y_g
        self.anchors = None  # per view L0: the parameters are Z_g with L_g = L0_g Z_g (a preconditioner)

    def pack(self, ys, tau) -> np.ndarray:
        """Parameters at (ys, tau), anchored there: every Z_g = I."""
        self.anchors = []
        for y in ys:
            jitter = 1e-12 * max(float(np.trace(y)) / max(len(y), 1), 1e-300)
            self.anchors.append(np.linalg.cholesky((y + y.T) / 2 + jitter * np.eye(len(y))))
        parts = [np.eye(n).ravel() for n in self.dims]
        if self.has_tau:
            parts.append(np.array([math.log(max(tau, 1e-300))]))
        return np.concatenate(parts)

    def unpack(self, x) -> tuple[list[np.ndarray], float]:
        ls, o = [], 0
        for k, n in enumerate(self.dims):
            ls.append(self.anchors[k] @ x[o : o + n * n].reshape(n, n))
            o += n * n
        tau = math.exp(float(x[o])) if self.has_tau else 0.0
        return ls, tau

    def point(self, x) -> tuple[list[np.ndarray], float]:
        ls, tau = self.unpack(x)
        return [l @ l.T for l in ls], tau

    @property
    def size(self) -> int:
        """The barrier's number of coordinates (every view's, and tau's)."""
        return sum(self.dims) + (1 if self.has_tau else 0)

    @staticmethod
    def _smax(basis: np.ndarray, l: np.ndarray, temp: float) -> tuple[float, np.ndarray, np.ndarray]:
        """(log-sum-exp of the cell costs diag(B L L^T B^T) at ``temp``, its cell weights, B L)."""
        m = basis @ l
        cost = np.einsum("ij,ij->i", m, m)
        top = float(cost.max())
        e = np.exp((cost - top) / temp)
        z = float(e.sum())
        return top + temp * math.log(z), e / z, m

    def weights(self, x) -> list[np.ndarray]:
        """Per view the log-sum-exp's cell weights at x: at a central point minus the gradient of f
        is at most (f / c) B^T Diag(weights) B, so they are the certificate's natural multipliers."""
        return [self._smax(v.basis, l, temp)[1] for v, l, temp in zip(self.rp.views, self.unpack(x)[0], self.temps)]

    def __call__(self, x):
        if not np.all(np.isfinite(x)):
            return math.inf, np.zeros_like(x)
        ls, tau = self.unpack(x)
        try:
            ev = self.rp.evaluate([l @ l.T for l in ls], tau)
        except (np.linalg.LinAlgError, ValueError):
            return math.inf, np.zeros_like(x)
        f = ev.f
        if not math.isfinite(f) or f <= 0:
            return math.inf, np.zeros_like(x)
        c, dcs = tau, []
        for v, l, temp in zip(self.rp.views, ls, self.temps):
            smax, p, m = self._smax(v.basis, l, temp)
            c += smax
            dcs.append(v.basis.T @ (p[:, None] * m))  # (1/2) d smax / dL
        # the barrier -mu (sum_g log det Y_g + log tau - size log c) is scale-free like f c, and keeps
        # the point central: its gradient is then a tight dual (:func:`bound`)
        wc = 1.0 + self.mu * self.size
        grads = [2 * (((gy + gy.T) / 2) @ l) / f + wc * 2 * dc / c for l, gy, dc in zip(ls, ev.grads, dcs)]
        value = math.log(f) + wc * math.log(c)
        if self.mu > 0:
            for k, l in enumerate(ls):
                sign, logdet = np.linalg.slogdet(l)
                if sign == 0 or not math.isfinite(logdet):
                    return math.inf, np.zeros_like(x)
                value -= self.mu * 2 * logdet
                grads[k] = grads[k] - self.mu * 2 * np.linalg.inv(l).T
        grads = [(a.T @ g).ravel() for a, g in zip(self.anchors, grads)]  # d/dZ = L0^T d/dL
        if self.has_tau:
            value -= self.mu * math.log(tau)
            grads.append(np.array([tau * (ev.dtau / f + wc / c) - self.mu]))
        return value, np.concatenate(grads)


def descend(
    rp: MarginalProblem,
    start: RestrictedPoint,
    *,
    max_seconds: float,
    target_gap: float,
    iterations_per_temperature: int = 2000,
    temperatures=TEMPERATURES,
    newton_iterations: int = 20,
    cg_iterations: int = 40,
    barrier: float = 1.0,
    active_newton: bool = True,
) -> RestrictedPoint:
    """L-BFGS on log f + log c from ``start`` at falling temperatures (module docstring), each
    temperature's point scaled to cost 1 and certified by :func:`bound`, then (``active_newton``)
    Newton steps with its active cells held equal (:func:`.active_newton.newton_steps`) from the
    best point, certified too; the best point and the best bound are kept (every bound bounds the
    same optimum). Stops once the gap is at most ``target_gap`` or ``max_seconds`` have passed
    (checked inside every phase: the point certified last is returned)."""
    t0 = time.perf_counter()
    deadline = t0 + max_seconds
    obj = _Smoothed(rp)
    union = UnionSpace(rp) if active_newton else None
    best = bound(rp, start, deadline=deadline)
    log.info(
        "qsplus restricted: start objective %.10g, bound %.10g, gap %.2e", best.objective, best.lower_bound, best.gap
    )
    x = obj.pack(best.ys, best.tau)
    for rel in temperatures:
        if best.gap <= target_gap or time.perf_counter() > deadline:
            break
        ys, tau = obj.point(x)
        obj.temps = rel * np.maximum(_cell_costs(rp, ys), 1e-300)
        obj.mu = rel * barrier / obj.size  # the barrier's share of the gap: about rel

        fun = Timed(obj, deadline)
        try:
            res = scipy.optimize.minimize(
                fun,
                x,
                jac=True,
                method="L-BFGS-B",
                options={"maxiter": iterations_per_temperature, "maxcor": 30, "gtol": 1e-14, "ftol": 1e-16},
            )
            if np.all(np.isfinite(res.x)) and math.isfinite(res.fun):
                x = res.x
            nit, msg = res.nit, res.message
            if newton_iterations and rel <= NEWTON_BELOW:  # converged tightly: the certificate reads the gradient
                r = truncated_newton(fun, x, newton_iterations, cg_iterations)
                if np.all(np.isfinite(r.x)):
                    x = r.x
                nit, msg = nit + r.nit, f"{msg}; newton {r.message}"
        except TimeLimit:  # the lowest point the round evaluated is certified, then the descent stops
            nit, msg = -1, "time limit"
            if fun.best_x is not None and fun.best_value < math.inf:
                x = fun.best_x
        ys, tau = _normalised(rp, *obj.point(x))
        # s(D_g) polished at every temperature: the diagonal heuristics alone left 0.26 of CPS's
        # objective (its nine pairs of at most 700 cells, temperature 1e-2) where the polish left 0.019
        pt = bound(rp, RestrictedPoint(ys, tau), extra=obj.weights(x), polish=True, deadline=deadline)
        best = _better(best, pt)
        log.info(
            "qsplus restricted: temperature %.0e, %d iterations (%s), point %.10g, best %.10g, bound %.10g, "
            "gap %.2e, %.1f s",
            rel,
            nit,
            msg,
            pt.objective,
            best.objective,
            best.lower_bound,
            best.gap,
            time.perf_counter() - t0,
        )
        if nit < 0:
            break
        if union is not None and best.gap > target_gap and time.perf_counter() < deadline:
            best, union = _newton_last_mile(rp, best, union, deadline, t0, barrier=rel * barrier)
        x = obj.pack(best.ys, best.tau)
    return best


def _better(best: RestrictedPoint, pt: RestrictedPoint) -> RestrictedPoint:
    """The lower of two certified points, with the higher of their bounds (both bound the same optimum)."""
    low = max(best.lower_bound, pt.lower_bound)
    if pt.objective < best.objective:
        best = pt
    best.lower_bound = min(low, best.objective)
    return best


def _newton_last_mile(
    rp: MarginalProblem, best: RestrictedPoint, union: UnionSpace, deadline: float, t0: float, barrier: float
):
    """(The better of ``best`` and the point after Newton steps from it (their log-det barrier from
    ``barrier``, the descent's at the temperature it ends), certified; the union space, or None once
    the steps are not attempted or found no decrease on this problem)."""
    res = newton_steps(rp, best.ys, best.tau, max_seconds=deadline - time.perf_counter(), union=union, barrier=barrier)
    if res is None or not res.steps:  # too large, or no step found a decrease: the descent goes on without
        log.info("qsplus restricted: no Newton step%s", "" if res is None else f" ({res.message})")
        return best, None
    pt = bound(rp, RestrictedPoint(res.ys, res.tau), extra=res.weights, polish=True, deadline=deadline)
    best = _better(best, pt)
    log.info(
        "qsplus restricted: %d Newton steps (%s), point %.10g, best %.10g, bound %.10g, gap %.2e, %.1f s",
        res.steps,
        res.message,
        pt.objective,
        best.objective,
        best.lower_bound,
        best.gap,
        time.perf_counter() - t0,
    )
    return best, union


def bound(
    rp: MarginalProblem,
    point: RestrictedPoint,
    *,
    deltas=DELTAS,
    polish: bool = False,
    extra=None,
    deadline: float | None = None,
) -> RestrictedPoint:
    """``point`` (cost 1) with its objective and the best certified bound over ``deltas``: for the
    regularised point Y_g + delta t_g I (t_g: the view's cost), f_marg(Y') >= 2 f_marg - sum_g <D_g, Y'_g>
    for every feasible Y' (convexity, degree -1), D_g minus the gradient in the kept coordinates, and
    <D_g, Y'_g> <= t'_g s(D_g) with s over the kept subspace (:func:`.certificate.sdp_upper`); the
    residual-only part as in :func:`.certificate.certificate`. ``polish``: s(D_g) by
    :func:`.certificate.maxcut_upper` too, at the best delta only, from the view with the largest
    bound down while a view's heuristic bound exceeds the largest polished one (the maximum over
    views is what counts). Past ``deadline`` no further delta and no polish is tried (the first
    delta always is): the bound is the best of those computed, still valid."""
    costs = _cell_costs(rp, point.ys)
    lres = rp.residual_loss
    f0 = math.inf

    def at(delta: float, pol: bool) -> float:
        nonlocal f0
        ys = [y + delta * t * np.eye(len(y)) for y, t in zip(point.ys, costs)]
        ev = rp.evaluate(ys, point.tau)
        if delta == 0.0:
            f0 = ev.f  # the point's own objective
        if not math.isfinite(ev.f):
            return 0.0
        marg = ev.f - (lres / point.tau if lres > 0 and point.tau > 0 else 0.0)
        more = [() if extra is None or not np.any(extra[k] > 0) else (extra[k],) for k in range(len(ys))]
        heur = [
            sdp_upper(None, y, basis=v.basis, projected=-g, extra=more[k])
            for k, (v, y, g) in enumerate(zip(rp.views, ys, ev.grads))
        ]
        mu = max(heur, default=0.0)
        if pol:  # polish views from the largest bound down, while one could still be the maximum
            order = np.argsort(heur)[::-1]
            polished = 0.0
            for i, k in enumerate(order):
                if heur[k] <= polished:
                    break
                polished = max(
                    polished,
                    min(
                        heur[k],
                        sdp_upper(
                            None,
                            ys[k],
                            polish=True,
                            basis=rp.views[k].basis,
                            projected=-ev.grads[k],
                            extra=more[k],
                            deadline=deadline,
                        ),
                    ),
                )
            mu = polished
        if mu <= 0 or not math.isfinite(mu):
            return 0.0
        return (marg + math.sqrt(lres * mu)) ** 2 / mu

    best, best_delta = 0.0, None
    for i, delta in enumerate(deltas):
        if i and past(deadline):
            break
        low = at(delta, False)
        if low > best:
            best, best_delta = low, delta
    if polish and best_delta is not None and not past(deadline):
        best = max(best, at(best_delta, True))
    return RestrictedPoint(point.ys, point.tau, f0, min(best, f0))


def cell_factors(
    problem: MarginalProblem, rp: MarginalProblem, point: RestrictedPoint, deadline: float | None = None
) -> tuple[float, list[np.ndarray], np.ndarray]:
    """(Objective evaluated on the full problem, per view the unit-diagonal factor F of its cell
    Gram with the diagonal filled up to its cost, per view its cost t) of a restricted point: the
    plan's form (X_g = t_g F F^T), by :func:`.optimize.filled_correlation` and
    :func:`.optimize.least_mixed` (``deadline``: as there)."""
    filled = [filled_correlation(rp.cell_gram(k, y)) for k, y in enumerate(point.ys)]
    shares = np.array([t for _, t in filled])
    f, _, factors = least_mixed(problem, [c for c, _ in filled], shares, point.tau, deadline=deadline)
    if factors is None:
        raise np.linalg.LinAlgError("the restricted optimum has no finite filled point")
    return f, factors, shares
