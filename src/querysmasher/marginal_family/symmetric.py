"""The symmetry-reduced SDP of a tied all-pairs problem: the family's exact optimum and its certificate in seconds.

When the schema is uniform ([n]^d) and the workload is the same two-way query set on every pair of
attributes (the paper's Table 4: ``affine:2``, ``abs:2``), the family's optimum can be taken
invariant under every permutation of the attributes (convexity and symmetry): every pair view shares
one Gram Y (pair residual coordinates, invariant under swapping the pair's two attributes). The
full-domain Gram X = sum_g embed(Y) then commutes with the symmetric group S_d, and so does the
workload Gram G; both split into four isotypic blocks (the irreducible representations of S_d that
occur in the residual spaces of at most two attributes), each with a small multiplicity space:

* trivial (multiplicity 1): the total, one attribute's residual alpha (the same on every attribute),
  and the swap-even top beta (the same on every pair): 1 + (n-1) + n(n-1)/2 coordinates;
* standard (d-1): alpha and beta of the form a_i = u_i alpha, b_ij = u_i beta + u_j sigma(beta)
  (u orthogonal to the all-ones vector): (n-1) + (n-1)^2;
* (d-2, 2) (d(d-3)/2): the swap-even top alone; (d-2, 1, 1) ((d-1)(d-2)/2): the swap-odd top alone.

So tr(G X^+) = sum_lambda mult_lambda tr(G_lambda X_lambda^-1), X_lambda linear in Y: a semidefinite
program whose size does not depend on d (blocks of at most (n-1) n coordinates), with the cost
constraints diag(U Y U^T) <= 1 on the n(n+1)/2 swap-orbits of cells. It is solved by SCS (a
first-order conic solver, through cvxpy; Clarabel, an interior point method, when
SCS's certificate misses the target on a small pair), and
the bound is recomputed here from the solver's dual blocks
Phi_lambda (weak duality, as :mod:`.certificate` states it): any PSD Phi gives
f* >= T(Phi)^2 / s(D(Phi)) with T = sum mult tr((G^1/2 Phi G^1/2)^1/2) and s(D) bounded through a
diagonal L with D <= lambda_max(L^-1/2 D L^-1/2) L (the solver's cost multipliers and two
heuristics of :func:`.certificate.sdp_upper`), then polished by :func:`.certificate.maxcut_upper` (s(D) to about 1e-6: a
first-order solver's multipliers alone left 2e-3 of the objective at [10]^40 abs). The primal point handed back is the
solver's Y with its cell diagonal filled up to the cost (which never raises the objective); its objective is
re-evaluated exactly by :meth:`.problem.MarginalProblem.evaluate`.

**Restricting each pair's top to its workload's span loses nothing**, and the restricted problem's
dual certifies the whole family. Write a pair Gram in the residual coordinates split into R (the
lower residuals and the span of the workload's top) and C (the rest of the top). C is orthogonal
to every query and seen by this pair alone (no other view touches its top), so the full-domain X
enters the objective only through the Schur complement S = Y_RR - Y_RC Y_CC^+ Y_CR: Y and
Y' = R S R^T have the same objective, while Y - Y' is PSD, so diag Y' <= diag Y (no more cost).
Hence the optimum over Y with range in R is the family's, and any bound on the restricted problem
bounds the family: s(D) is then the maximum over X = R S R^T only, bounded through
R^T (D - Diag mu) R (:func:`.certificate.sdp_upper` with ``basis``), an eigenproblem of ~3n
coordinates (measured: the paper's [30]^40 ``prefix:1+abs:2`` certified to 3.5e-5 in 26 s).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..linalg import psd_power
from .basis import view_basis
from .certificate import sdp_upper
from .deadline import TimeLimit
from .problem import MarginalProblem, workload_residual_gram

log = logging.getLogger(__name__)

__all__ = [
    "applies",
    "SymmetricSolution",
    "solve_symmetric",
    "PairReduction",
    "pair_share_gram",
    "workload_top",
    "dual_bound",
    "MAX_CELLS",
]

MAX_CELLS = 2500  # pair views up to this many cells (the restricted SDP's blocks have ~ 3 n coordinates)
EXACT_MAX_CELLS = (
    400  # up to this many cells the whole pair space is optimised over (blocks of ~ n^2 / 2) and certified
)
INTERIOR_MAX_CELLS = 100  # whole-space problems up to this many cells are solved again by Clarabel (interior point)
# when SCS's certificate misses the target
# Measured on [n]^40 (2 cores): whole space n = 10 by Clarabel certifies affine:2 / abs:2 to 4e-7 / 3e-6 in 118 / 80 s
# (1.8 / 1.3 GB); by SCS affine:2 to 7e-7 in 32 s but abs:2 only to 0.72 in 285 s before the certificate's s(D) was
# polished (maxcut_upper); since, SCS certifies the paper's [10]^40 cells (prefix:1+affine:2 / abs:2) to 1.4e-5 / 9.1e-6
# in 23 s and 180 MB each (planner, one BLAS thread), so SCS goes first and Clarabel is the fallback. Clarabel's
# dense cone scalings outgrow memory beyond (n = 12: > 8 min, 7.3 GB); SCS certifies [20]^40 affine:2 to 7.7e-5 in
# 854 s (0.9 GB).
SCS_OPTIONS = {"eps_abs": 1e-8, "eps_rel": 1e-8, "max_iters": 200000}  # up to 400 cells
SCS_LARGE_OPTIONS = {"eps_abs": 1e-5, "eps_rel": 1e-5, "max_iters": 50000}  # restricted beyond 400 cells, then polished
SCS_TIGHTER_OPTIONS = {
    "eps_abs": 3e-6,
    "eps_rel": 3e-6,
    "max_iters": 50000,
}  # warm-started again when that misses the target,
SCS_TIGHT_OPTIONS = {"eps_abs": 1e-6, "eps_rel": 1e-6, "max_iters": 50000}  # then at 1e-6 if that misses it too
TIME_LIMIT_OPTION = {
    "SCS": "time_limit_secs",
    "CLARABEL": "time_limit",
}  # each solver's name for its time limit (seconds)
# Restricted [30]^40 prefix:1+affine:2 (one BLAS thread, another job beside it): SCS at 1e-5 97 s, polished to a
# certified 3.9e-5; at 1e-6 465 s from the start, 2.4e-6; 1e-5 then 1e-6 warm-started 90 + 130 s, 1.4e-6.
# Restricted [50]^40 prefix:1+affine:2 (2026-12-05, one BLAS thread, another job beside it): 1e-5 in 690 s left a
# certified 1.2e-4 (the polished point within 2e-6 of the optimum: the bound missed); 1e-6 warm-started had not
# converged when the time limit stopped it 1,140 s later (2.8e-5): hence the 3e-6 step between.


def applies(problem: MarginalProblem) -> str:
    """Why the reduction does not apply to ``problem`` ("" when it does)."""
    if any(len(v.attrs) != 2 for v in problem.views):
        return "not every marginal view is a pair"
    if len(problem.views) < 3:
        return "fewer than three attributes"
    if not problem.tied:
        return "the workload is not symmetric under attribute permutations"
    if problem.residual_only:
        return "residual-only subsets take part of the budget"
    if not problem.local or any(len(v.attrs) > 2 for v in problem.workload.views):
        return "the workload has views other than the pairs and single attributes"
    attrs = sorted({a for v in problem.views for a in v.attrs})
    d = len(attrs)
    if len(problem.views) != d * (d - 1) // 2:
        return "not every pair of the attributes is a view"
    if problem.views[0].cells > MAX_CELLS:
        return f"pair views of {problem.views[0].cells} cells (the reduction is for at most {MAX_CELLS})"
    return ""


@dataclass
class SymmetricSolution:
    """The reduced SDP's optimum: ``gram`` the shared pair Gram in the cell basis (max diagonal 1 per
    unit of share, so each view's Gram is gram / views), ``lower_bound`` the recomputed certificate
    (total variance at beta = 1), ``sdp_value`` the solver's objective, ``seconds`` and the solver's status."""

    gram: np.ndarray
    lower_bound: float
    sdp_value: float
    seconds: float
    status: str
    restricted: bool = False


class PairReduction:
    """The coordinates of one pair view and the isotypic block maps (module docstring).

    Pair residual coordinates (row-major (j1, j2), j = 0 the constant) are reordered into the swap-even
    coordinates [total, (a1 + a2)/sqrt2, even top] and the swap-odd ones [(a1 - a2)/sqrt2, odd top],
    ``je`` and ``jo`` (residual coordinates x even / odd coordinates, orthonormal columns)."""

    def __init__(self, n: int, d: int, top: np.ndarray | None = None):
        """``top``: orthonormal columns (top coordinates, (n-1)^2 rows) spanning a swap-invariant
        subspace of the top to keep (None: the whole top)."""
        self.n, self.d = n, d
        self.m = d * (d - 1) // 2
        self.restricted = top is not None
        nv = n - 1
        idx = np.arange(n * n).reshape(n, n)
        h = 1 / math.sqrt(2)
        swap = np.array(
            [(j2 - 1) * nv + (j1 - 1) for j1 in range(1, n) for j2 in range(1, n)]
        )  # top index of the swapped coordinate
        if top is None:
            even_cols, odd_cols = [], []
            for j1 in range(1, n):
                for j2 in range(j1, n):
                    a, b = (j1 - 1) * nv + (j2 - 1), (j2 - 1) * nv + (j1 - 1)
                    e = np.zeros(nv * nv)
                    if a == b:
                        e[a] = 1.0
                    else:
                        e[a] = e[b] = h
                        o = np.zeros(nv * nv)
                        o[a], o[b] = h, -h
                        odd_cols.append(o)
                    even_cols.append(e)
            top_even = np.array(even_cols).T.reshape(nv * nv, -1)
            top_odd = np.array(odd_cols).T.reshape(nv * nv, -1) if odd_cols else np.zeros((nv * nv, 0))
        else:
            top_even = _orth(top + top[swap])
            top_odd = _orth(top - top[swap])
        top_rows = idx[1:, 1:].ravel()
        je = np.zeros((n * n, 1 + nv + top_even.shape[1]))
        je[0, 0] = 1.0
        je[idx[1:, 0], 1 + np.arange(nv)] = h
        je[idx[0, 1:], 1 + np.arange(nv)] = h
        je[top_rows, 1 + nv :] = top_even
        jo = np.zeros((n * n, nv + top_odd.shape[1]))
        jo[idx[1:, 0], np.arange(nv)] = h
        jo[idx[0, 1:], np.arange(nv)] = -h
        jo[top_rows, nv:] = top_odd
        self.je, self.jo = je, jo
        self.re, self.ro = top_even.shape[1], top_odd.shape[1]
        self.ne, self.no = self.je.shape[1], self.jo.shape[1]
        # positions inside the even and odd coordinates
        self.e_tot, self.e_a = 0, slice(1, 1 + nv)
        self.e_top = slice(1 + nv, self.ne)
        self.o_a, self.o_top = slice(0, nv), slice(nv, self.no)
        self.mults = (1.0, d - 1.0, d * (d - 3) / 2, (d - 1) * (d - 2) / 2)

    @property
    def trivial_scale(self) -> np.ndarray:
        """The trivial block's coordinates in the even ones: total, alpha / sqrt(d/2), beta / sqrt(m)."""
        return np.concatenate(
            [[1.0], np.full(self.n - 1, math.sqrt(2 / self.d)), np.full(self.re, 1 / math.sqrt(self.m))]
        )

    def blocks(self, ke, ko, xp=np):
        """The four isotypic blocks (isometric multiplicity coordinates) of sum_g embed(Y) for the pair
        Gram Y = je ke je^T + jo ko jo^T; ``xp``: numpy, or cvxpy for expressions."""
        d, m = self.d, self.m
        a, t = self.e_a, self.e_top
        oa, ot = self.o_a, self.o_top
        triv = m * _scaled(ke, self.trivial_scale, xp)
        bmat = np.block if xp is np else xp.bmat
        std = bmat(
            [
                [
                    (d - 2) / 2 * ke[a, a] + d / 2 * ko[oa, oa],
                    math.sqrt((d - 2) / 2) * ke[a, t],
                    math.sqrt(d / 2) * ko[oa, ot],
                ],
                [math.sqrt((d - 2) / 2) * ke[t, a], ke[t, t], np.zeros((self.re, self.ro))],
                [math.sqrt(d / 2) * ko[ot, oa], np.zeros((self.ro, self.re)), ko[ot, ot]],
            ]
        )
        return [triv, std, ke[t, t], ko[ot, ot]]

    def adjoint(self, phis) -> tuple[np.ndarray, np.ndarray]:
        """(De, Do): the gradient of sum_lambda mult tr(Phi_lambda X_lambda) w.r.t. (ke, ko)."""
        d, m = self.d, self.m
        a, t = self.e_a, self.e_top
        oa, ot = self.o_a, self.o_top
        de, do = np.zeros((self.ne, self.ne)), np.zeros((self.no, self.no))
        mt, ms, m22, m211 = self.mults
        de += mt * m * phis[0] * np.outer(self.trivial_scale, self.trivial_scale)
        p = phis[1]
        nv = self.n - 1
        ia, ie, io = slice(0, nv), slice(nv, nv + self.re), slice(nv + self.re, nv + self.re + self.ro)
        de[a, a] += ms * (d - 2) / 2 * p[ia, ia]
        do[oa, oa] += ms * d / 2 * p[ia, ia]
        de[a, t] += ms * math.sqrt((d - 2) / 2) * p[ia, ie]
        de[t, a] += ms * math.sqrt((d - 2) / 2) * p[ie, ia]
        do[oa, ot] += ms * math.sqrt(d / 2) * p[ia, io]
        do[ot, oa] += ms * math.sqrt(d / 2) * p[io, ia]
        de[t, t] += ms * p[ie, ie]
        do[ot, ot] += ms * p[io, io]
        if self.re:
            de[t, t] += m22 * phis[2]
        if self.ro:
            do[ot, ot] += m211 * phis[3]
        return de, do


def _orth(a: np.ndarray, atol: float = 1e-8) -> np.ndarray:
    """Orthonormal columns spanning the columns of ``a`` (singular values above ``atol``; ``a`` is a
    sum of two matrices with orthonormal columns, so its singular values are at most 2). The
    threshold is absolute: when one parity of the workload's top is empty, the sum is rounding
    noise, and a threshold relative to its largest singular value kept that noise as directions
    (measured: [10]^40 ``abs:2`` kept 9 noise swap-odd coordinates beside its 9 swap-even ones)."""
    if a.shape[1] == 0:
        return a
    u, sv, _ = np.linalg.svd(a, full_matrices=False)
    return u[:, sv > atol]


def _scaled(k, s, xp):
    if xp is np:
        return k * np.outer(s, s)
    return xp.multiply(k, np.outer(s, s))


def _psd_part(a: np.ndarray) -> np.ndarray:
    """The PSD part of a symmetric matrix (negative eigenvalues dropped)."""
    return psd_power(a, 1.0)


def _psd_sqrt(a: np.ndarray) -> np.ndarray:
    return psd_power(a, 0.5)


def pair_share_gram(problem: MarginalProblem, n: int, d: int) -> np.ndarray:
    """One pair's residual workload Gram plus its share of the 1-way views' (Table 4's `prefix:1`):
    a 1-way Gram W_i (coordinates j, 0 the total) lives on the pair coordinates (j, 0) of every pair
    whose first attribute is i and (0, j) where i is second; each of the d - 1 pairs of i carries
    n / (d - 1) of it, so that over all pairs (each scaled 1/n^2, as a view of n^2 cells) W_i
    counts once with its own scale 1/n. The blocks of the sum are then G's blocks exactly (a test
    checks the reduced objective against the whole problem's)."""
    pair = problem.views[0].attrs
    gp = workload_residual_gram(problem.workload, pair)
    for k, a in enumerate(pair):
        w1 = workload_residual_gram(problem.workload, (a,))
        if np.any(w1):
            pos = np.arange(n) * n if k == 0 else np.arange(n)
            gp[np.ix_(pos, pos)] += n / (d - 1) * w1
    return gp


def workload_top(pair_gram: np.ndarray, n: int) -> np.ndarray:
    """Orthonormal columns (top coordinates) spanning the top residual part of a pair's workload
    Gram (residual coordinates): the top the restricted reduction keeps."""
    rows = np.arange(n * n).reshape(n, n)[1:, 1:].ravel()
    w, vec = np.linalg.eigh(pair_gram[np.ix_(rows, rows)])
    return vec[:, w > 1e-10 * max(float(w.max()), 1e-300)]


def dual_bound(
    red: PairReduction,
    gblocks: list[np.ndarray],
    phis: list[np.ndarray],
    gram: np.ndarray,
    extra=(),
    deadline: float | None = None,
) -> float:
    """The certificate from dual blocks ``phis`` (any PSD Phi per isotypic block gives a valid bound;
    scale-free): T(Phi)^2 / s(D(Phi)), T = sum mult tr((G^1/2 Phi G^1/2)^1/2), D one view's share of
    the blocks' adjoint in its cell basis, s(D) over the kept subspace when ``red`` is restricted
    (module docstring), bounded from the point's correlation ``gram`` and the diagonals ``extra``
    (a solver's cost multipliers) and polished by :func:`.certificate.maxcut_upper` (until ``deadline``)."""
    tsum = 0.0
    clean = []
    for i, phi in enumerate(phis):
        phi = _psd_part(phi) if phi.size else phi
        if phi.size and red.mults[i] and np.any(gblocks[i]):
            g12 = _psd_sqrt(gblocks[i])
            tsum += red.mults[i] * float(np.trace(_psd_sqrt(g12 @ phi @ g12)))
        clean.append(phi)
    de, do = red.adjoint(clean)
    u = view_basis((red.n, red.n))
    dres = red.je @ de @ red.je.T + (red.jo @ do @ red.jo.T if red.no else 0)
    dcell = u @ (dres / red.m) @ u.T  # one view's share of Phi, in its cell basis
    dcell = (dcell + dcell.T) / 2
    kept = u @ np.hstack([red.je, red.jo]) if red.restricted else None
    s_upper = sdp_upper(dcell, gram, extra=extra, polish=True, basis=kept, deadline=deadline)
    return tsum**2 / s_upper if s_upper > 0 and math.isfinite(s_upper) else 0.0


def solve_symmetric(
    problem: MarginalProblem,
    *,
    restrict: bool | None = None,
    solver: str | None = None,
    verbose: bool = False,
    solver_options: dict | None = None,
    accept=None,
    tighter: tuple[dict, ...] | None = None,
    max_seconds: float | None = None,
) -> SymmetricSolution:
    """Solve the reduced SDP of ``problem`` (:func:`applies` must be "") and certify it.

    ``restrict``: keep of each pair's top only the span of its workload's top (the lower residuals
    stay whole), so the blocks have ~ 3 n coordinates instead of ~ n^2 / 2 (None: when the pair
    has more than :data:`EXACT_MAX_CELLS` cells). Its optimum is the family's, and its bound (s(D)
    over the kept subspace) bounds the family (module docstring). ``solver``:
    a cvxpy solver (None: SCS, its tolerances by size as measured above :data:`SCS_OPTIONS`; the
    planner retries pairs of at most :data:`INTERIOR_MAX_CELLS` cells with "CLARABEL" when SCS's
    certificate misses its target; beyond, the interior point method's dense cone scalings outgrow
    memory). ``accept``: a callable taking each :class:`SymmetricSolution`; while it returns False
    the problem is solved again, warm-started, with each of ``tighter``'s solver options in turn
    (None: :data:`SCS_TIGHTER_OPTIONS` then :data:`SCS_TIGHT_OPTIONS` for a restricted problem by
    the default solver, else none), within ``max_seconds`` from the start (the solver's time limit,
    :data:`TIME_LIMIT_OPTION`, on every solve; on the tighter ones less the time the first solution
    took to certify and accept, so that the last one's fits); the last solution is returned, and a
    first solve stopped by the time limit without a point raises :class:`~.optimize.TimeLimit`."""
    import cvxpy as cp  # heavy: imported only when the reduction runs

    why = applies(problem)
    if why:
        raise ValueError(f"the symmetric reduction does not apply: {why}")
    t0 = time.perf_counter()
    v0 = problem.views[0]
    n = v0.sizes[0]
    d = len({a for v in problem.views for a in v.attrs})
    gp = pair_share_gram(problem, n, d)
    restrict = n * n > EXACT_MAX_CELLS if restrict is None else bool(restrict)
    red = PairReduction(n, d, workload_top(gp, n) if restrict else None)
    if tighter is None:
        tighter = (SCS_TIGHTER_OPTIONS, SCS_TIGHT_OPTIONS) if solver is None and restrict else ()
    if solver is None:
        solver = "SCS"
        if solver_options is None:
            solver_options = dict(SCS_LARGE_OPTIONS if restrict else SCS_OPTIONS)
    ge, go = red.je.T @ gp @ red.je, red.jo.T @ gp @ red.jo
    gblocks = red.blocks(ge, go)
    u = view_basis((n, n))
    me, mo = u @ red.je, u @ red.jo
    half = [i * n + j for i in range(n) for j in range(i, n)]  # one cell per swap orbit
    ke = cp.Variable((red.ne, red.ne), PSD=True)
    ko = cp.Variable((red.no, red.no), PSD=True)
    ae = sp.csr_matrix(np.einsum("ci,cj->cij", me[half], me[half]).reshape(len(half), -1))
    ao = sp.csr_matrix(np.einsum("ci,cj->cij", mo[half], mo[half]).reshape(len(half), -1))
    cost = ae @ cp.vec(ke, order="C") + (ao @ cp.vec(ko, order="C") if red.no else 0)
    constraints = [cost <= 1]
    objective = 0
    lmis = []
    for i, (gl, xl) in enumerate(zip(gblocks, red.blocks(ke, ko, cp))):
        if gl.shape[0] == 0 or red.mults[i] == 0:
            lmis.append(None)
            continue
        w, vec = np.linalg.eigh((gl + gl.T) / 2)
        keep = w > 1e-12 * max(float(w.max()), 1e-300)
        if not keep.any():
            lmis.append(None)
            continue
        low = vec[:, keep] * np.sqrt(w[keep])
        t = cp.Variable((low.shape[1], low.shape[1]), symmetric=True)
        lmi = cp.bmat([[t, low.T], [low, (xl + xl.T) / 2]]) >> 0
        constraints.append(lmi)
        lmis.append((lmi, low.shape[1]))
        objective = objective + red.mults[i] * cp.trace(t)
    prob = cp.Problem(cp.Minimize(objective), constraints)

    def solution() -> SymmetricSolution:
        if ke.value is None:
            raise RuntimeError(f"cvxpy/{solver} did not solve the symmetric reduction (status {prob.status})")
        # the solver's point projected onto the PSD cone (a first-order solver's is PSD only to its tolerance)
        kev = _psd_part(ke.value)
        kov = _psd_part(ko.value) if red.no else np.zeros((0, 0))
        gram = me @ kev @ me.T + (mo @ kov @ mo.T if red.no else 0)
        gram = (gram + gram.T) / 2
        gram /= float(np.diag(gram).max())
        # the certificate, from the dual blocks
        phis = []
        for i, item in enumerate(lmis):
            if item is None:
                phis.append(np.zeros_like(gblocks[i]))
                continue
            lmi, k = item
            dual = np.asarray(lmi.dual_value)
            phis.append((dual[k:, k:] + dual[k:, k:].T) / 2 / red.mults[i])
        lam_dual = np.zeros(n * n)
        duals = np.asarray(constraints[0].dual_value, dtype=float).ravel()
        for k, c in enumerate(half):
            i, j = divmod(c, n)
            if i == j:
                lam_dual[c] = duals[k]
            else:
                lam_dual[c] = lam_dual[j * n + i] = duals[k] / 2
        # the solver's cost multipliers and the diagonal heuristics; a first-order solver's multipliers
        # are rough, so s(D) is polished. Restricted: s(D) over the kept subspace only (module docstring)
        lam_dual = np.maximum(lam_dual, 1e-12 * max(float(lam_dual.max()), 1e-300))
        bound = dual_bound(
            red, gblocks, phis, gram, extra=(lam_dual,), deadline=None if max_seconds is None else t0 + max_seconds
        )
        out = SymmetricSolution(
            gram, bound, float(prob.value) * red.m, time.perf_counter() - t0, str(prob.status), restrict
        )
        log.info(
            "qsplus: %ssymmetric reduction of %d pairs over [%d]^%d: SDP %.10g, bound %.10g, %.1f s (%s)",
            "restricted " if restrict else "",
            red.m,
            n,
            d,
            out.sdp_value,
            bound,
            out.seconds,
            prob.status,
        )
        return out

    first = dict(solver_options or {})
    if max_seconds is not None and solver in TIME_LIMIT_OPTION:
        first[TIME_LIMIT_OPTION[solver]] = max(max_seconds - (time.perf_counter() - t0), 1e-3)
    try:
        prob.solve(solver=solver, verbose=verbose, **first)
        t_after = time.perf_counter()
        out = solution()
    except (RuntimeError, cp.error.SolverError):
        if max_seconds is not None and time.perf_counter() - t0 >= max_seconds:
            raise TimeLimit from None  # stopped by its time limit before it had a point
        raise
    if accept is None or accept(out):
        return out
    after = time.perf_counter() - t_after  # certifying and accepting a solution ([50]^40: the polish, 86 s)
    for options in tighter:
        # the same problem again from the last point (SCS's warm start): measured on the restricted
        # [30]^40 prefix:1+affine:2, 1e-5 then 1e-6 took 90 + 130 s, 1e-6 from the start 465 s
        options = dict(options)
        if max_seconds is not None:
            left = max_seconds - (time.perf_counter() - t0) - after  # the solution's own certificate fits in too
            if left <= 0:
                break
            options[TIME_LIMIT_OPTION.get(solver, "time_limit_secs")] = left
        try:
            prob.solve(solver=solver, verbose=verbose, warm_start=True, **options)
            out = solution()
        except (RuntimeError, cp.error.SolverError) as err:  # stopped without a point: the last one stays
            log.info("qsplus: the symmetric reduction's tighter solve gave no point (%s)", err)
            break
        if accept(out):
            break
    return out
