"""The ``dense`` mechanism kind: one c x c matrix X (QS on several-term Grams, ``mm``), measured as
B = X^(1/2)."""

from __future__ import annotations

import math

import numpy as np

from .base import ViewMechanism, check_square_factors, count_positive

__all__ = ["DenseMechanism"]


class DenseMechanism(ViewMechanism):
    """One c x c matrix X."""

    KIND = "dense"
    PRIMABLE = True

    @classmethod
    def stored_arrays(cls, g, sizes: tuple[int, ...]) -> tuple[np.ndarray, ...]:
        from .. import h5read as r  # loads h5py only where it is used

        cells = math.prod(sizes)
        return (r.array(g, "m0", kind="f", shape=(cells, cells)),)

    def max_diag(self) -> float:
        return float(np.diag(self.mats[0]).max())

    def _applied(self) -> ViewMechanism:
        check_square_factors(self, [(self.cells, self.cells)])
        return DenseMechanism("dense", self.sizes, tuple(r @ r for r in self._sqrt))

    def sqrt_apply(self, x: np.ndarray) -> np.ndarray:
        return self._sqrt[0] @ x

    def pinv_sqrt_apply(self, y: np.ndarray) -> np.ndarray:
        return self._pinv_sqrt[0] @ y

    def rows_pinv_quadratic(self, s: np.ndarray) -> np.ndarray:
        z = self.pinv_factor().T @ s.T  # X^+ = E E^T: no c x c product (the root costs a c^3 one)
        return np.sum(z * z, axis=0)

    def pinv_factor(self) -> np.ndarray:
        w, v = self.eigh()[0]
        return v / np.sqrt(w)

    def rank(self) -> int:
        return count_positive(np.linalg.eigvalsh((self.mats[0] + self.mats[0].T) / 2))

    def dense_x(self) -> np.ndarray:
        return self.mats[0]

    def eigh(self) -> list[tuple[np.ndarray, np.ndarray]]:
        return self._matrix_eigh()
