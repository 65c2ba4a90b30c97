"""The per-view solver interface and the mechanism it returns.

A solver maps a residual view's subworkload Gram G to a Gaussian mechanism at privacy cost 1,
described by its privacy Gram X = B^T Sigma^-1 B (max diag(X) <= 1, range(X) ⊇ range(G)). Its
weighted sum of variances over the subworkload is L = tr(G X^+). Any factor B of X with unit noise
realises it (measure), and the generalised least-squares estimate X^+ B^T y reconstructs it.

Three representations keep large views implicit:

* ``kron``: X = X_1 ⊗ ... ⊗ X_k, one small matrix per attribute (RP, WFF and QS on one-term Grams);
* ``dense``: one c x c matrix (QS on several-term Grams);
* ``fourier``: X = F^H diag(w) F, with F the unnormalised multi-dimensional DFT and w a table over
  frequencies (WFF on several-term Grams).

The full contract a solver must meet (X = P X P on the residual subspace, what ``lower_bound``
must mean, plugins) is in ``docs/solvers.md``; :mod:`querysmasher.testing` checks it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

from ..decompose import SubworkloadGram
from ..linalg import MatrixStore, kron_dense, pinv_psd  # pinv_psd: re-exported, solvers import it from here

__all__ = ["ViewMechanism", "ViewSolution", "ViewSolver", "mechanism_loss", "pinv_psd"]


@dataclass(frozen=True, eq=False)
class ViewMechanism:
    """A mechanism over one residual view, at privacy cost <= 1."""

    kind: Literal["kron", "dense", "fourier"]
    sizes: tuple[int, ...]
    mats: tuple[np.ndarray, ...]

    def __post_init__(self) -> None:
        if self.kind == "kron" and len(self.mats) != len(self.sizes):
            raise ValueError("a kron mechanism needs one factor per attribute")
        if self.kind in ("dense", "fourier") and len(self.mats) != 1:
            raise ValueError(f"a {self.kind} mechanism holds one array")

    @property
    def cells(self) -> int:
        return math.prod(self.sizes)

    def __repr__(self) -> str:
        return f"ViewMechanism({self.kind}, sizes={self.sizes})"

    def max_diag(self) -> float:
        """Privacy cost of the mechanism: the largest diagonal entry of X."""
        if self.kind == "kron":
            return math.prod(float(np.diag(m).max()) for m in self.mats) if self.mats else 1.0
        if self.kind == "dense":
            return float(np.diag(self.mats[0]).max())
        return float(self.mats[0].sum())  # |F[f, x]| = 1: every diagonal entry is sum(w)

    def replace_cost(self) -> float:
        """Privacy cost when one record is replaced by another: max over cell pairs of
        (e_i - e_j)^T X (e_i - e_j). Exact for fourier and for views up to ``EXACT_PAIR_CELLS``
        cells; above that an upper bound for kron (see :func:`_kron_pair_bound`).

        >>> ViewMechanism("kron", (3,), (np.eye(3),)).replace_cost()
        2.0
        """
        if self.cells < 2:
            return 0.0
        if self.kind == "fourier":
            # Re X[x, y] = Re c(x - y) with c = fftn(w) (|F| = 1), so the cost is 2 (c(0) - min Re c(d ≠ 0)).
            c = np.real(np.fft.fftn(self.mats[0])).ravel()
            return float(2.0 * (c[0] - c[1:].min()))
        if self.kind == "dense" or self.cells <= EXACT_PAIR_CELLS:
            return _max_pair_distance(self.dense_x())
        return _kron_pair_bound(self.mats)

    def dense_x(self) -> np.ndarray:
        """The explicit privacy Gram X (small views and tests)."""
        if self.kind == "kron":
            return kron_dense(self.mats)
        if self.kind == "dense":
            return self.mats[0]
        f = _dft_matrix(self.sizes)
        return np.real(f.conj().T @ (self.mats[0].ravel()[:, None] * f))


EXACT_PAIR_CELLS = 4096  # replace costs are computed exactly over all cell pairs up to this many cells


def _max_pair_distance(x: np.ndarray, rows: int = 512) -> float:
    """max over i != j of x_ii + x_jj - 2 x_ij, in row blocks (no cells^2 temporary)."""
    d = np.diag(x)
    best = 0.0
    for lo in range(0, x.shape[0], rows):
        block = d[lo:lo + rows, None] + d[None, :] - 2.0 * x[lo:lo + rows]
        best = max(best, float(block.max()))
    return best


def _kron_pair_bound(mats: tuple[np.ndarray, ...]) -> float:
    """Upper bound on the replace cost of X_1 ⊗ ... ⊗ X_k for views too large to enumerate.

    With S_k = X_k^(1/2) and s_k(i) its columns, S e_i - S e_j telescopes into k terms that differ in
    one factor, so sqrt(cost) <= sum_k sqrt(r_k) prod_{l != k} sqrt(d_l) (r_k, d_l: each factor's
    replace cost and max diagonal); also cost <= 4 max diag. Over-reporting is safe.
    """
    d = [float(np.diag(m).max()) for m in mats]
    r = [_max_pair_distance(m) for m in mats]
    tele = sum(math.sqrt(rk) * math.prod(math.sqrt(dl) for l, dl in enumerate(d) if l != k) for k, rk in enumerate(r)) ** 2
    return min(tele, 4.0 * math.prod(d))


def _dft_matrix(sizes: tuple[int, ...]) -> np.ndarray:
    out = np.ones((1, 1), dtype=complex)
    for n in sizes:
        out = np.kron(out, np.fft.fft(np.eye(n)))
    return out


@dataclass(frozen=True, eq=False)
class ViewSolution:
    """A solver's answer for one (unit-trace) subworkload Gram."""

    mechanism: ViewMechanism
    loss: float  # L = tr(G X^+) at privacy cost 1
    lower_bound: float  # certified lower bound on the optimal L (0.0 when the solver has none)
    solver: str  # which solver produced the mechanism
    note: str = ""  # e.g. why a fallback was used
    gap: float = float("nan")

    def __repr__(self) -> str:
        note = f", note={self.note!r}" if self.note else ""
        return f"ViewSolution({self.solver}, {self.mechanism.kind} {self.mechanism.sizes}, loss={self.loss:.6g}, lower_bound={self.lower_bound:.6g}, gap={self.gap:.2e}{note})"


class ViewSolver(Protocol):
    """Anything with a name and ``solve(gram, store) -> ViewSolution``.

    A solver may also define ``prepare(decomposition)``, called once before any solve, to read
    workload-wide context (RP+ derives its per-attribute bases from it).
    """

    name: str

    def solve(self, gram: SubworkloadGram, store: MatrixStore) -> ViewSolution: ...


def mechanism_loss(gram: SubworkloadGram, store: MatrixStore, mech: ViewMechanism) -> float:
    """tr(G X^+), factor-wise when both are Kronecker, densely otherwise (small views only)."""
    if mech.kind == "kron" and all(not t.dense for t in gram.terms):
        pinvs = [pinv_psd(m) for m in mech.mats]
        return float(sum(t.coef * math.prod(float(np.sum(store[f] * p)) for f, p in zip(t.factors, pinvs)) for t in gram.terms))
    return float(np.sum(gram.dense(store) * pinv_psd(mech.dense_x())))
