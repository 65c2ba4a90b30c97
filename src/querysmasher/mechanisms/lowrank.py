"""The ``lowrank`` mechanism kind: X = V diag(s) V^T with V (c x r) orthonormal columns and s >= 0
(QS on several-term Grams of rank r < c), measured as B = W diag(s)^(1/2) V^T: r noisy values, W an
orthogonal ``rotation`` (the identity unless re-derived from a query factor)."""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from .base import ViewMechanism, count_positive, factor_pair_distance, refuse

__all__ = ["LowRankMechanism"]


class LowRankMechanism(ViewMechanism):
    """X = V diag(s) V^T, measured as B = W diag(s)^(1/2) V^T."""

    KIND = "lowrank"
    ROTATED = True

    @staticmethod
    def arrays(sizes: tuple[int, ...]) -> int:
        return 2

    @classmethod
    def stored_arrays(cls, g, sizes: tuple[int, ...]) -> tuple[np.ndarray, ...]:
        from .. import h5read as r  # loads h5py only where it is used

        s = r.array(g, "m1", kind="f", ndim=1, lo=0.0)
        return r.array(g, "m0", kind="f", shape=(math.prod(sizes), len(s))), s

    @classmethod
    def stored_rotation(cls, g, mats: tuple[np.ndarray, ...]) -> np.ndarray | None:
        from .. import h5read as r  # loads h5py only where it is used

        rank = mats[1].shape[0]
        return r.array(g, "rotation", kind="f", shape=(rank, rank)) if r.has(g, "rotation") else None

    def __post_init__(self) -> None:
        super().__post_init__()
        v, s = self.mats
        if v.ndim != 2 or v.shape[0] != self.cells or s.shape != (v.shape[1],) or np.any(s < 0):
            raise ValueError("a lowrank mechanism holds V (cells x r) and s (r non-negative values)")
        if self.rotation is not None and self.rotation.shape != (s.shape[0],) * 2:
            raise ValueError("a rotation is an r x r matrix of a lowrank mechanism")

    @property
    def outputs(self) -> int:
        return int(self.mats[1].shape[0])

    def max_diag(self) -> float:
        v, s = self.mats
        return float(np.einsum("ij,j,ij->i", v, s, v).max(initial=0.0))

    def replace_cost(self) -> float:
        if self.cells < 2 or self.pairs_enumerable:
            return super().replace_cost()
        v, s = self.mats
        return factor_pair_distance(v * np.sqrt(np.clip(s, 0.0, None)))

    def _applied(self) -> ViewMechanism:
        rot = self.rotation
        if rot is not None:
            # B = W diag(s)^(1/2) V^T costs max diag(V s V^T), as charged, only for an orthogonal W
            if (
                not np.all(np.isfinite(rot))
                or float(np.abs(rot.T @ rot - np.eye(rot.shape[0])).max(initial=0.0)) > 1e-8
            ):
                raise refuse(
                    "lowrank",
                    "has a rotation W that is not orthogonal "
                    "(B = W diag(s)^(1/2) V^T would cost more than the stored X)",
                )
        return self

    def sqrt_apply(self, x: np.ndarray) -> np.ndarray:
        v, root_s, rot = _lowrank_factors(self)
        y = root_s.reshape((-1,) + (1,) * (x.ndim - 1)) * (v.T @ x)
        return y if rot is None else rot @ y

    def pinv_sqrt_apply(self, y: np.ndarray) -> np.ndarray:
        v, root_s, rot = _lowrank_factors(self)
        return v @ ((y if rot is None else rot.T @ y) / root_s.reshape((-1,) + (1,) * (y.ndim - 1)))

    def rows_pinv_quadratic(self, s: np.ndarray) -> np.ndarray:
        z = self.pinv_factor().T @ s.T
        return np.sum(z * z, axis=0)

    def pinv_factor(self) -> np.ndarray:
        v, s = self.mats
        nz = s > 0
        return v[:, nz] / np.sqrt(s[nz])

    def rank(self) -> int:
        return count_positive(self.mats[1])  # V has orthonormal columns: X's eigenvalues are s

    def dense_x(self) -> np.ndarray:
        v, s = self.mats
        return (v * s) @ v.T


@lru_cache(maxsize=64)
def _lowrank_factors(mech: LowRankMechanism) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """V, diag(s)^(1/2) and W restricted to s > 0 (what B and B^+ apply)."""
    v, s = mech.mats
    nz = s > 0
    return v[:, nz], np.sqrt(s[nz]), None if mech.rotation is None else mech.rotation[:, nz]
