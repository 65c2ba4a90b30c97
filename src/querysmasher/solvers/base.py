"""The per-view solver interface and the mechanism it returns.

A solver maps a residual view's subworkload Gram G to a Gaussian mechanism at privacy cost 1,
described by its privacy Gram X = B^T Sigma^-1 B (max diag(X) <= 1, range(X) ⊇ range(G)). Its
weighted sum of variances over the subworkload is L = tr(G X^+). Any factor B of X with unit noise
realises it (measure), and the generalised least-squares estimate X^+ B^T y reconstructs it.

The mechanism kinds (``kron``, ``dense``, ``fourier``, ``lowrank``) and what each can do are in
:mod:`querysmasher.mechanisms`.

The full contract a solver must meet (X = P X P on the residual subspace, what ``lower_bound``
must mean, plugins) is in ``docs/solvers.md``; :mod:`querysmasher.testing` checks it.

>>> ViewSolution(ViewMechanism("kron", (2,), (np.eye(2),)), 2.0, 2.0, "rp")
ViewSolution(rp, kron (2,), loss=2, lower_bound=2, gap=nan)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..decompose import SubworkloadGram
from ..linalg import MatrixStore, pinv_psd  # pinv_psd: re-exported, solvers import it from here
from ..mechanisms import ViewMechanism, prime_eigh  # re-exported: the solver contract's mechanism type

__all__ = [
    "ViewMechanism",
    "ViewSolution",
    "ViewSolver",
    "SolveEstimate",
    "estimate_solve",
    "generic_estimate",
    "mechanism_loss",
    "pinv_psd",
    "prime_eigh",
]


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
        return (
            f"ViewSolution({self.solver}, {self.mechanism.kind} {self.mechanism.sizes}, loss={self.loss:.6g}, "
            f"lower_bound={self.lower_bound:.6g}, gap={self.gap:.2e}{note})"
        )


class ViewSolver(Protocol):
    """Anything with a name and ``solve(gram, store) -> ViewSolution``.

    A solver may also define ``prepare(decomposition)``, called once before any solve, to read
    workload-wide context (RP+ derives its per-attribute bases from it), and
    ``estimate(gram, store) -> SolveEstimate``, what its ``solve`` of that Gram will cost (the
    workflow's resource requests; :func:`estimate_solve` uses :func:`generic_estimate` without it).
    """

    name: str

    def solve(self, gram: SubworkloadGram, store: MatrixStore) -> ViewSolution: ...


@dataclass(frozen=True)
class SolveEstimate:
    """What one ``solve(gram, store)`` will cost, as its solver predicts it without solving.

    ``peak_bytes``: memory the solve allocates above what the process already holds (the Gram's
    stored matrices included), at its peak; ``result_bytes``: what the returned solution keeps
    (a batch holds every member's solution until its file is written); ``seconds``: its time on one
    core of the 2-core reference machine. The figures must cover the solve's real use: the
    workflow requests them as a job's memory and time limits.
    """

    seconds: float
    peak_bytes: float
    result_bytes: float = 0.0
    path: str = ""  # which code path the solve takes (e.g. "kron", "factored", "dense", "fallback")


# a solver that does not estimate itself: as if it held this many c x c float64 arrays of a view
# with several terms (a dense interior-point solve), and one n x n array per 1-D factor otherwise
GENERIC_DENSE_ARRAYS = 8


def generic_estimate(gram: SubworkloadGram) -> SolveEstimate:
    """A conservative estimate for a solver without ``estimate``: a dense solve on c x c matrices.

    >>> from querysmasher.decompose import GramTerm
    >>> g = SubworkloadGram((0, 1), (30, 30), (GramTerm(1.0, ("a",), True),))
    >>> generic_estimate(g).peak_bytes == GENERIC_DENSE_ARRAYS * 8 * 900 ** 2
    True
    """
    c = gram.cells
    if not gram.sizes:
        return SolveEstimate(0.001, 0.0, 0.0, "total")
    if gram.single_kron:
        sq = sum(n * n for n in gram.sizes)
        return SolveEstimate(
            0.05 + 0.5 * sum((n / 100) ** 2 for n in gram.sizes), GENERIC_DENSE_ARRAYS * 8.0 * sq, 8.0 * sq, "kron"
        )
    return SolveEstimate(1.0 + 60.0 * (c / 1000) ** 3, GENERIC_DENSE_ARRAYS * 8.0 * c * c, 8.0 * c * c, "dense")


def estimate_solve(solver, gram: SubworkloadGram, store: MatrixStore) -> SolveEstimate:
    """``solver.estimate(gram, store)`` when the solver defines it, else :func:`generic_estimate`."""
    est = getattr(solver, "estimate", None)
    if callable(est):
        out = est(gram, store)
        if isinstance(out, SolveEstimate):
            return out
    return generic_estimate(gram)


def mechanism_loss(gram: SubworkloadGram, store: MatrixStore, mech: ViewMechanism) -> float:
    """tr(G X^+), factor-wise when both are Kronecker, densely otherwise (small views only)."""
    if mech.FACTORWISE and all(not t.dense for t in gram.terms):
        pinvs = mech.powers(-1)  # once per distinct small factor: RP and WFF repeat them across views
        return float(
            sum(t.coef * math.prod(float(np.sum(store[f] * p)) for f, p in zip(t.factors, pinvs)) for t in gram.terms)
        )
    return float(np.sum(gram.dense(store) * pinv_psd(mech.dense_x())))
