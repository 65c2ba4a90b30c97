"""Closed-form per-view solvers: ResidualPlanner (``rp``) and Weighted Fourier Factorizations (``wff``).

Both are QuerySmasher with a fixed basis (paper §7):

* ``rp`` measures (⊗ Sub_{n_i}) x with noise ⊗ (Sub Sub^T); its privacy Gram is ⊗ C_i, whose
  diagonal is ∏ (n_i - 1)/n_i, so at cost 1: L = ∏ (n_i - 1)/n_i · tr(G).
* ``wff`` adds independent noise to the Fourier coefficients whose frequency is non-zero along every
  attribute. With a_f = v_f^H G v_f / c^2 (the weighted |IFFT(q)[f]|^2), the optimal variances give
  X = F^H diag(w) F with w_f = sqrt(a_f)/γ, γ = Σ_f sqrt(a_f) and L = γ^2. (Summing over both
  members of each conjugate pair is the paper's m_f = 4 rule: sqrt(4 a_f) = 2 sqrt(a_f).) For a
  one-term Gram coef·⊗G_i everything factorises: L = coef ∏ γ_i^2, γ_i = Σ_{f≠0} sqrt(d_i(f))/n_i
  with d_i = diag(F_i G_i F_i^H), and X = ⊗ X_i — no multi-dimensional FFT is needed.

>>> from querysmasher.schema import parse_schema
>>> from querysmasher.workload import parse_workload
>>> from querysmasher.decompose import decompose
>>> d = decompose(parse_workload("marginal:1", parse_schema("cps")))
>>> g = d.grams[(2,)]
>>> round(WFFSolver().solve(g, d.store).loss, 6) == round(RPSolver().solve(g, d.store).loss, 6)
True
"""

from __future__ import annotations

import math

import numpy as np

from ..decompose import SubworkloadGram, is_factor
from ..linalg import MatrixStore, centering, stored_shape
from .base import SolveEstimate, ViewMechanism, ViewSolution

__all__ = [
    "RPSolver",
    "WFFSolver",
    "fourier_diag",
    "fourier_diag_factor",
    "wff_weights_1d",
    "circulant_from_weights",
    "wff_bytes",
]

# Peak bytes of WFF's Fourier weights per entry transformed (complex FFT passes, one per axis,
# |.|^2 and its copy): rows x cells entries for a term stored as a factor, c x c for a dense one
# (its fftn and ifftn). Measured with bench/solve_estimates.py.
WFF_FACTOR_BYTES = 48
WFF_DENSE_BYTES = 64
WFF_SECONDS_PER_ENTRY = 3e-8  # per transformed entry and log2(cells)


class RPSolver:
    """ResidualPlanner's fixed residual basis (optimal for marginals)."""

    name = "rp"
    objectives = ("sum", "max")
    exact_in_family = True  # its sum solution is optimal within its own family (fixed bases)
    fixed_shapes = True  # the mechanism's shape does not depend on the query weights

    def solve(self, gram: SubworkloadGram, store: MatrixStore) -> ViewSolution:
        factors = tuple(centering(n) * (n / (n - 1)) for n in gram.sizes)
        loss = math.prod((n - 1) / n for n in gram.sizes) * gram.trace
        return ViewSolution(ViewMechanism("kron", gram.sizes, factors), loss, 0.0, self.name)

    def estimate(self, gram: SubworkloadGram, store: MatrixStore) -> SolveEstimate:
        """A closed form: one n x n factor per attribute, nothing of the view's size.

        >>> from querysmasher.decompose import GramTerm
        >>> g = SubworkloadGram((0, 1), (100, 100), (GramTerm(1.0, ("a",), True),))
        >>> RPSolver().estimate(g, {}).peak_bytes == 2 * 8 * 100 ** 2
        True
        """
        sq = 8.0 * sum(n * n for n in gram.sizes)
        return SolveEstimate(0.001 + 1e-9 * sq, sq, sq, "kron")


def fourier_diag(g: np.ndarray, sizes: tuple[int, ...]) -> np.ndarray:
    """diag(F G F^H) as a table over frequencies (real; F the unnormalised DFT over ``sizes``)."""
    k = len(sizes)
    t = g.reshape(tuple(sizes) * 2)
    t = np.fft.fftn(t, axes=tuple(range(k)))
    t = np.fft.ifftn(t, axes=tuple(range(k, 2 * k))) * math.prod(sizes)
    c = math.prod(sizes)
    flat = t.reshape(c, c)
    return np.real(np.diagonal(flat)).reshape(sizes).copy()


def fourier_diag_factor(f: np.ndarray, sizes: tuple[int, ...]) -> np.ndarray:
    """diag(F (f^T f) F^H) for a factor f (rows x cells): the sum over rows of |FFT(row)|^2."""
    t = f.reshape((f.shape[0],) + tuple(sizes))
    return (np.abs(np.fft.fftn(t, axes=tuple(range(1, len(sizes) + 1)))) ** 2).sum(axis=0)


def wff_weights_1d(g: np.ndarray) -> tuple[np.ndarray, float]:
    """(w, γ) for one factor: w_f = sqrt(d(f))/(n γ) on f != 0, γ = Σ_{f≠0} sqrt(d(f))/n."""
    n = g.shape[0]
    d = np.clip(fourier_diag(g, (n,)), 0.0, None)
    d[0] = 0.0
    s = np.sqrt(d)
    gamma = float(s.sum()) / n
    return (s / (n * gamma) if gamma > 0 else s), gamma


def circulant_from_weights(w: np.ndarray) -> np.ndarray:
    """F^H diag(w) F for the unnormalised 1-D DFT F (a real symmetric circulant when w is even)."""
    n = w.shape[0]
    f = np.fft.fft(np.eye(n))
    return np.real(f.conj().T @ (w[:, None] * f))


def wff_bytes(gram: SubworkloadGram, store: MatrixStore) -> tuple[float, float]:
    """(peak bytes, seconds) of WFF's Fourier weights of a Gram with several terms: no c x c matrix
    for terms stored as a factor (rows x cells), c x c transforms for dense terms stored whole."""
    c = gram.cells
    peak, entries = 8.0 * c, 0.0
    for t in gram.terms:
        if t.dense:
            rows, cols = stored_shape(store, t.factors[0])
            if rows < cols:  # stored as a factor (decompose.is_factor)
                peak = max(peak, 8.0 * c + WFF_FACTOR_BYTES * rows * c)
                entries += rows * c
            else:
                peak = max(peak, 8.0 * c + WFF_DENSE_BYTES * c * c)
                entries += 2.0 * c * c
        else:
            entries += sum(n * n for n in gram.sizes) + c
    return peak, 0.001 + WFF_SECONDS_PER_ENTRY * entries * math.log2(max(c, 2))


class WFFSolver:
    """Weighted Fourier Factorizations (Lebeda et al.), with the paper's parameter setting."""

    name = "wff"
    objectives = ("sum", "max")
    exact_in_family = True  # its closed form is optimal within the Fourier family

    def estimate(self, gram: SubworkloadGram, store: MatrixStore) -> SolveEstimate:
        """One n x n factor per attribute for a one-term Gram; otherwise the FFTs of its terms
        (:func:`wff_bytes`): O(rows x cells) for terms stored as a factor, c^2 only for dense
        terms stored whole.

        >>> from querysmasher.decompose import GramTerm
        >>> g = SubworkloadGram((0, 1), (100, 100), (GramTerm(1.0, ("f",), True),))
        >>> e = WFFSolver().estimate(g, {"f": np.zeros((199, 10_000))})
        >>> e.peak_bytes < 10_000 ** 2, e.path
        (True, 'fourier')
        """
        if not gram.sizes or gram.single_kron:
            sq = 8.0 * sum(n * n for n in gram.sizes)
            return SolveEstimate(0.001 + 0.002 * len(gram.sizes), 4 * sq, sq, "kron")
        peak, seconds = wff_bytes(gram, store)
        return SolveEstimate(seconds, peak, 8.0 * gram.cells, "fourier")

    def solve(self, gram: SubworkloadGram, store: MatrixStore) -> ViewSolution:
        sizes = gram.sizes
        if not sizes:
            return ViewSolution(ViewMechanism("kron", (), ()), gram.trace, gram.trace, self.name)
        if gram.single_kron:
            t = gram.terms[0]
            ws, gammas = zip(*(wff_weights_1d(store[f]) for f in t.factors))
            factors = tuple(circulant_from_weights(w) for w in ws)
            loss = t.coef * math.prod(gm * gm for gm in gammas)
            return ViewSolution(ViewMechanism("kron", sizes, factors), loss, 0.0, self.name)
        c = math.prod(sizes)
        a = np.zeros(sizes)
        for t in gram.terms:
            if t.dense:
                m = store[t.factors[0]]
                a += t.coef * (fourier_diag_factor(m, sizes) if is_factor(m) else fourier_diag(m, sizes))
            else:
                tab = np.ones(())
                for f, n in zip(t.factors, sizes):
                    tab = np.multiply.outer(tab, fourier_diag(store[f], (n,)))
                a += t.coef * tab
        a = np.clip(a, 0.0, None) / c**2
        valid = np.ones(sizes, dtype=bool)
        for axis in range(len(sizes)):
            idx = [slice(None)] * len(sizes)
            idx[axis] = 0
            valid[tuple(idx)] = False
        s = np.where(valid, np.sqrt(a), 0.0)
        gamma = float(s.sum())
        w = s / gamma if gamma > 0 else s
        return ViewSolution(ViewMechanism("fourier", sizes, (w,)), gamma * gamma, 0.0, self.name)
