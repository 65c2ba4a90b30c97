"""The whole-family certificate of a point of the symmetric reduction: dual blocks optimised by smoothed L-BFGS.

The restricted reduction (:mod:`.symmetric`, pairs of more than ``EXACT_MAX_CELLS`` cells) keeps
each pair's top to its workload's span, so its solver's dual lives on that subspace and bounds the
whole family only loosely (0.5-0.7 of the objective at [30]^40). Nor does the gradient at the point
certify it: the optimum is singular (no mass off the workload's span), and minus the gradient,
X^+ G X^+, leaves out the dual's components on the null space of X (17 % below the optimum on
[5]^4 ``affine:2``, even at the certified whole-space optimum).

Weak duality holds for *any* Z per isotypic block, not only Z = X^-1 B (B B^T = G_lambda):
tr(G X^-1) >= 2 tr(B^T Z) - tr(Z^T X Z) for every X > 0, so with Phi = Z Z^T

    f* >= T(Z)^2 / s(D(Phi)),   T(Z) = sum_lambda mult_lambda tr(B_lambda^T Z_lambda),

D(Phi) one view's share of the adjoint of the blocks (cell basis) and s(D) = max{<D, Y> : Y PSD,
diag Y <= 1} <= psi(mu) = sum(mu) + N lambda_max(D - Diag mu) for every mu (N cells). So every
(Z, mu) gives a valid bound T^2 / psi, and this module minimises psi / T^2 over both, from Z = X^-1 B
and the mu of :func:`.certificate.maxcut_upper`, by L-BFGS on a log-sum-exp smoothing of the top
eigenvalue whose temperature falls from 1e-2 to 1e-6 of max |D| (the function is homogeneous in
Z, so no constraint is needed). Each bound reported is re-evaluated with the exact top eigenvalue.
Measured on restricted points (``bench/whole_family_bound.py``; the dual over the whole pair
space, which the reduction never formed): stopping at half the 1e-4 target, [5]^4 ``affine:2``
4.1e-5 in 5 s, [8]^6 ``prefix:1+abs:2`` 4.1e-5 in 10 s, [10]^8 ``prefix:1+affine:2`` 2.3e-5 in 28 s;
the paper's [10]^40 ``prefix:1+affine:2`` 6.4e-4 after every temperature (45 s; the restricted
solver's own bound: 0.34), where L-BFGS stalls. Pairs of 900 cells and more (n >= 30) were not
measured.
"""

from __future__ import annotations

import logging
import math
import time

import numpy as np
import scipy.optimize

from ..threads import BLAS_THREADED_CELLS, at_most
from .basis import view_basis
from .certificate import maxcut_upper, sdp_upper
from .problem import MarginalProblem
from .symmetric import PairReduction, applies, pair_share_gram

log = logging.getLogger(__name__)

__all__ = ["whole_family_bound", "TEMPERATURES"]

TEMPERATURES = (1e-2, 3e-3, 1e-3, 3e-4, 1e-4, 3e-5, 1e-5, 1e-6)  # of max |D|, one L-BFGS run each
START_DELTAS = (0.0, 1e-6, 1e-4, 1e-2, 0.1, 0.3)  # the start's mixes with the identity, the best kept
_ITERATIONS_PER_TEMPERATURE = 2000  # measured: 300 stall at 6e-4 on [8]^6, 2,000 reach 3.5e-6


class _Dual:
    """The blocks of one problem and the map Z -> (T(Z), D(Z Z^T)) with its adjoint."""

    def __init__(self, problem: MarginalProblem):
        n = problem.views[0].sizes[0]
        d = len({a for v in problem.views for a in v.attrs})
        self.red = red = PairReduction(n, d)
        self.u = view_basis((n, n))
        self.me, self.mo = self.u @ red.je, self.u @ red.jo  # cells x swap-even / swap-odd residual coordinates
        self.cells = n * n
        self.swap = np.arange(n * n).reshape(n, n).T.ravel()  # cell (a, b) -> (b, a)
        gp = pair_share_gram(problem, n, d)
        self.gblocks = red.blocks(red.je.T @ gp @ red.je, red.jo.T @ gp @ red.jo)
        self.active, self.factors = [], []
        for i, (mult, g) in enumerate(zip(red.mults, self.gblocks)):
            if g.shape[0] == 0 or mult == 0:
                continue
            w, v = np.linalg.eigh((g + g.T) / 2)
            keep = w > 1e-12 * max(float(w.max()), 1e-300)
            if keep.any():
                self.active.append(i)
                self.factors.append(v[:, keep] * np.sqrt(w[keep]))
        self.shapes = [b.shape for b in self.factors]

    def gradient_factor(self, pair_gram: np.ndarray) -> np.ndarray:
        """Z = X^-1 B per block at a point (Z Z^T is minus the gradient there), flattened."""
        red = self.red
        y = self.u.T @ ((pair_gram + pair_gram.T) / 2) @ self.u
        xblocks = red.blocks(red.je.T @ y @ red.je, red.jo.T @ y @ red.jo)
        zs = [np.linalg.lstsq((xblocks[i] + xblocks[i].T) / 2, b, rcond=None)[0] for i, b in zip(self.active, self.factors)]
        return np.concatenate([z.ravel() for z in zs]) if zs else np.zeros(0)

    def split(self, z: np.ndarray) -> list[np.ndarray]:
        out, k = [], 0
        for r, c in self.shapes:
            out.append(z[k:k + r * c].reshape(r, c))
            k += r * c
        return out

    def t(self, zs: list[np.ndarray]) -> float:
        return sum(self.red.mults[i] * float(np.sum(b * z)) for i, b, z in zip(self.active, self.factors, zs))

    def d_cell(self, zs: list[np.ndarray]) -> np.ndarray:
        red = self.red
        phis = [np.zeros_like(g) for g in self.gblocks]
        for i, z in zip(self.active, zs):
            phis[i] = z @ z.T
        de, do = red.adjoint(phis)
        dres = red.je @ de @ red.je.T + (red.jo @ do @ red.jo.T if red.no else 0)
        dc = self.u @ (dres / red.m) @ self.u.T
        return (dc + dc.T) / 2

    def parts(self, zs: list[np.ndarray], mu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """D(Z Z^T) - Diag(mu) in the swap-even and swap-odd residual coordinates (mu swap-symmetric:
        the cell-basis matrix is u [je jo] diag(these two) [je jo]^T u^T, the same spectrum)."""
        red = self.red
        mu = (mu + mu[self.swap]) / 2  # exactly swap-symmetric, so the split is exact (any mu bounds)
        phis = [np.zeros_like(g) for g in self.gblocks]
        for i, z in zip(self.active, zs):
            phis[i] = z @ z.T
        de, do = red.adjoint(phis)
        even = de / red.m - (self.me * mu[:, None]).T @ self.me
        odd = do / red.m - (self.mo * mu[:, None]).T @ self.mo
        return (even + even.T) / 2, (odd + odd.T) / 2

    def pull_back(self, pe: np.ndarray, po: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
        """For P = (pe, po) in those coordinates: the H_lambda with <P, D(Z Z^T)> = sum mult <Z Z^T, H_lambda>,
        and diag of P in the cell basis (what <P, Diag mu> differentiates to)."""
        red = self.red
        h = red.blocks(pe / red.m, po / red.m)
        diag = np.einsum("ij,ij->i", self.me @ pe, self.me) + (np.einsum("ij,ij->i", self.mo @ po, self.mo) if red.no else 0.0)
        return [(h[i] + h[i].T) / 2 for i in self.active], diag


def _psi(dual: _Dual, zs: list[np.ndarray], mu: np.ndarray) -> float:
    """sum(mu) + N lambda_max(D - Diag mu), the top eigenvalue exact."""
    top = max(float(np.linalg.eigvalsh(part)[-1]) for part in dual.parts(zs, mu) if part.size)
    return float(mu.sum()) + dual.cells * top


def whole_family_bound(problem: MarginalProblem, pair_gram: np.ndarray, *, objective: float | None = None, target_gap: float = 1e-4,
                       max_seconds: float | None = None) -> float:
    """A lower bound on the family's optimum (total variance at beta = 1, over the whole pair space)
    near the point ``pair_gram`` (the shared pair Gram, cell basis, each view's Gram at cost 1).

    ``objective``: the point's objective; the descent stops once the bound is within half of
    ``target_gap`` of it, or after ``max_seconds`` (checked between L-BFGS runs). Every bound
    returned is valid whatever the descent reaches (module docstring)."""
    why = applies(problem)
    if why:
        raise ValueError(f"the symmetric reduction does not apply: {why}")
    # one BLAS thread below BLAS_THREADED_CELLS cells: threads on these small products spin when the
    # cores are busy (measured: 30x slower on [6]^5 beside two busy processes)
    with at_most(1 if pair_gram.shape[0] < BLAS_THREADED_CELLS else None):
        return _bound(problem, pair_gram, objective, target_gap, max_seconds)


def _bound(problem: MarginalProblem, pair_gram: np.ndarray, objective: float | None, target_gap: float, max_seconds: float | None) -> float:
    t0 = time.perf_counter()
    dual = _Dual(problem)
    if not dual.active:
        return 0.0
    # the start: minus the gradient at the point mixed with the identity (delta), the best bound kept;
    # near the singular optimum the unmixed gradient blows up along the point's near-null directions
    # (measured at [10]^40 prefix:1+affine:2: 0.9985 of the objective missing at delta = 1e-6, 0.27 at 0.1)
    best, start = 0.0, None
    for delta in START_DELTAS:
        z = dual.gradient_factor((pair_gram + delta * np.eye(len(pair_gram))) / (1 + delta))
        zs = dual.split(z)
        dc_d, t_d = dual.d_cell(zs), dual.t(zs)
        s_d = sdp_upper(dc_d, pair_gram)
        low = t_d**2 / s_d if t_d > 0 and 0 < s_d < math.inf else 0.0
        if start is None or low > best:
            best, start, dc, t_start, s_start = low, z, dc_d, t_d, s_d
    zs = dual.split(start)
    # mu for the start: maxcut's descent from the diagonal heuristic's L (s(D) <= sum(mu) + N lambda_max)
    mu = np.diag(dc) + (s_start - float(np.trace(dc))) / dual.cells
    if np.all(np.diag(dc) >= 0):
        polished = maxcut_upper(dc, np.maximum(np.diag(dc), 1e-300), max_iterations=200)
        if 0 < polished < s_start:
            best = max(best, t_start**2 / polished)
    norm = max(best, 1e-300)  # psi / T^2 ~ 1 / bound: scaled to order 1 for L-BFGS's tolerances
    scale = max(float(np.abs(dc).max()), 1e-300)
    x = np.concatenate([start, mu])
    nz = start.size

    def smoothed(v: np.ndarray, temp: float) -> tuple[float, np.ndarray]:
        zs, mu = dual.split(v[:nz]), v[nz:]
        (we, ve), (wo, vo) = (np.linalg.eigh(part) for part in dual.parts(zs, mu))
        top = max(float(we.max(initial=-np.inf)), float(wo.max(initial=-np.inf)))
        ee, eo = np.exp((we - top) / temp), np.exp((wo - top) / temp)
        z = float(ee.sum() + eo.sum())
        psi = float(mu.sum()) + dual.cells * (top + temp * math.log(z))
        # d psi / d (D - Diag mu), in the even and odd coordinates
        pe, po = dual.cells * (ve * (ee / z)) @ ve.T, dual.cells * (vo * (eo / z)) @ vo.T
        hs, pdiag = dual.pull_back(pe, po)
        t = dual.t(zs)
        grads = []
        for i, b, zz, h in zip(dual.active, dual.factors, zs, hs):
            mult = dual.red.mults[i]
            grads.append((2 * mult * (h @ zz)) / t**2 - 2 * psi / t**3 * mult * b)
        gmu = (1.0 - pdiag) / t**2
        return psi / t**2 * norm, np.concatenate([g.ravel() for g in grads] + [gmu]) * norm

    def done() -> bool:
        if objective is not None and objective > 0 and (objective - best) / objective <= target_gap / 2:
            return True
        return max_seconds is not None and time.perf_counter() - t0 >= max_seconds

    for temp in TEMPERATURES:
        if done():
            break
        r = scipy.optimize.minimize(smoothed, x, args=(temp * scale,), jac=True, method="L-BFGS-B",
                                    options={"maxiter": _ITERATIONS_PER_TEMPERATURE, "gtol": 1e-12, "ftol": 1e-15})
        if not np.all(np.isfinite(r.x)):
            break
        x = r.x
        zs, mu = dual.split(x[:nz]), x[nz:]
        t = dual.t(zs)
        psi = _psi(dual, zs, mu)
        if t > 0 and psi > 0:
            best = max(best, t * t / psi)
        log.debug("qsplus whole-family bound: temperature %.0e, bound %.10g, %.1f s", temp, best, time.perf_counter() - t0)
    return best if objective is None else min(best, objective)
