"""The residual basis of a view and its coordinates: which residual subset each coordinate belongs to.

Per attribute of size n, U = [1/sqrt(n) 1, Helmert columns] (orthonormal, first column constant). A
view's basis is the Kronecker product of its attributes' U (cells row-major in schema order). The
coordinate with multi-index (j_1, .., j_k) belongs to the residual subset {a_l : j_l > 0}; within that
subset it has the row-major index of (j_l - 1) over the subset's attributes. Marginalising a view g
onto a subset s of its attributes maps g's residual coordinates of subsets of s onto s's, scaled by
sqrt(n_g / n_s) (the dropped attributes' constant columns), and every other coordinate to zero.

>>> c = view_coords((0, 2), (3, 2))
>>> c.subsets, c.subset_of.tolist()
(((), (2,), (0,), (0, 2)), [0, 1, 2, 3, 2, 3])
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import scipy.linalg

__all__ = ["attribute_basis", "view_basis", "to_residual", "from_residual", "ViewCoords", "view_coords", "subset_dim"]


@lru_cache(maxsize=64)
def attribute_basis(n: int) -> np.ndarray:
    """U (n x n): column 0 is 1/sqrt(n), columns 1.. the Helmert contrasts (read-only)."""
    u = scipy.linalg.helmert(n, full=True).T.copy() if n > 1 else np.ones((1, 1))
    u.setflags(write=False)
    return u


def view_basis(sizes: tuple[int, ...]) -> np.ndarray:
    """The Kronecker product of the attributes' bases (cells x cells; small views only)."""
    out = np.ones((1, 1))
    for n in sizes:
        out = np.kron(out, attribute_basis(n))
    return out


def _apply_axes(t: np.ndarray, mats: list[np.ndarray]) -> np.ndarray:
    """Apply mats[l] along axis l+1 of t (axis 0 is the batch): per axis one matrix product over t
    viewed as (before, n_l, after), no axis moved."""
    shape = list(t.shape)
    for axis, m in enumerate(mats):
        before, n, after = math.prod(shape[: axis + 1]), shape[axis + 1], math.prod(shape[axis + 2 :])
        if after == 1:
            t = t.reshape(before, n) @ m.T
        else:
            t = m @ t.reshape(before, n, after)
        shape[axis + 1] = m.shape[0]
    return t.reshape(shape)


def to_residual(q: np.ndarray, sizes: tuple[int, ...]) -> np.ndarray:
    """q U for rows q over the cells of a view (no cells x cells basis is formed)."""
    q = np.atleast_2d(np.asarray(q, dtype=float))
    t = q.reshape((q.shape[0],) + tuple(sizes))
    # (q U)[r, j] = sum_c q[r, c] U[c, j]: along each axis multiply by U_l (contract cell index)
    t = _apply_axes(t, [attribute_basis(n).T for n in sizes])
    return t.reshape(q.shape[0], -1)


def from_residual(r: np.ndarray, sizes: tuple[int, ...]) -> np.ndarray:
    """r U^T for rows r over a view's residual coordinates (inverse of :func:`to_residual`)."""
    r = np.atleast_2d(np.asarray(r, dtype=float))
    t = r.reshape((r.shape[0],) + tuple(sizes))
    t = _apply_axes(t, [attribute_basis(n) for n in sizes])
    return t.reshape(r.shape[0], -1)


def subset_dim(sizes_all: tuple[int, ...], subset: tuple[int, ...]) -> int:
    """Dimension of a residual subset's space: prod (n_i - 1)."""
    return math.prod(sizes_all[a] - 1 for a in subset)


@dataclass(frozen=True)
class ViewCoords:
    """The residual coordinates of one view: ``subsets`` (every subset of ``attrs`` with a
    non-empty space, in a fixed order), ``subset_of`` (per coordinate, its index in ``subsets``) and
    ``local`` (per coordinate, its index within its subset's space)."""

    attrs: tuple[int, ...]
    sizes: tuple[int, ...]
    subsets: tuple[tuple[int, ...], ...]
    subset_of: np.ndarray
    local: np.ndarray

    @property
    def cells(self) -> int:
        return math.prod(self.sizes)

    def positions(self, subset: tuple[int, ...]) -> np.ndarray:
        """The coordinates of ``subset`` ordered by their index within the subset's space."""
        k = self.subsets.index(subset)
        pos = np.flatnonzero(self.subset_of == k)
        return pos[np.argsort(self.local[pos], kind="stable")]


@lru_cache(maxsize=4096)
def view_coords(attrs: tuple[int, ...], sizes: tuple[int, ...]) -> ViewCoords:
    """The :class:`ViewCoords` of a view with attributes ``attrs`` of sizes ``sizes``."""
    cells = math.prod(sizes)
    idx = (
        np.array(np.unravel_index(np.arange(cells), sizes)).reshape(len(sizes), cells)
        if sizes
        else np.zeros((0, 1), dtype=int)
    )
    mask = idx > 0
    keys = [tuple(a for a, m in zip(attrs, col) if m) for col in mask.T]
    subsets: list[tuple[int, ...]] = []
    seen: dict[tuple[int, ...], int] = {}
    subset_of = np.empty(cells, dtype=np.int64)
    local = np.zeros(cells, dtype=np.int64)
    for c, key in enumerate(keys):
        if key not in seen:
            seen[key] = len(subsets)
            subsets.append(key)
        subset_of[c] = seen[key]
        li = 0
        for l, n in enumerate(sizes):
            if mask[l, c]:
                li = li * (n - 1) + (idx[l, c] - 1)
        local[c] = li
    return ViewCoords(tuple(attrs), tuple(sizes), tuple(subsets), subset_of, local)
