r"""HDMM as its paper defines it: strategies for the Laplace mechanism, pure ε-differential privacy.

The Laplace matrix mechanism answers y = A x + Lap(b)^m with b = ||A||_1 / ε (||A||_1: the largest
column L1 norm, the L1 sensitivity of x -> A x) and reconstructs x̂ = A^+ y; its expected total
squared error on W is 2 b^2 ||W A^+||_F^2 = 2 / ε^2 ||A||_1^2 tr(W^T W (A^T A)^+). Unlike the
Gaussian case the strategy A itself matters, not only A^T A, so a :class:`LaplaceStrategy` holds its
rows: a union of Kronecker blocks θ_b ⊗_i F_{i,h} whose factors have every column of L1 norm 1, so
that every column of A has L1 norm Σ_b θ_b, the sensitivity, exactly.

The optimisers are in :mod:`.optimize_laplace`; :func:`laplace_allocation` splits ε over the
groups of an OPT_+ plan.

>>> s = LaplaceStrategy.single((np.eye(3), np.ones((1, 2))))  # the identity on A, the total on B
>>> s.sensitivity(), s.dense().shape
(1.0, (3, 6))
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..accounting import PureBudget  # re-exported: the budget of Laplace plans
from ..allocation import BUDGET_MARGIN
from ..linalg import centering, kron_apply, kron_dense
from .implicit import TOTAL, ImplicitWorkload, KronStrategy

__all__ = ["PureBudget", "LaplaceStrategy", "LaplaceAllocation", "laplace_allocation"]

_NORM_ATOL = 1e-9


def _unit_columns(f: np.ndarray) -> bool:
    return bool(np.all(f >= -_NORM_ATOL)) and np.allclose(np.abs(f).sum(axis=0), 1.0, rtol=0, atol=_NORM_ATOL)


@dataclass(frozen=True, eq=False)
class LaplaceStrategy:
    """Rows A = [θ_b ⊗_i factors[i][index[b, i]]]_b; every factor has columns of L1 norm 1, so every
    column of A has L1 norm Σ θ_b. Several blocks are weighted marginals (factors I or 1^T)."""

    sizes: tuple[int, ...]
    factors: tuple[tuple[np.ndarray, ...], ...]  # per attribute: distinct explicit factors (rows x n_i)
    index: np.ndarray  # (blocks, attributes) int
    weights: np.ndarray  # (blocks,) θ_b >= 0

    def __post_init__(self) -> None:
        if len(self.factors) != len(self.sizes) or any(
            f.ndim != 2 or f.shape[1] != n for fs, n in zip(self.factors, self.sizes) for f in fs
        ):
            raise ValueError("strategy factors must have one column per value of their attribute")
        if not all(_unit_columns(f) for fs in self.factors for f in fs):
            raise ValueError("strategy factors must be non-negative with every column of L1 norm 1 (exact sensitivity)")
        if np.any(self.weights < 0) or not np.all(np.isfinite(self.weights)):
            raise ValueError("block weights must be finite and non-negative")
        if len(self.weights) > 1 and not all(self._marginal_factor(f) is not None for fs in self.factors for f in fs):
            raise ValueError("a union of blocks must be weighted marginals (factors I or 1^T)")

    @staticmethod
    def _marginal_factor(f: np.ndarray) -> str | None:
        n = f.shape[1]
        if f.shape == (n, n) and np.array_equal(f, np.eye(n)):
            return "identity"
        if f.shape == (1, n) and np.array_equal(f, np.ones((1, n))):
            return TOTAL
        return None

    @classmethod
    def single(cls, factors: tuple[np.ndarray, ...]) -> LaplaceStrategy:
        """One Kronecker block ⊗ A_i at sensitivity 1."""
        return cls(
            tuple(f.shape[1] for f in factors),
            tuple((f,) for f in factors),
            np.zeros((1, len(factors)), dtype=np.int64),
            np.ones(1),
        )

    def sensitivity(self) -> float:
        """||A||_1: every column has L1 norm Σ_b θ_b (see the class docstring)."""
        return float(self.weights.sum())

    def applied_sensitivity(self) -> float:
        """L1 sensitivity of what :meth:`answer` applies, recomputed from the stored factors:
        Σ_b |θ_b| ∏_i (largest column L1 norm of factor i), at least ||A||_1 whatever the columns'
        stored norms (:meth:`sensitivity` assumes them exactly 1)."""
        norms = [[float(np.abs(f).sum(axis=0).max(initial=0.0)) for f in fs] for fs in self.factors]
        return float(
            sum(abs(w) * math.prod(norms[i][h] for i, h in enumerate(row)) for row, w in zip(self.index, self.weights))
        )

    def block_rows(self) -> list[int]:
        """Length of each block's answer vector."""
        return [math.prod(self.factors[i][h].shape[0] for i, h in enumerate(row)) for row in self.index]

    @cached_property
    def gram(self) -> KronStrategy:
        """X = A^T A as orthogonal Kronecker blocks (for the error and least squares)."""
        if len(self.weights) == 1:
            grams = [f.T @ f for f in (fs[h] for fs, h in zip(self.factors, self.index[0]))]
            scale = [float(np.diag(g).max()) for g in grams]
            return KronStrategy(
                self.sizes,
                tuple((g / s,) for g, s in zip(grams, scale)),
                np.zeros((1, len(self.sizes)), dtype=np.int64),
                np.array([self.weights[0] ** 2 * math.prod(scale)]),
            )
        # weighted marginals: S = the attributes whose factor is I; κ_T as in the module docstring
        kinds = [[self._marginal_factor(f) for f in fs] for fs in self.factors]
        subsets = [
            frozenset(i for i, h in enumerate(row) if kinds[i][h] == "identity" and self.sizes[i] > 1)
            for row in self.index
        ]
        spaces = sorted(
            {frozenset(t) for s in subsets for k in range(len(s) + 1) for t in itertools.combinations(sorted(s), k)},
            key=lambda t: (len(t), sorted(t)),
        )
        kappa = np.zeros(len(spaces))
        for s, theta in zip(subsets, self.weights):
            for b, t in enumerate(spaces):
                if t <= s:
                    kappa[b] += (
                        theta**2
                        * math.prod((self.sizes[i] - 1) / self.sizes[i] for i in t)
                        / math.prod(self.sizes[i] for i in s - t)
                    )
        mats = tuple(
            (np.ones((n, n)), centering(n) * (n / (n - 1))) if n > 1 else (np.ones((1, 1)),) for n in self.sizes
        )
        index = np.zeros((len(spaces), len(self.sizes)), dtype=np.int64)
        for b, t in enumerate(spaces):
            index[b, sorted(t)] = 1
        keep = kappa > 0
        return KronStrategy(self.sizes, mats, index[keep], kappa[keep])

    def term_variances(self, workload: ImplicitWorkload) -> np.ndarray:
        """||A||_1^2 w_j tr(G_j X^+) per term: variance with Laplace noise of scale ||A||_1 is twice this."""
        return self.sensitivity() ** 2 * self.gram.term_variances(workload)

    def error(self, workload: ImplicitWorkload) -> float:
        return float(self.term_variances(workload).sum())

    def dense(self) -> np.ndarray:
        """The explicit rows of A over the full domain (small domains only)."""
        return np.vstack(
            [
                w * kron_dense([self.factors[i][h] for i, h in enumerate(row)])
                for row, w in zip(self.index, self.weights)
            ]
        )

    def answer(self, x: np.ndarray) -> tuple[np.ndarray, ...]:
        """A x, one vector per block (noise is added by the caller)."""
        return tuple(
            w * kron_apply([self.factors[i][h] for i, h in enumerate(row)], x, self.sizes)
            for row, w in zip(self.index, self.weights)
        )

    def estimate(self, ys: tuple[np.ndarray, ...]) -> np.ndarray:
        """Least squares x̂ = X^+ A^T y."""
        aty = np.zeros(math.prod(self.sizes))
        for row, w, y in zip(self.index, self.weights, ys):
            fs = [self.factors[i][h] for i, h in enumerate(row)]
            aty += w * kron_apply([f.T for f in fs], y, tuple(f.shape[0] for f in fs))
        return self.gram.pinv_apply(aty)


@dataclass(frozen=True)
class LaplaceAllocation:
    """Per group: its share ε_g / ε (∝ E_g^(1/3)) and Laplace noise scale b_g = ||A_g||_1 / ε_g."""

    shares: np.ndarray
    scales: np.ndarray
    total_variance: float
    epsilon: float

    @property
    def privacy_cost(self) -> float:
        """Σ_g ε_g: the ε actually spent."""
        return float(self.shares.sum() * self.epsilon)


def laplace_allocation(errors, sensitivities, epsilon: float) -> LaplaceAllocation:
    """Split ε over groups with errors E_g (at sensitivity 1): minimise Σ 2 E_g / ε_g^2 s.t. Σ ε_g = ε."""
    e = np.asarray(errors, dtype=float)
    roots = np.cbrt(e)
    total = float(roots.sum())
    shares = roots / total if total > 0 else np.full(e.shape, 1.0 / len(e))
    shares = shares / max(1.0, float(shares.sum())) * (1 - BUDGET_MARGIN)  # rounding must never overspend
    scales = np.asarray(sensitivities, dtype=float) / (shares * epsilon)
    return LaplaceAllocation(shares, scales, float(np.sum(2 * e * (scales / np.asarray(sensitivities)) ** 2)), epsilon)
