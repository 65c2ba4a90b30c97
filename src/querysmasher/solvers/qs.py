"""QuerySmasher's per-view solver (method ``qs``): the optimal mechanism, with a certificate.

For each distinct subproblem:

* a one-term Gram coef·(G_1 ⊗ ... ⊗ G_k) is solved factor by factor: with X = ⊗ X_i the loss is
  coef·∏ tr(G_i X_i^+) and the privacy cost ∏ max diag(X_i), so the optimum is coef·∏ L_i and the
  product of the factor lower bounds certifies it (the dual of a Kronecker problem contains the
  Kronecker product of the factor duals). Marginal, prefix, range, circular and hybrid workloads of
  any schema therefore need only 1-D solves, each done once per distinct factor.
* a Gram with several terms is solved by the certified solver (certified to ``target_gap``), in the
  form its rank allows: when a factor G = F^T F with r < c / 2 rows is at hand (dense terms are
  stored as subquery matrices, Kronecker terms factor per attribute),
  :func:`querysmasher.solvers.sdp.solve_factored` works in O(r c) memory and returns a ``lowrank``
  mechanism; otherwise :func:`querysmasher.solvers.sdp.solve_dense` works on the c x c Gram and
  returns a ``dense`` one.
* only when the estimated memory of that solve exceeds ``memory_budget_mb`` (default a quarter of
  the machine's memory), or the view has more than ``max_dense_cells`` cells (no limit unless
  given), the view falls back to the better of the closed-form solvers, with a warning; the
  solution's ``note`` records the reason, and no certificate is claimed. The fallback never forms a
  c x c matrix.

Every candidate is compared with ``wff`` and ``rp`` (per factor for Kronecker Grams) and the lowest
loss is kept, so qs <= wff and qs <= rp hold by construction.
"""

from __future__ import annotations

import logging
import math
import os
import time
import warnings

import numpy as np

from ..decompose import SubworkloadGram
from ..linalg import MatrixStore, centering, psd_truncate, stored_shape
from ..options import Option, check_options
from ..queryfactor import express_over_factor, factor_loss, holds_query_factor
from .base import SolveEstimate, ViewMechanism, ViewSolution, prime_eigh
from .closed_form import RPSolver, WFFSolver, circulant_from_weights, wff_bytes, wff_weights_1d
from .sdp import solve_dense, solve_factored

__all__ = ["QSSolver", "DEFAULT_TARGET_GAP", "DEFAULT_MEMORY_FRACTION", "solve_memory_mb"]

logger = logging.getLogger(__name__)

DEFAULT_TARGET_GAP = 1e-4
DEFAULT_MEMORY_FRACTION = 0.25  # default memory budget of one view's solve: this share of the machine
# Peak bytes of a solve per matrix entry it holds, measured with bench/bench_sdp.py (ru_maxrss):
# the factored solver keeps ~8 r x c arrays (F, W, A's eigenvectors applied to W, products), the
# dense one ~6 c x c arrays (G, its eigenvectors, X, the Hessian and its Cholesky factor).
FACTORED_ARRAYS = 10
DENSE_ARRAYS = 6
# What :meth:`QSSolver.estimate` adds to those (bench/solve_estimates.py measures both): the factor
# F (rows x c) and its scaled copy beside the factored solve; the Gram itself, the eigenvectors kept
# for the mechanism and the phase-2 Hessian beside the dense one, plus a block of Phi's rows.
FACTORED_EXTRA_ARRAYS = 2
DENSE_EXTRA_ARRAYS = 3
HESSIAN_CHUNK_BYTES = 64 << 20  # solvers.sdp.barrier: Phi is built in blocks of this size
# Seconds on one core of the 2-core reference machine: per r^2 c of a factored solve, per c^3 of a
# dense one, per n^3 of a 1-D factor (its dense solve, WFF and RP), plus a fixed start.
FACTORED_SECONDS_PER_R2C = 1e-7
# Dense: Table 4's random views alone (2026-12-03, `python bench/solve_subproblem.py --random-pair N`, one thread):
# 400 cells 0.2 s, 900 1.6 s, 1,600 8.6 s, 2,500 39.0 s, i.e. 2.2-2.5e-9 c^3; kept ~1.6x above that
DENSE_SECONDS_PER_C3 = 4e-9
FACTOR_SECONDS_PER_N3 = 1.5e-7
# dense mechanisms from this many cells keep the eigendecomposition the solver computed (a c x c
# copy: worth it where an eigh costs more than a fraction of a second)
PRIME_EIGH_CELLS = 1024
LOWRANK_MAX_FRACTION = 0.5  # the factored solver is used when rank(G) <= this fraction of the cells
# 1-D factors are cheap and their gaps compound in a Kronecker product (a k-way view's relative gap
# is about the sum of its factors'), so factors are certified much tighter than the view target.
FACTOR_TARGET_GAP = 1e-8


class QSSolver:
    """The certified optimal per-view solver."""

    name = "qs"
    objectives = ("sum", "max")
    # a weighted-sum optimum within gap g can still be off by ~sqrt(g) in single variances, which the
    # max objective sees: its per-view solves are certified much tighter than for "sum"
    max_options = {"target_gap": 1e-8}

    option_specs = (
        Option(
            "target_gap",
            "number",
            "relative duality gap each several-term view's solve certifies (default 1e-4)",
            low=0,
            high=1,
            open_low=True,
            open_high=True,
        ),
        Option(
            "max_dense_cells",
            "int",
            "largest several-term view given the certified solve; larger ones fall back "
            "to the closed forms (default: no limit)",
            low=1,
            none=True,
        ),
        Option(
            "memory_budget_mb",
            "number",
            "memory one view's certified solve may use before it falls back "
            "(default a quarter of the machine's memory)",
            low=0,
            open_low=True,
            none=True,
        ),
        Option(
            "lowrank",
            "choice",
            "the factored solve and lowrank mechanisms: when rank <= cells / 2 (auto), always or never",
            choices=("auto", "always", "never"),
        ),
    )

    def __init__(
        self,
        target_gap: float = DEFAULT_TARGET_GAP,
        max_dense_cells: int | None = None,
        memory_budget_mb: float | None = None,
        lowrank: str = "auto",
    ):
        """The options are :attr:`option_specs`' (``lowrank`` other than auto: tests, benchmarks)."""
        given = {
            "target_gap": target_gap,
            "max_dense_cells": max_dense_cells,
            "memory_budget_mb": memory_budget_mb,
            "lowrank": lowrank,
        }
        opts = check_options(self.name, self.option_specs, given)
        self.target_gap = opts["target_gap"]
        self.max_dense_cells = opts["max_dense_cells"]
        memory = opts["memory_budget_mb"]
        if memory is None:
            memory = DEFAULT_MEMORY_FRACTION * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20
        self.memory_budget_mb = memory
        self.lowrank = opts["lowrank"]
        self._factors: dict[str, tuple[np.ndarray, float, float, str]] = {}

    def _solve_factor(self, key: str, store: MatrixStore) -> tuple[np.ndarray, float, float, str]:
        """(X_i, loss_i, lower_i, solver) for one unit-trace 1-D factor, cached by content key."""
        if key not in self._factors:
            g = store[key]
            n = g.shape[0]
            r = solve_dense(g, target_gap=min(self.target_gap, FACTOR_TARGET_GAP))
            w, gamma = wff_weights_1d(g)
            candidates = [
                (r.X, r.loss, "qs"),
                (circulant_from_weights(w), gamma * gamma, "wff"),
                (centering(n) * (n / (n - 1)), (n - 1) / n * float(np.trace(g)), "rp"),
            ]
            x, loss, which = min(candidates, key=lambda c: c[1])
            self._factors[key] = (x, loss, min(r.lower_bound, loss), which)
        return self._factors[key]

    def path(self, gram: SubworkloadGram, store: MatrixStore) -> tuple[str, int]:
        """(path, rows): which solve :meth:`solve` runs on a Gram with several terms -- "factored"
        (O(rows c) memory), "dense" (c x c) or "fallback" (closed forms only: above
        ``max_dense_cells`` or the memory budget) -- and the rows of its factor."""
        rows = _factor_rows(gram, store)
        factored = self.lowrank == "always" or (self.lowrank == "auto" and rows <= LOWRANK_MAX_FRACTION * gram.cells)
        too_big = self.max_dense_cells is not None and gram.cells > self.max_dense_cells
        if too_big or solve_memory_mb(gram.cells, rows, factored) > self.memory_budget_mb:
            return "fallback", rows
        return ("factored" if factored else "dense"), rows

    def estimate(self, gram: SubworkloadGram, store: MatrixStore) -> SolveEstimate:
        """Time and memory of :meth:`solve` on ``gram``, by the path it will take: per 1-D factor
        (n x n) for one-term Grams; O(rows x c) for a factored solve (no c x c term); c x c arrays
        only for a dense solve; WFF's transforms for the closed forms every path computes.

        >>> from querysmasher.decompose import GramTerm
        >>> g = SubworkloadGram((0, 1), (100, 100), (GramTerm(1.0, ("f",), True),))
        >>> e = QSSolver().estimate(g, {"f": np.ones((199, 10_000))})
        >>> e.path, e.peak_bytes < 10_000 ** 2 * 8
        ('factored', True)
        """
        c = gram.cells
        if not gram.sizes:
            return SolveEstimate(0.001, 0.0, 0.0, "total")
        if gram.single_kron:
            sizes = {n for n in gram.sizes}
            seconds = 0.01 + sum(FACTOR_SECONDS_PER_N3 * n**3 + 0.05 for n in sizes)
            peak = max(_dense_solve_bytes(n) for n in sizes)
            return SolveEstimate(seconds, peak, 8.0 * sum(n * n for n in gram.sizes), "kron")
        wff_peak, wff_seconds = wff_bytes(gram, store)
        path, rows = self.path(gram, store)
        if path == "fallback":
            return SolveEstimate(wff_seconds + 0.01, wff_peak, 8.0 * c, path)
        if path == "factored":
            r = min(rows, c)
            peak = (FACTORED_ARRAYS + FACTORED_EXTRA_ARRAYS) * 8.0 * r * c
            return SolveEstimate(
                0.1 + wff_seconds + FACTORED_SECONDS_PER_R2C * r * r * c,
                max(peak, wff_peak),
                8.0 * r * (c + rows),
                path,
            )
        kept = (16.0 if c >= PRIME_EIGH_CELLS else 8.0) * c * c  # X, and its eigenvectors from PRIME_EIGH_CELLS on
        return SolveEstimate(
            0.3 + wff_seconds + DENSE_SECONDS_PER_C3 * float(c) ** 3, max(_dense_solve_bytes(c), wff_peak), kept, path
        )

    def solve(self, gram: SubworkloadGram, store: MatrixStore) -> ViewSolution:
        if not gram.sizes:  # the total: measure it directly (X = [1]) — optimal, L = G
            return ViewSolution(ViewMechanism("kron", (), ()), gram.trace, gram.trace, self.name, gap=0.0)
        if gram.single_kron:
            t = gram.terms[0]
            parts = [self._solve_factor(f, store) for f in t.factors]
            loss = t.coef * math.prod(p[1] for p in parts)
            low = t.coef * math.prod(p[2] for p in parts)
            mech = ViewMechanism("kron", gram.sizes, tuple(p[0] for p in parts))
            return ViewSolution(mech, loss, low, self.name, gap=_gap(loss, low))
        t0 = time.perf_counter()
        closed = [WFFSolver().solve(gram, store), RPSolver().solve(gram, store)]
        rows = _factor_rows(gram, store)
        factored = self.lowrank == "always" or (self.lowrank == "auto" and rows <= LOWRANK_MAX_FRACTION * gram.cells)
        need_mb = solve_memory_mb(gram.cells, rows, factored)
        too_big = self.max_dense_cells is not None and gram.cells > self.max_dense_cells
        if too_big or need_mb > self.memory_budget_mb:
            best = min(closed, key=lambda s: s.loss)
            limit = (
                f"max_dense_cells={self.max_dense_cells}"
                if too_big
                else f"the memory budget ({need_mb:.0f} MB needed, {self.memory_budget_mb:.0f} MB allowed)"
            )
            note = (
                f"view {gram.attrs} has {gram.cells} cells and {len(gram.terms)} Gram terms, above {limit}: "
                f"fell back to {best.solver} (not certified)"
            )
            warnings.warn(note, RuntimeWarning, stacklevel=2)
            logger.info(
                "view %s: %d cells, fell back to %s (not certified), %.2f s",
                gram.attrs,
                gram.cells,
                best.solver,
                time.perf_counter() - t0,
            )
            return ViewSolution(best.mechanism, best.loss, 0.0, f"qs/{best.solver}", note)
        query_factor = None
        if factored:
            F = gram.factor(store)
            r = solve_factored(F, target_gap=self.target_gap)
            mech, loss = ViewMechanism("lowrank", gram.sizes, (r.V, r.s)), r.loss
            if holds_query_factor(gram):  # held as B = L^T F: a plan file stores L (rows x r), not V (cells x r)
                mech, query_factor = express_over_factor(mech, F)
                if query_factor is not None:
                    loss = factor_loss(F, mech)  # of the re-derived operator, the one measure applies
        else:
            r = solve_dense(gram.dense(store), target_gap=self.target_gap)
            mech, loss = ViewMechanism("dense", gram.sizes, (r.X,)), r.loss
            if r.eig is not None and gram.cells >= PRIME_EIGH_CELLS:  # eigh(X), computed for the loss
                prime_eigh(mech, [psd_truncate(*r.eig)])
        best = min([ViewSolution(mech, loss, 0.0, self.name), *closed], key=lambda s: s.loss)
        low = min(r.lower_bound, best.loss)
        note = "" if r.converged else f"{mech.kind} solve stopped at gap {r.gap:.2e} (target {self.target_gap:.0e})"
        logger.info(
            "view %s: %d cells, %s solve, gap %.2e, %.2f s",
            gram.attrs,
            gram.cells,
            mech.kind,
            _gap(best.loss, low),
            time.perf_counter() - t0,
        )
        return ViewSolution(
            best.mechanism,
            best.loss,
            low,
            best.solver if best.solver == self.name else f"qs/{best.solver}",
            note,
            _gap(best.loss, low),
            query_factor if best.mechanism is mech else None,
        )


def solve_memory_mb(cells: int, rows: int, factored: bool) -> float:
    """Estimated peak memory (MB) of the certified solve of one view: O(r c) factored, O(c^2) dense."""
    if factored:
        return FACTORED_ARRAYS * 8.0 * min(rows, cells) * cells / 2**20
    return DENSE_ARRAYS * 8.0 * cells * cells / 2**20


def _dense_solve_bytes(c: int) -> float:
    """Peak bytes of :func:`solve_dense` on a c x c Gram (with the Gram and the kept eigenvectors)."""
    return (DENSE_ARRAYS + DENSE_EXTRA_ARRAYS) * 8.0 * c * c + min(HESSIAN_CHUNK_BYTES, 4.0 * c**3)


def _factor_rows(gram: SubworkloadGram, store: MatrixStore) -> int:
    """Rows of the factor :meth:`SubworkloadGram.factor` would build (an upper bound on rank G), without building it."""
    total = 0
    for t in gram.terms:
        if t.dense:
            total += min(stored_shape(store, t.factors[0]))
        else:
            total += math.prod(int(np.linalg.matrix_rank(store[f], hermitian=True)) for f in t.factors)
    return total


def _gap(loss: float, low: float) -> float:
    return (loss - low) / loss if loss > 0 else 0.0
