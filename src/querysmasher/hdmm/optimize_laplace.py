r"""HDMM's strategy optimisers for Laplace noise (pure ε-DP): the L1 objective ||A||_1^2 tr(W^T W (A^T A)^+).

The optimisers (McKenna et al., §4, §6, §8), each returning a strategy of sensitivity 1:

* :func:`opt_0` — p-Identity: A(Θ) = [I; Θ] D with Θ >= 0 (p x n) and D the column normalisation,
  minimising tr(G (A^T A)^-1) with L-BFGS-B from random starts (A is always full rank);
* :func:`opt_kron` — OPT_⊗: ⊗_i A_i with p-Identity factors; the error Σ_j w_j ∏_i tr(G_ji X_i^-1)
  is minimised one attribute at a time on the surrogate Gram of :mod:`.optimize` (HDMM's Eq. 5),
  warm-started, until a sweep gains less than ``tol`` (one OPT_0 per attribute when the workload is
  one view); attributes where every term is the total get A_i = 1^T, optimal for them;
* :func:`opt_plus` — OPT_+: one OPT_⊗ strategy per group; with group errors E_g at sensitivity 1 the
  budget split ε_g ∝ E_g^(1/3) gives total variance 2 (Σ_g E_g^(1/3))^3 / ε^2 (:func:`laplace_allocation`);
* :func:`opt_marginals` — OPT_M: weighted marginals A = [θ_S M_S]_S, sensitivity Σ θ_S; X = Σ θ_S^2
  M_S^T M_S lies in the marginal algebra, whose eigenvalue on residual space T is
  κ_T = Σ_{S ⊇ T} θ_S^2 ∏_{i∈T} (n_i - 1)/n_i ∏_{i∈S\T} 1/n_i (in the unit-diagonal blocks of
  :func:`.optimize.opt_marginals`), so the error is (Σ θ)^2 Σ_T h_T / κ_T, minimised over θ >= 0
  with L-BFGS-B. S ranges over all subsets of the active attributes when there are at most
  ``MAX_MARGINALS`` of them (the paper's search space), else over the subsets of the workload's views.

>>> from querysmasher.schema import parse_schema
>>> from querysmasher.workload import parse_workload
>>> w = ImplicitWorkload.from_workload(parse_workload("prefix:1", parse_schema("synthetic:n=20,d=1")))
>>> s = opt_kron(w, rng=np.random.default_rng(0))  # p = 2 extra queries
>>> s.sensitivity(), round(s.error(w), 2), s.factors[0][0].shape  # the identity has error Σ_c ||prefix c||^2 = 210
(1.0, 154.08, (22, 20))
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from scipy.optimize import minimize

from ..linalg import centering
from ..threads import at_most
from .implicit import TOTAL, ImplicitWorkload, KronStrategy
from .laplace import LaplaceStrategy
from .optimize import separable

__all__ = ["p_identity", "default_p", "opt_0", "opt_kron", "opt_plus", "opt_marginals", "MAX_MARGINALS"]

MAX_MARGINALS = 1024
DEFAULT_MAX_SWEEPS = 50
DEFAULT_STARTS = 8  # L-BFGS-B starts per explicit OPT_0 solve: p-Identity objectives have local minima
DEFAULT_BLOCK_STARTS = 2  # random starts per OPT_⊗ block solve, besides the current Θ_i (many solves)
DEFAULT_TOL = 1e-6  # stop OPT_⊗ when a sweep lowers the error by less than this fraction
_LBFGS = {"maxiter": 1000, "ftol": 1e-10}


# --- OPT_0 over p-Identity strategies ------------------------------------------------------------


def default_p(n: int) -> int:
    """Extra queries of a p-Identity strategy on n values: ceil(n/16), the paper's choice (p = n/16)."""
    return max(1, math.ceil(n / 16))


def p_identity(theta: np.ndarray) -> np.ndarray:
    """A(Θ) = [I; Θ] D: n + p rows, every column of L1 norm 1."""
    n = theta.shape[1]
    return np.vstack([np.eye(n), theta]) / (1.0 + theta.sum(axis=0))


def _objective(flat: np.ndarray, g: np.ndarray, p: int) -> tuple[float, np.ndarray]:
    """tr(G (A^T A)^-1) and its gradient in Θ: with s = 1 + 1^T Θ, M = I + Θ^T Θ, it is tr(Ĝ M^-1),
    Ĝ = diag(s) G diag(s)."""
    n = g.shape[0]
    theta = flat.reshape(p, n)
    s = 1.0 + theta.sum(axis=0)
    minv = np.linalg.inv(np.eye(n) + theta.T @ theta)
    minv = (minv + minv.T) / 2
    ghat = g * np.outer(s, s)
    b = minv @ ghat @ minv
    value = float(np.sum(ghat * minv))
    grad = -2.0 * theta @ b + 2.0 * ((g * minv) @ s)[None, :]
    return value, grad.ravel()


def opt_0(
    g: np.ndarray,
    *,
    rng: np.random.Generator,
    p: int | None = None,
    restarts: int = DEFAULT_STARTS,
    init: np.ndarray | None = None,
) -> np.ndarray:
    """Θ (p x n) of the best p-Identity strategy found for Gram ``g``: L-BFGS-B from ``init`` (if
    given) and uniform random starts, ``restarts`` runs in all, and Θ = 0 (the identity)."""
    n = g.shape[0]
    p = default_p(n) if p is None else p
    g = g / np.trace(g)
    starts = ([init] if init is not None else []) + [
        rng.uniform(0, 1, (p, n)) for _ in range(max(0, restarts - (init is not None)))
    ]
    best = (float(np.trace(g)), np.zeros((p, n)))  # Θ = 0, the identity: a stationary point the starts may miss
    with at_most(1):  # small products: BLAS threads cost ~20x here (measured, n = 72)
        for start in starts or [rng.uniform(0, 1, (p, n))]:
            r = minimize(
                _objective,
                start.ravel(),
                args=(g, p),
                jac=True,
                method="L-BFGS-B",
                bounds=[(0, None)] * (p * n),
                options=_LBFGS,
            )
            theta = np.maximum(r.x.reshape(p, n), 0.0)
            value = _objective(theta.ravel(), g, p)[0]
            if value < best[0]:
                best = (value, theta)
    return best[1]


# --- OPT_⊗ and OPT_+ -------------------------------------------------------------------------------


def _traces(grams: tuple[np.ndarray, ...], a: np.ndarray) -> np.ndarray:
    x = a.T @ a
    xinv = np.linalg.pinv((x + x.T) / 2, hermitian=True)
    return np.array([float(np.sum(gr * xinv)) for gr in grams])


class _KronState:
    """Per-attribute p-Identity parameters Θ_i of one Kronecker strategy and their traces tr(G_i,f X_i^-1)."""

    def __init__(self, workload: ImplicitWorkload, thetas: dict[int, np.ndarray]):
        self.w, self.thetas = workload, dict(thetas)
        self.traces = {i: _traces(workload.grams[i], p_identity(t)) for i, t in self.thetas.items()}

    def term_errors(self) -> np.ndarray:
        e = self.w.weights.copy()
        for i, t in self.traces.items():
            e *= t[self.w.index[:, i]]
        return e

    def surrogate(self, i: int, e: np.ndarray) -> np.ndarray:
        """Ĝ_i = Σ_f (Σ_{j: F_ji = f} e_j / tr(G_i,f X_i^-1)) G_i,f: its error under Θ_i is the total error."""
        coef = np.bincount(self.w.index[:, i], weights=e, minlength=len(self.w.grams[i])) / self.traces[i]
        return sum(c * gr for c, gr in zip(coef, self.w.grams[i]) if c > 0)


class _BlockSolver:
    """OPT_0 from the current Θ_i and ``starts`` random points; equal (surrogate, Θ_i) pairs share one solve."""

    def __init__(self, rng: np.random.Generator, starts: int):
        self.rng, self.starts, self._solved = rng, starts, {}

    def __call__(self, g: np.ndarray, theta: np.ndarray) -> np.ndarray:
        key = np.round(g / np.trace(g), 12).tobytes() + theta.tobytes()
        if key not in self._solved:
            self._solved[key] = opt_0(g, rng=self.rng, p=theta.shape[0], init=theta, restarts=1 + self.starts)
        return self._solved[key]


def _sweep_jacobi(state: _KronState, solve: _BlockSolver) -> _KronState:
    e = state.term_errors()
    return _KronState(state.w, {i: solve(state.surrogate(i, e), t) for i, t in state.thetas.items()})


def _sweep_gauss_seidel(state: _KronState, solve: _BlockSolver) -> _KronState:
    out = _KronState(state.w, state.thetas)
    for i in list(out.thetas):
        theta = solve(out.surrogate(i, out.term_errors()), out.thetas[i])
        out.thetas[i], out.traces[i] = theta, _traces(out.w.grams[i], p_identity(theta))
    return out


def _separable_kron(
    workload: ImplicitWorkload,
    active: list[int],
    *,
    rng: np.random.Generator,
    restarts: int,
    p: int | None,
    starts: int,
    memo: dict,
) -> LaplaceStrategy:
    """OPT_⊗ of a :func:`~.optimize.separable` workload: the error is w ∏_i tr(G_i X_i^-1), so each
    active attribute gets OPT_0 on its own Gram (``restarts`` x (1 + ``starts``) random starts, as
    many as the block-coordinate runs begin with), shared through ``memo`` by every group of a plan
    with the same Gram."""
    factors = []
    for i, n in enumerate(workload.sizes):
        if i not in active:
            factors.append(np.ones((1, n)))
            continue
        g = workload.grams[i][workload.index[0, i]]
        pi = default_p(n) if p is None else p
        key = (np.round(g / np.trace(g), 12).tobytes(), g.shape, pi)
        if key not in memo:
            memo[key] = p_identity(opt_0(g, rng=rng, p=pi, restarts=max(1, restarts) * (1 + starts)))
        factors.append(memo[key])
    return LaplaceStrategy.single(tuple(factors))


def opt_kron(
    workload: ImplicitWorkload,
    *,
    rng: np.random.Generator,
    restarts: int = 1,
    p: int | None = None,
    starts: int = DEFAULT_BLOCK_STARTS,
    max_sweeps: int = DEFAULT_MAX_SWEEPS,
    tol: float = DEFAULT_TOL,
    memo: dict | None = None,
    **_ignored,
) -> LaplaceStrategy:
    """OPT_⊗ with p-Identity factors: the best of ``restarts`` block-coordinate runs from random Θ.

    Each block minimiser is OPT_0 on the surrogate from the current Θ_i and ``starts`` random points.
    All blocks are first minimised from the same iterate (Jacobi), so exchangeable attributes share one
    solve; a Jacobi sweep that does not lower the error is replaced by a sequential (Gauss-Seidel) one,
    which cannot raise it (every block solve includes the current Θ_i). A :func:`~.optimize.separable`
    workload (one view) needs no alternation: :func:`_separable_kron`, memoised in ``memo``.
    """
    active = workload.active()
    if separable(workload):
        return _separable_kron(
            workload, active, rng=rng, restarts=restarts, p=p, starts=starts, memo={} if memo is None else memo
        )
    fixed = {i: np.ones((1, n)) for i, n in enumerate(workload.sizes) if i not in active}
    solve = _BlockSolver(rng, starts)
    best: tuple[float, _KronState] | None = None
    for _ in range(max(1, restarts)):
        # exchangeable attributes (same size) start equal, so Jacobi sweeps keep sharing their solves
        inits = {
            n: rng.uniform(0, 1, (default_p(n) if p is None else p, n))
            for n in sorted({workload.sizes[i] for i in active})
        }
        state = _KronState(workload, {i: inits[workload.sizes[i]] for i in active})
        err = float(state.term_errors().sum())
        for _ in range(max_sweeps):
            nxt = _sweep_jacobi(state, solve)
            new_err = float(nxt.term_errors().sum())
            if new_err > err:
                nxt = _sweep_gauss_seidel(state, solve)
                new_err = float(nxt.term_errors().sum())
            if new_err > err:
                break
            state, improvement, err = nxt, err - new_err, new_err
            if improvement <= tol * err:
                break
        if best is None or err < best[0]:
            best = (err, state)
    return LaplaceStrategy.single(
        tuple(fixed[i] if i in fixed else p_identity(best[1].thetas[i]) for i in range(len(workload.sizes)))
    )


def opt_plus(workload: ImplicitWorkload, groups, **options) -> list[LaplaceStrategy]:
    """OPT_+: one OPT_⊗ strategy per group of terms (the plan splits ε between them)."""
    return [opt_kron(workload.subset(g), **options) for g in groups]


# --- OPT_M -----------------------------------------------------------------------------------------


def _marginal_subsets(workload: ImplicitWorkload) -> tuple[list[tuple[int, ...]], set[tuple[int, ...]]]:
    """(candidate marginals S, down-closed; the views' supports)."""
    sizes = workload.sizes
    supports = {
        tuple(i for i in range(len(sizes)) if workload.names[i][row[i]] != TOTAL and sizes[i] > 1)
        for row in workload.index
    }
    active = sorted(set().union(*supports))
    pool = [tuple(active)] if 2 ** len(active) <= MAX_MARGINALS else supports
    out = {t for s in pool for k in range(len(s) + 1) for t in itertools.combinations(s, k)}
    return sorted(out, key=lambda t: (len(t), t)), supports


def opt_marginals(
    workload: ImplicitWorkload, *, rng: np.random.Generator, restarts: int = 1, **_ignored
) -> LaplaceStrategy:
    """OPT_M: weights θ_S of the marginals S minimising (Σ θ)^2 Σ_T h_T / κ_T(θ) (see the module docstring)."""
    sizes = workload.sizes
    subsets, supports = _marginal_subsets(workload)
    pos = {t: k for k, t in enumerate(subsets)}  # residual spaces T: the same down-closed family
    mats = tuple((np.ones((n, n)), centering(n) * (n / (n - 1))) if n > 1 else (np.ones((1, 1)),) for n in sizes)
    index = np.zeros((len(subsets), len(sizes)), dtype=np.int64)
    for b, t in enumerate(subsets):
        index[b, list(t)] = 1
    h = KronStrategy(sizes, mats, index, np.ones(len(subsets))).block_variances(workload)
    k = np.zeros((len(subsets), len(subsets)))  # K[T, S]
    for s in subsets:
        for r in range(len(s) + 1):
            for t in itertools.combinations(s, r):
                k[pos[t], pos[s]] = math.prod((sizes[i] - 1) / sizes[i] for i in t) / math.prod(
                    sizes[i] for i in s if i not in t
                )
    scale = h.sum()
    need = h > 1e-12 * h.max()  # rounding leaves ~1e-16 on spaces no view touches

    def f(theta: np.ndarray) -> tuple[float, np.ndarray]:
        kappa = k[need] @ theta**2
        if np.any(kappa <= 0):
            return np.inf, np.zeros_like(theta)
        big_l, r = theta.sum(), float(np.sum(h[need] / kappa)) / scale
        grad = 2 * big_l * r - big_l**2 * 2 * theta * ((h[need] / kappa**2) @ k[need]) / scale
        return big_l**2 * r, grad

    # θ_S = 0 is stationary for every S (the objective is not convex in θ): start from all marginals,
    # from the workload's views only, from the largest marginal (all active attributes) and at random
    starts = [np.ones(len(subsets)), np.array([float(t in supports) for t in subsets]), np.eye(len(subsets))[-1]]
    best = None
    with at_most(1):
        for start in starts + [rng.uniform(0.1, 1, len(subsets)) for _ in range(max(0, restarts - 1))]:
            r = minimize(f, start, jac=True, method="L-BFGS-B", bounds=[(0, None)] * len(subsets), options=_LBFGS)
            if best is None or r.fun < best.fun:
                best = r
    theta = np.maximum(best.x, 0.0)
    keep = theta > 0
    theta = theta[keep] / theta[keep].sum()
    factor_index = np.zeros((int(keep.sum()), len(sizes)), dtype=np.int64)  # 0 = 1^T, 1 = I
    for b, t in enumerate(s for s, kept in zip(subsets, keep) if kept):
        factor_index[b, list(t)] = 1
    return LaplaceStrategy(sizes, tuple((np.ones((1, n)), np.eye(n)) for n in sizes), factor_index, theta)
