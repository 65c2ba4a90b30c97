"""The ``kron`` mechanism kind: X = X_1 ⊗ ... ⊗ X_k, one small matrix per attribute (RP, WFF, QS on
one-term Grams), measured as B = ⊗ X_i^(1/2)."""

from __future__ import annotations

import math

import numpy as np

from ..linalg import kron_apply, kron_dense
from .base import ViewMechanism, check_square_factors, count_positive, max_pair_distance

__all__ = ["KronMechanism"]


class KronMechanism(ViewMechanism):
    """X = X_1 ⊗ ... ⊗ X_k."""

    KIND = "kron"
    FACTORWISE = True
    PRIMABLE = True

    @staticmethod
    def arrays(sizes: tuple[int, ...]) -> int:
        return len(sizes)

    @classmethod
    def stored_arrays(cls, g, sizes: tuple[int, ...]) -> tuple[np.ndarray, ...]:
        from .. import h5read as r  # loads h5py only where it is used

        return tuple(r.array(g, f"m{i}", kind="f", shape=(n, n)) for i, n in enumerate(sizes))

    def max_diag(self) -> float:
        return math.prod(float(np.diag(m).max()) for m in self.mats) if self.mats else 1.0

    def replace_cost(self) -> float:
        if self.cells < 2 or self.pairs_enumerable:
            return super().replace_cost()
        return _kron_pair_bound(self.mats)

    def _applied(self) -> ViewMechanism:
        check_square_factors(self, [(n, n) for n in self.sizes])
        return KronMechanism("kron", self.sizes, tuple(r @ r for r in self._sqrt))

    def sqrt_apply(self, x: np.ndarray) -> np.ndarray:
        return kron_apply(self._sqrt, x, self.sizes) if self.mats else x.copy()

    def sqrt_factors(self) -> tuple[np.ndarray, ...]:
        return tuple(self._sqrt) if self.mats else ()  # no attribute: the identity on one cell

    def pinv_sqrt_apply(self, y: np.ndarray) -> np.ndarray:
        return kron_apply(self._pinv_sqrt, y, self.sizes) if self.mats else y.copy()

    def kron_rows_pinv_quadratic(self, kept_q: list[np.ndarray]) -> np.ndarray:
        part = np.ones(())
        for qc, pinv in zip(kept_q, self.powers(-1)):  # pseudo-inverses: once per distinct factor
            part = np.multiply.outer(part, np.einsum("ij,jk,ik->i", qc, pinv, qc))
        return part

    def pinv_factor(self) -> np.ndarray:
        factors = []
        for w, v in self.eigh():
            factors.append(v / np.sqrt(w))
        return kron_dense(factors) if factors else np.ones((1, 1))

    def rank(self) -> int:
        return math.prod(count_positive(np.linalg.eigvalsh((m + m.T) / 2)) for m in self.mats)

    def dense_x(self) -> np.ndarray:
        return kron_dense(self.mats)

    def eigh(self) -> list[tuple[np.ndarray, np.ndarray]]:
        return self._matrix_eigh()


def _kron_pair_bound(mats: tuple[np.ndarray, ...]) -> float:
    """Upper bound on the replace cost of X_1 ⊗ ... ⊗ X_k for views too large to enumerate.

    With S_k = X_k^(1/2) and s_k(i) its columns, S e_i - S e_j telescopes into k terms that differ in
    one factor, so sqrt(cost) <= sum_k sqrt(r_k) prod_{l != k} sqrt(d_l) (r_k, d_l: each factor's
    replace cost and max diagonal); also cost <= 4 max diag. Over-reporting is safe.
    """
    d = [float(np.diag(m).max()) for m in mats]
    r = [max_pair_distance(m) for m in mats]
    tele = (
        sum(math.sqrt(rk) * math.prod(math.sqrt(dl) for l, dl in enumerate(d) if l != k) for k, rk in enumerate(r)) ** 2
    )
    return min(tele, 4.0 * math.prod(d))
