"""The per-view solver interface and the mechanism it returns.

A solver maps a residual view's subworkload Gram G to a Gaussian mechanism at privacy cost 1,
described by its privacy Gram X = B^T Sigma^-1 B (max diag(X) <= 1, range(X) ⊇ range(G)). Its
weighted sum of variances over the subworkload is L = tr(G X^+). Any factor B of X with unit noise
realises it (measure), and the generalised least-squares estimate X^+ B^T y reconstructs it.

Three representations keep large views implicit:

* ``kron``: X = X_1 ⊗ ... ⊗ X_k, one small matrix per attribute (RP, WFF and QS on one-term Grams);
* ``dense``: one c x c matrix (QS on several-term Grams);
* ``fourier``: X = F^H diag(w) F, with F the unnormalised multi-dimensional DFT and w a table over
  frequencies (WFF on several-term Grams);
* ``lowrank``: X = V diag(s) V^T with V (c x r) orthonormal columns and s > 0 (QS on several-term
  Grams of rank r < c): it is measured as diag(s)^½ V^T x, r noisy values instead of c, and never
  needs a c x c matrix.

The full contract a solver must meet (X = P X P on the residual subspace, what ``lower_bound``
must mean, plugins) is in ``docs/solvers.md``; :mod:`querysmasher.testing` checks it.

>>> v = np.array([[0.6], [0.8]])  # X = 2 v v^T, rank 1 over 2 cells
>>> m = ViewMechanism("lowrank", (2,), (v, np.array([2.0])))
>>> round(m.max_diag(), 12), m.outputs, m.dense_x().round(12).tolist()
(1.28, 1, [[0.72, 0.96], [0.96, 1.28]])
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, Protocol

import numpy as np

from ..decompose import SubworkloadGram
from ..linalg import MatrixStore, content_hash, kron_dense, pinv_psd, psd_eigh, psd_power  # pinv_psd: re-exported, solvers import it from here

__all__ = ["ViewMechanism", "ViewSolution", "ViewSolver", "mechanism_loss", "pinv_psd", "shared_psd_eigh", "shared_psd_power", "prime_eigh"]


_SMALL_EIGH: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # content hash -> psd_eigh, for Kronecker factors
_SMALL_CELLS = 256 * 256  # factors up to this size are shared by content (at most _SMALL_ENTRIES of them)
_SMALL_ENTRIES = 1024


def shared_psd_eigh(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """psd_eigh, once per distinct small matrix: the Kronecker mechanisms of a plan repeat the same
    1-D factors over hundreds of views and solution keys (measure did 375 eigendecompositions for
    Adult's hybrid:2, of a few dozen distinct factors)."""
    if m.size > _SMALL_CELLS:
        return psd_eigh(m)
    key = content_hash(str(m.shape), str(m.dtype), np.ascontiguousarray(m).tobytes())
    hit = _SMALL_EIGH.get(key)
    if hit is None:
        if len(_SMALL_EIGH) >= _SMALL_ENTRIES:
            _SMALL_EIGH.clear()
        hit = _SMALL_EIGH[key] = psd_eigh(m)
    return hit


_SMALL_POWER: dict[tuple[str, float], np.ndarray] = {}  # (content hash, power) -> X^power, for Kronecker factors


def shared_psd_power(m: np.ndarray, power: float) -> np.ndarray:
    """:func:`~querysmasher.linalg.psd_power` from :func:`shared_psd_eigh`, once per distinct small
    matrix and power: RP and WFF rebuild equal 1-D factors for every view (the variance report of
    Loans' hybrid:1,2,3 formed 489 pseudo-inverses of a few dozen distinct factors)."""
    if m.size > _SMALL_CELLS:
        return psd_power(m, power, eig=shared_psd_eigh(m))
    key = (content_hash(str(m.shape), str(m.dtype), np.ascontiguousarray(m).tobytes()), float(power))
    hit = _SMALL_POWER.get(key)
    if hit is None:
        if len(_SMALL_POWER) >= _SMALL_ENTRIES:
            _SMALL_POWER.clear()
        hit = _SMALL_POWER[key] = psd_power(m, power, eig=shared_psd_eigh(m))
        hit.setflags(write=False)
    return hit


# Eigendecompositions a solver computed anyway (the dense solver's loss needs eigh(X)), kept as
# long as their mechanism: a 1,600-cell eigh costs about a second on 2 cores, and measure, the
# variances and the max-variance report would otherwise redo it.
_PRIMED_EIGH: "weakref.WeakKeyDictionary[ViewMechanism, list]" = weakref.WeakKeyDictionary()


def prime_eigh(mech: "ViewMechanism", eig: list[tuple[np.ndarray, np.ndarray]]) -> None:
    """Give ``mech`` the :func:`~querysmasher.linalg.psd_eigh` of its matrices, computed elsewhere
    (with the same truncation policy: :func:`~querysmasher.linalg.psd_truncate`)."""
    if mech.kind not in ("kron", "dense") or len(eig) != len(mech.mats):
        raise ValueError("eig must hold one (w, V) per matrix of a kron or dense mechanism")
    _PRIMED_EIGH[mech] = eig


@lru_cache(maxsize=64)
def _mechanism_eigh(mech: "ViewMechanism") -> list[tuple[np.ndarray, np.ndarray]]:
    """Cached per mechanism object (hashed by identity; mechanisms are immutable and shared by views)."""
    return [shared_psd_eigh(m) for m in mech.mats]


@dataclass(frozen=True, eq=False)
class ViewMechanism:
    """A mechanism over one residual view, at privacy cost <= 1."""

    kind: Literal["kron", "dense", "fourier", "lowrank"]
    sizes: tuple[int, ...]
    mats: tuple[np.ndarray, ...]
    # lowrank only: an orthogonal r x r W; the measured operator is B = W diag(s)^(1/2) V^T (None: W = I).
    # B^T B = X either way; a mechanism re-derived from its query factor (querysmasher.queryfactor)
    # sets W so that B = L^T F whatever basis the SVD returned.
    rotation: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("kron", "dense", "fourier", "lowrank"):
            raise ValueError(f"unknown mechanism kind {self.kind!r}")
        if len(self.mats) != self.array_count(self.kind, self.sizes):
            raise ValueError(f"a {self.kind} mechanism over {len(self.sizes)} attributes holds {self.array_count(self.kind, self.sizes)} arrays")
        if self.kind == "lowrank":
            v, s = self.mats
            if v.ndim != 2 or v.shape[0] != self.cells or s.shape != (v.shape[1],) or np.any(s < 0):
                raise ValueError("a lowrank mechanism holds V (cells x r) and s (r non-negative values)")
        if self.rotation is not None and (self.kind != "lowrank" or self.rotation.shape != (self.mats[1].shape[0],) * 2):
            raise ValueError("a rotation is an r x r matrix of a lowrank mechanism")

    @staticmethod
    def array_count(kind: str, sizes: tuple[int, ...]) -> int:
        """How many arrays a mechanism of this kind holds (plan files store them as m0, m1, ...)."""
        return len(sizes) if kind == "kron" else 2 if kind == "lowrank" else 1

    @property
    def cells(self) -> int:
        return math.prod(self.sizes)

    def __repr__(self) -> str:
        return f"ViewMechanism({self.kind}, sizes={self.sizes})"

    @property
    def outputs(self) -> int:
        """Noisy values one measurement of the view releases: r for lowrank, the cells otherwise."""
        return int(self.mats[1].shape[0]) if self.kind == "lowrank" else self.cells

    def pinv_factor(self) -> np.ndarray:
        """E (c x r) with X^+ = E E^T, for dense and lowrank mechanisms (per-query variances)."""
        if self.kind == "lowrank":
            v, s = self.mats
            nz = s > 0
            return v[:, nz] / np.sqrt(s[nz])
        if self.kind == "dense":
            w, v = self.eigh()[0]
            return v / np.sqrt(w)
        raise ValueError(f"pinv_factor is for dense and lowrank mechanisms, not {self.kind}")

    def eigh(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """:func:`~querysmasher.linalg.psd_eigh` of each stored matrix (kron factors, or the dense X),
        computed once per mechanism: its square roots (measure), pseudo-inverse factor (variances)
        and every other power come from these."""
        if self.kind not in ("kron", "dense"):
            raise ValueError(f"eigh is for kron and dense mechanisms, not {self.kind}")
        primed = _PRIMED_EIGH.get(self)
        return primed if primed is not None else _mechanism_eigh(self)

    def powers(self, power: float) -> list[np.ndarray]:
        """X^power of each stored matrix (kron factors, or the dense X) on its range: from the
        primed eigenpairs when a solver or a plan file gave them, else once per distinct small
        matrix (:func:`shared_psd_power`), else from this mechanism's cached :meth:`eigh`."""
        if _PRIMED_EIGH.get(self) is None and all(m.size <= _SMALL_CELLS for m in self.mats):
            return [shared_psd_power(m, power) for m in self.mats]
        return [psd_power(m, power, eig=e) for m, e in zip(self.mats, self.eigh())]

    def max_diag(self) -> float:
        """Privacy cost of the mechanism: the largest diagonal entry of X."""
        if self.kind == "kron":
            return math.prod(float(np.diag(m).max()) for m in self.mats) if self.mats else 1.0
        if self.kind == "dense":
            return float(np.diag(self.mats[0]).max())
        if self.kind == "lowrank":
            v, s = self.mats
            return float(np.einsum("ij,j,ij->i", v, s, v).max(initial=0.0))
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
        if self.kind == "lowrank":
            return _lowrank_pair_distance(*self.mats)
        return _kron_pair_bound(self.mats)

    def dense_x(self) -> np.ndarray:
        """The explicit privacy Gram X (small views and tests)."""
        if self.kind == "kron":
            return kron_dense(self.mats)
        if self.kind == "dense":
            return self.mats[0]
        if self.kind == "lowrank":
            v, s = self.mats
            return (v * s) @ v.T
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


LOWRANK_EXACT_PAIR_WORK = 4e9  # cells^2 * rank up to which a lowrank replace cost is exact


def _lowrank_pair_distance(v: np.ndarray, s: np.ndarray, rows: int = 512) -> float:
    """Replace cost of X = V diag(s) V^T from its factor U = V diag(s)^(1/2): max over cell pairs of
    |u_i - u_j|^2, exact in row blocks while cells^2 * rank stays below ``LOWRANK_EXACT_PAIR_WORK``;
    above it the bound (|u_i| + |u_j|)^2 <= 4 max diag (over-reporting is safe)."""
    u = v * np.sqrt(np.clip(s, 0.0, None))
    n = np.einsum("ij,ij->i", u, u)
    if u.shape[0] ** 2 * max(u.shape[1], 1) > LOWRANK_EXACT_PAIR_WORK:
        return 4.0 * float(n.max(initial=0.0))
    best = 0.0
    for lo in range(0, u.shape[0], rows):
        block = n[lo:lo + rows, None] + n[None, :] - 2.0 * (u[lo:lo + rows] @ u.T)
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
    # lowrank only: L (rows of the Gram factor F x r) with X = F^T L L^T F, what a plan file stores
    # in place of V (querysmasher.queryfactor); None: the mechanism's arrays are stored
    query_factor: np.ndarray | None = None

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
