"""Newton steps on a restricted problem with its active cells held at their view's cost: the certificate's last mile.

Near the optimum of a restricted problem (:mod:`.restricted`) whose views' Grams are positive
definite and whose cells all cost their view's largest cost (CPS's affine pairs: all 7,000 cells
within 4e-5 of their pair's cost after the descent), the problem is locally

    min f(Y, tau)  subject to  b_i^T Y_g b_i = t_g (the active cells i of view g),  sum_g t_g + tau = 1,

linear equalities in Y. :func:`newton_steps` takes Newton steps on it: each solves the
equality-constrained quadratic model by projected conjugate gradients in a per-view metric
(:mod:`.projected_cg`).

f and its derivatives are computed densely on the union of the views' coordinates (the lower
residuals and every view's kept top; CPS: 781): X = sum_g (1/n_g) P_g Y_g P_g^T, f = tr(G X^-1) +
L_res / tau, the gradient -(1/n_g) P_g^T Z P_g with Z = X^-1 G X^-1, and the Hessian's action
(1/n_g) P_g^T (X^-1 D Z + Z D X^-1) P_g on the embedded direction D. Why Newton: a gradient's dual is
first-order in the point's error while the objective is second-order, so first-order descents stall
(CPS affine: a certified gap of 7.2e-3 after 20 minutes of L-BFGS). The CG keeps its iterates on
the equalities by the residual update of Gould, Hribar and Nocedal (the multipliers are the sum of
the parts it takes out).

The cone is kept by a barrier: the steps minimise f - mu sum_g log det Y_g, mu falling by tenths from
the descent's last barrier (its share of the gap, about the temperature) to 1e-9 each time the point
is centred, the step held a fraction TO_BOUNDARY of the way to the cone's boundary; the metric's
root then has eigenvalues lambda / (lambda + mu / c)^1/2, between f's curvature and the barrier's.
At a centred point minus f's gradient is the cells' multipliers less mu Y^-1, a dual the
certificate reads to about mu: CPS affine from its first temperature, 8 steps to 3.5e-6, where
steps projected back onto the cone crushed an eigen-direction of income x age to 1e-17 of its
largest, which projected CG (its metric scales each direction by its eigenvalue) could not revive,
and the certificate stood at 3.7e-4. CG stops early too, once its residual is below CG_ENOUGH of the
barrier's share (Loans' 400-cell family: 11-33 iterations a step instead of 400).

The step stops where a free cell reaches its view's cost (cells and costs are linear in Y). Each
step first settles its active set on its quadratic model (at most BLOCKING_ROUNDS directions): the
free cells that would pass their cost within the full step are held, the held cells whose multiplier
comes out negative released, and the direction recomputed. The next step starts from the settled
set (and the cells a step stopped at): the descent's cells are only near their cost, so the first
step holds every cell within ACTIVE_RTOL of it, but re-holding those at every step pulled the cells
just released back up to their cost (CPS abs: the active set alternated 6,955 <-> 6,963 of 7,000 with
short steps and positive models, certified 2.2e-4; settled at 6,949, full steps, 4.4e-6). Loans'
400-cell family as its authors ran it, from the first temperature: the cells that would pass at once
only (BLOCKED 1e-3) left steps of 0.002-0.006, each adding a few per cent of the cells; all of them:
0.8, then full steps, certified 6.4e-6 in 8 steps.
Without a barrier (``barrier`` 0) a step that leaves the cone is projected back onto it (eigenvalues
at least CONE_FLOOR of the point's smallest). The active set, the cone and the step are all checked
(the true objective f (sum_g max cost + tau), with the barrier, must fall; the caller certifies the
result), so a wrong guess costs time, never correctness. Where the active cells are dependent at the
point (a singular optimum: a [5]x[4]x[3]x[2] ``abs:2`` problem) or no step finds a decrease, the
descent goes on without the steps.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

import numpy as np
import scipy.linalg

from ..linalg import eigh_sym, psd_power
from .problem import MarginalProblem
from .projected_cg import StepSystem, cell_costs, direction

log = logging.getLogger(__name__)

__all__ = ["UnionSpace", "NewtonResult", "newton_steps", "MAX_UNION", "MAX_PROJECTION_BYTES"]

MAX_UNION = 3000  # union coordinates above this: dense X^-1 products too slow for hundreds of CG iterations
MAX_PROJECTION_BYTES = (
    2 << 30
)  # the projection's per-view Hadamard blocks (active cells squared) above this: not attempted
ACTIVE_RTOL = 1e-3  # a cell within this fraction of its view's largest cost is held at that cost
# with a barrier, CG also stops once <r, P r> is below this fraction of the barrier's share of the gap
# (Loans' 400-cell family at 1e-3: 400 iterations, the limit, to projected_cg.CG_RTOL)
CG_ENOUGH = 1e-3
CONVERGED = 1e-10  # Newton stops once its model's decrease is below this fraction of f
# ... or after this many steps in a row shorter than 1/2 and less than twice the one before (CPS from its first
# temperature, before the barrier: 0.36, 0.24, 0.12, 0.04, 0.015; Loans abs lengthening: 5e-4, 1e-3, 1.6e-2)
SHORT_STEPS = 3
BLOCKED = 1.0  # a free cell that reaches its view's cost within this step (the full one) joins the active set
# ... and the held cells with negative multipliers are released, and the direction recomputed, at most
# this many times per step (CPS abs at its last barriers: 6,967 held, 14 released, then 4, then settled)
BLOCKING_ROUNDS = 4
# after the first step the active set is the last step's settled one and the free cells within this
# fraction of their view's cost (those a step stopped at): re-holding every cell within ACTIVE_RTOL
# pulled the cells just released back up to their cost (CPS abs: 6,955 <-> 6,963 of 7,000 held,
# step after step, certified 2.2e-4)
REENTRY_RTOL = 1e-9
# a step that leaves the cone is projected back onto it with its eigenvalues at least this fraction
# of the point's smallest: near a singular optimum the steps held inside the cone shrank
# geometrically (CPS affine from its 1e-4 point: 0.004, 0.0013, 0.0004, each predicting the same
# decrease); projected, from its 1e-3 point: 0.125, 0.25, 0.5, 1, 1, converged in six steps
CONE_FLOOR = 1e-3
# with a barrier (``newton_steps(barrier=...)``): the step keeps this fraction of the way to the cone's
# boundary; the barrier falls by BARRIER_FALL once the model's decrease is at most CENTRED of its
# share of the gap; centred at BARRIER_FINAL, the steps go on without it (CONVERGED), so that the
# multipliers certifying the point are the barrier-free problem's
TO_BOUNDARY = 0.95
BARRIER_FALL = 10.0
CENTRED = 0.1
BARRIER_FINAL = 1e-9


class UnionSpace:
    """The restricted problem on the union of its views' coordinates: the lower residuals (the
    lower system's indices) followed by every view's kept top."""

    def __init__(self, rp: MarginalProblem):
        self.rp = rp
        nl, off = rp.lower_dim, rp.lower_dim
        self.index, tops = [], []
        for v in rp.views:
            ix = np.zeros(v.dim, dtype=np.int64)
            ix[v.low] = v.low_glob
            ix[v.top] = off + np.arange(len(v.top))
            self.index.append(ix)
            tops.append(off)
            off += len(v.top)
        self.n = off
        g = np.zeros((off, off))
        g[:nl, :nl] += rp.m0
        for b in rp.blocks:
            ix = np.zeros(b.w.shape[0], dtype=np.int64)
            ix[b.low_pos] = b.low_glob
            for o, rows in b.tops:
                ix[rows] = tops[o] + np.arange(len(rows))
            g[np.ix_(ix, ix)] += b.w
        self.g = (g + g.T) / 2
        self.scale = [1.0 / v.cells for v in rp.views]

    def embed(self, ys) -> np.ndarray:
        """sum_g (1/n_g) P_g Y_g P_g^T."""
        x = np.zeros((self.n, self.n))
        for ix, s, y in zip(self.index, self.scale, ys):
            x[np.ix_(ix, ix)] += s * y
        return x

    def state(self, ys) -> tuple[float, np.ndarray, np.ndarray]:
        """(tr(G X^-1), X^-1, Z = X^-1 G X^-1); raises LinAlgError when X is not positive definite."""
        x = self.embed(ys)
        xi = scipy.linalg.cho_solve(scipy.linalg.cho_factor((x + x.T) / 2, lower=True), np.eye(self.n))
        xi = (xi + xi.T) / 2
        z = xi @ self.g @ xi
        return float(np.sum(self.g * xi)), xi, (z + z.T) / 2

    def gradient(self, z: np.ndarray) -> list[np.ndarray]:
        return [-s * z[np.ix_(ix, ix)] for ix, s in zip(self.index, self.scale)]

    def hessian(self, xi: np.ndarray, z: np.ndarray, dys) -> list[np.ndarray]:
        t = xi @ self.embed(dys) @ z
        h = t + t.T
        return [s * h[np.ix_(ix, ix)] for ix, s in zip(self.index, self.scale)]

    def view_curvature(self, xi: np.ndarray, z: np.ndarray, k: int, y: np.ndarray) -> float:
        """<Y, H_gg Y> / tr Y for view k alone: 2 s^2 tr(A Y C Y) / tr Y with A, C its blocks of X^-1, Z."""
        ix, s = self.index[k], self.scale[k]
        a, c = xi[np.ix_(ix, ix)], z[np.ix_(ix, ix)]
        return 2 * s * s * float(np.sum((a @ y) * (y @ c).T)) / max(float(np.trace(y)), 1e-300)


@dataclass
class NewtonResult:
    """The point after the steps (scaled to cost 1), the cells' multipliers per view (zero off the
    active set: the certificate's candidate weights), the steps accepted and why they stopped."""

    ys: list[np.ndarray]
    tau: float
    weights: list[np.ndarray]
    steps: int
    message: str


def _blocking(cells, dcells, dshares, active, t) -> tuple[float, list[np.ndarray]]:
    """The longest step before a free cell passes its view's cost (cells and costs are linear in the
    step), and per view the free cells that pass it within BLOCKED."""
    block, per_view = math.inf, []
    for c, d, ds, a, m in zip(cells, dcells, dshares, active, t):
        rate = np.where(a, 0.0, d - ds)
        steps = np.where(rate > 0, (m - c) / np.where(rate > 0, rate, 1.0), math.inf)
        block = min(block, float(steps.min(initial=math.inf)))
        per_view.append(steps < BLOCKED)
    return max(block, 0.0), per_view


def _released(active, lam) -> list[np.ndarray]:
    """Per view the held cells whose multiplier is negative (never a view's last held cell: its
    cost is the view's)."""
    out = []
    for a, l in zip(active, lam[:-1]):
        neg = np.zeros(len(a), dtype=bool)
        neg[a] = l > 0  # (the multipliers of D's cell weights are -l)
        if neg.sum() >= a.sum():
            neg[:] = False
        out.append(neg)
    return out


def _onto_cone(y: np.ndarray, floor: float) -> np.ndarray:
    """``y`` with its eigenvalues below ``floor`` raised to it (``y`` itself when none is)."""
    w, v = eigh_sym((y + y.T) / 2)
    if w[0] >= floor:
        return y
    return (v * np.maximum(w, floor)) @ v.T


def _log_det(y: np.ndarray) -> float:
    """log det of a positive definite ``y`` (LinAlgError otherwise)."""
    return 2.0 * float(np.sum(np.log(np.diag(np.linalg.cholesky((y + y.T) / 2)))))


def _boundary_step(eigs, dys) -> float:
    """The step at which Y + step D first leaves the positive definite cone (inf when never)."""
    step = math.inf
    for (w, v), d in zip(eigs, dys):
        r = v / np.sqrt(w)  # Y^-1/2 = r r^T
        low = float(np.linalg.eigvalsh(r.T @ d @ r)[0])
        if low < 0:
            step = min(step, -1.0 / low)
    return step


def newton_steps(
    rp: MarginalProblem,
    ys,
    tau: float,
    *,
    max_seconds: float,
    steps: int = 30,
    cg_iterations: int = 400,
    union: UnionSpace | None = None,
    barrier: float = 0.0,
) -> NewtonResult | None:
    """Newton steps from (``ys``, ``tau``) (module docstring) until converged, a step finds no
    decrease, SHORT_STEPS steps in a row are short and not lengthening, ``steps`` are taken or
    ``max_seconds`` pass; None when the problem is too large for the dense union or the projection
    (MAX_UNION, MAX_PROJECTION_BYTES). ``barrier`` > 0: on the way, the barrier -mu sum_g log det Y_g
    with mu this fraction of f per coordinate (so its share of the certified gap), divided by
    BARRIER_FALL each time the point is centred (the model's decrease at most CENTRED of that share),
    then, once centred at BARRIER_FINAL, without it to CONVERGED; 0: the cone projections and CONVERGED."""
    t0 = time.perf_counter()
    bases = [v.basis for v in rp.views]
    if any(b is None for b in bases) or sum(len(y) for y in ys) == 0:
        return None
    union = union or UnionSpace(rp)
    if union.n > MAX_UNION or 8 * sum(b.shape[0] ** 2 for b in bases) > MAX_PROJECTION_BYTES:
        log.info(
            "qsplus newton: not attempted (%d union coordinates, %d cells)", union.n, sum(b.shape[0] for b in bases)
        )
        return None
    lres = rp.residual_loss
    has_tau = lres > 0
    nv = len(ys)
    dims = sum(len(y) for y in ys)

    def merit(y_, tau_, mu_) -> float:
        """f (sum_g max cost + tau), less mu_ sum_g log det (Y_g / cost): the objective at the point
        scaled to the budget, with the barrier (scale-free both)."""
        f_, _, _ = union.state(y_)
        cost = sum(float(c.max()) for c in cell_costs(bases, y_)) + (tau_ if has_tau else 0.0)
        value = (f_ + (lres / tau_ if has_tau else 0.0)) * cost
        if mu_ > 0:
            value -= mu_ * sum(_log_det(y) - len(y) * math.log(cost) for y in y_)
        return value

    ys = [(y + y.T) / 2 for y in ys]
    weights = [np.zeros(b.shape[0]) for b in bases]
    message, taken, accepted, short, last, working = "steps", 0, 0, 0, 0.0, None
    unbarred = False  # the barrier reached BARRIER_FINAL, centred: the steps go on without it
    while taken < steps:
        if time.perf_counter() - t0 > max_seconds:
            message = "time limit"
            break
        cells = cell_costs(bases, ys)
        total = sum(float(c.max()) for c in cells) + (tau if has_tau else 0.0)
        ys, tau, cells = [y / total for y in ys], tau / total, [c / total for c in cells]
        eigs = [eigh_sym(y) for y in ys]
        try:
            if barrier > 0 and min(float(w[0]) for w, _ in eigs) <= 0:
                raise np.linalg.LinAlgError
            f, xi, z = union.state(ys)
        except np.linalg.LinAlgError:
            message = "not positive definite"
            break
        f += lres / tau if has_tau else 0.0
        mu = barrier * f / dims  # the barrier's weight: its share of the gap is about ``barrier``
        inverses = [psd_power(y, -1, eig=e) for y, e in zip(ys, eigs)] if mu > 0 else []
        t = np.array([float(c.max()) for c in cells])
        if working is None:  # the descent leaves its cells near their cost, not at it
            active = [c >= (1 - ACTIVE_RTOL) * m for c, m in zip(cells, t)]
        else:  # the last step's settled set, and the cells its step stopped at
            active = [a | (c >= (1 - REENTRY_RTOL) * m) for a, c, m in zip(working, cells, t)]
        curv = [max(union.view_curvature(xi, z, k, y), 1e-300) for k, y in enumerate(ys)]
        gys = union.gradient(z)
        if mu > 0:
            gys = [g - mu * yi for g, yi in zip(gys, inverses)]
        grad = (gys, np.array([0.0] * nv + ([-lres / tau**2] if has_tau else [])))

        def hess(d, _xi=xi, _z=z, _tau=tau, _mu=mu, _inv=inverses):
            dv = np.zeros_like(d[1])
            if has_tau:
                dv[nv] = 2 * lres / _tau**3 * d[1][nv]
            h = union.hessian(_xi, _z, d[0])
            if _mu > 0:
                h = [a + _mu * (yi @ dy @ yi) for a, yi, dy in zip(h, _inv, d[0])]
            return h, dv

        for round_ in range(BLOCKING_ROUNDS):
            try:
                st = StepSystem(bases, active, eigs, curv, 2 * lres / tau**3 if has_tau else None, mu)
            except np.linalg.LinAlgError:  # dependent active cells (a singular optimum): left to the descent
                st = None
                break
            resid = [t[k] - c[a] for k, (c, a) in enumerate(zip(cells, active))] + [np.array([0.0])]
            x, lam, k, model = direction(st, grad, hess, resid, cg_iterations, CG_ENOUGH * barrier * f)
            block, hits = _blocking(cells, cell_costs(bases, x[0]), x[1][:nv], active, t)
            drops = _released(active, lam)
            if not any(h.any() for h in hits) and not any(d.any() for d in drops) or round_ == BLOCKING_ROUNDS - 1:
                break  # (after the last round the cells that would pass stop the step instead)
            # the step's active set settled on its quadratic model (a primal-dual active-set iteration,
            # Hintermueller, Ito and Kunisch, SIAM J. Optim. 13, 2002): the held cells whose multiplier
            # came out negative are released and the free cells the step would take past their
            # view's cost are held, and the direction recomputed
            active = [(a & ~d) | h for a, d, h in zip(active, drops, hits)]
        if st is None:
            message = "dependent constraints"
            break
        centred = mu > 0 and -model <= CENTRED * barrier * f
        now = merit(ys, tau, mu)
        step = min(1.0, block)  # free cells at most their view's cost
        if mu > 0:  # inside the cone, by a margin
            step = min(step, TO_BOUNDARY * _boundary_step(eigs, x[0]))
            floors = [0.0] * nv
        else:
            floors = [CONE_FLOOR * float(w[0]) for w, _ in eigs]
        if has_tau and x[1][nv] < 0:
            step = min(step, 0.95 * tau / -float(x[1][nv]))
        new = None
        while step > 1e-4:
            trial = [y + step * d if mu > 0 else _onto_cone(y + step * d, fl) for y, d, fl in zip(ys, x[0], floors)]
            tau_trial = tau + step * float(x[1][nv]) if has_tau else 0.0
            try:
                value = merit(trial, tau_trial, mu)
            except np.linalg.LinAlgError:
                value = math.inf
            if value < now:
                new = (trial, tau_trial, value)
                break
            step /= 2
        weights = []
        for b, a, l in zip(bases, active, lam[:-1]):
            weights.append(np.zeros(b.shape[0]))
            weights[-1][a] = np.maximum(-l, 0.0)
        working = [a & ~d for a, d in zip(active, drops)]  # (the last round's: it did not change the set)
        taken += 1
        log.info(
            "qsplus newton: step %d, barrier %.0e, %d active cells of %d, %d CG iterations, model %.3e, "
            "step length %.3g, objective %.12g -> %s, %.1f s",
            taken,
            barrier,
            sum(int(a.sum()) for a in active),
            sum(len(a) for a in active),
            k,
            model,
            step,
            now,
            f"{new[2]:.12g}" if new else "no decrease",
            time.perf_counter() - t0,
        )
        if new is None:
            if centred and barrier > BARRIER_FINAL * (1 + 1e-9):  # rounding at this barrier: on to the next
                barrier /= BARRIER_FALL
                continue
            if centred:  # centred at the last barrier: finished without it (its multipliers certify)
                barrier, unbarred = 0.0, True
                continue
            message = "converged" if unbarred else "no decrease"  # (no decrease left without the barrier)
            break
        ys, tau = new[0], new[1]
        accepted += 1
        if mu > 0 and centred:
            if barrier <= BARRIER_FINAL * (1 + 1e-9):  # (falling by tenths leaves rounding)
                barrier, unbarred = 0.0, True  # the last steps without it: its multipliers certify
                continue
            barrier /= BARRIER_FALL
        if mu == 0 and -model <= CONVERGED * f:
            message = "converged"
            break
        short = short + 1 if step < 0.5 and step < 2 * last else 0  # short and not lengthening
        last = step
        if short >= SHORT_STEPS:  # far from the optimum's active set or cone face: back to the descent
            message = "short steps"
            break
    cells = cell_costs(bases, ys)
    total = sum(float(c.max()) for c in cells) + (tau if has_tau else 0.0)
    return NewtonResult([y / total for y in ys], tau / total if has_tau else 0.0, weights, accepted, message)
