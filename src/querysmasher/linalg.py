"""Implicit linear algebra over marginal tables: centring, residual projection, mode products,
and a content-addressed store of matrices.

Cells of a view are row-major over its attributes, so a vector over the view is a tensor of shape
``sizes`` and a Kronecker product acts on it one axis at a time (a mode product):

>>> import numpy as np
>>> A, B = np.arange(4.).reshape(2, 2), np.arange(9.).reshape(3, 3)
>>> x = np.arange(6.)
>>> bool(np.allclose(kron_apply([A, B], x, (2, 3)), np.kron(A, B) @ x))
True
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

import numpy as np

__all__ = [
    "centering",
    "project_gram",
    "kron_apply",
    "kron_dense",
    "MatrixStore",
    "stored_shape",
    "content_hash",
    "PSD_RTOL",
    "eigh_sym",
    "psd_eigh",
    "psd_truncate",
    "psd_power",
    "pinv_psd",
]

PSD_RTOL = 1e-10  # eigenvalues at or below PSD_RTOL x the largest are treated as 0 (the null space)


_SCIPY_EIGH_MIN = 1000  # from this order LAPACK's divide and conquer through scipy (measured below)


def eigh_sym(a: np.ndarray, upper: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """np.linalg.eigh of a symmetric matrix (its lower or ``upper`` triangle), through scipy's
    syevd wrapper from order 1,000: on the 2-core machine a 1,521 x 1,521 eigh takes 0.83 s
    single-threaded there against 1.49 s in numpy (numpy and scipy ship different OpenBLAS builds;
    the workflow's solve, measure and reconstruct jobs run single-threaded), 0.81 s vs 0.91 s on two
    threads; at 800 they are equal, and below that numpy's is as fast single-threaded and faster on
    two threads (397: 0.026 s vs 0.045 s)."""
    if a.shape[0] < _SCIPY_EIGH_MIN:
        return np.linalg.eigh(a, UPLO="U" if upper else "L")
    import scipy.linalg  # loads scipy only where it is used

    return scipy.linalg.eigh(a, lower=not upper, driver="evd", check_finite=False)


def psd_eigh(x: np.ndarray, rtol: float = PSD_RTOL) -> tuple[np.ndarray, np.ndarray]:
    """The eigenpairs (w, V) of range(X) for a symmetric PSD matrix (symmetrised first): eigenvalues
    at or below ``rtol`` x the largest are dropped, so X = V diag(w) V^T with every w > 0. Every
    power, pseudo-inverse and factor of X in this project is computed from these (one policy).

    >>> w, v = psd_eigh(np.diag([4.0, 1e-14, 0.0]))
    >>> w.tolist(), v.shape
    ([4.0], (3, 1))
    """
    return psd_truncate(*eigh_sym((x + x.T) / 2), rtol)


def psd_truncate(w: np.ndarray, v: np.ndarray, rtol: float = PSD_RTOL) -> tuple[np.ndarray, np.ndarray]:
    """:func:`psd_eigh`'s policy applied to a full eigendecomposition (w, V) of a symmetric matrix
    (e.g. one a solver already computed): the eigenpairs above ``rtol`` x the largest eigenvalue."""
    keep = w > rtol * max(float(w.max(initial=0.0)), 1e-300)
    return w[keep], v[:, keep]


def psd_power(
    x: np.ndarray, power: float, rtol: float = PSD_RTOL, *, eig: tuple[np.ndarray, np.ndarray] | None = None
) -> np.ndarray:
    """X^power on range(X), 0 on its null space, for a symmetric PSD matrix (symmetrised first):
    power -1 is the pseudo-inverse, 1/2 the square root, -1/2 the pseudo-inverse square root.
    ``eig``: X's :func:`psd_eigh`, when the caller already has it (one eigendecomposition for several powers).

    >>> x = np.diag([4.0, 1e-14, 0.0])
    >>> psd_power(x, -0.5).diagonal().tolist(), pinv_psd(x).diagonal().tolist()
    ([0.5, 0.0, 0.0], [0.25, 0.0, 0.0])
    """
    w, v = psd_eigh(x, rtol) if eig is None else eig
    if power == -1:
        return (v / w) @ v.T
    return (v * w**power) @ v.T


def pinv_psd(x: np.ndarray, rtol: float = PSD_RTOL) -> np.ndarray:
    """Pseudo-inverse of a symmetric PSD matrix (:func:`psd_power` with power -1)."""
    return psd_power(x, -1, rtol)


def centering(n: int) -> np.ndarray:
    """C = I - J/n: the projection onto vectors with zero sum."""
    return np.eye(n) - np.full((n, n), 1.0 / n)


def kron_dense(factors: Sequence[np.ndarray]) -> np.ndarray:
    """The explicit Kronecker product (for small views and tests only)."""
    out = np.ones((1, 1))
    for f in factors:
        out = np.kron(out, f)
    return out


def kron_apply(factors: Sequence[np.ndarray], x: np.ndarray, sizes: Sequence[int]) -> np.ndarray:
    """(F_1 ⊗ ... ⊗ F_k) x for x over cells of shape ``sizes`` (row-major), by mode products.

    ``x`` may carry trailing batch dimensions: shape (prod(sizes), *batch). Returns the flat result
    (rows prod(F_i.shape[0])) with the same batch dimensions. Costs sum_i prod(sizes) * rows_i.
    """
    batch = x.shape[1:]
    dims = [int(n) for n in sizes] + [math.prod(batch)]
    t = np.ascontiguousarray(x).reshape(dims)
    for axis, f in enumerate(factors):
        # View the tensor as (pre, n, post) and multiply the middle index: one batched matmul,
        # no transposes (tensordot + moveaxis copied the whole tensor twice per factor).
        pre = math.prod(dims[:axis])  # Python ints: np.prod costs more than a small product here
        post = math.prod(dims[axis + 1 :])
        if post == 1:  # last index: one plain matmul beats `pre` tiny batched matvecs
            t = t.reshape(pre, dims[axis]) @ f.T
        else:
            t = np.matmul(f, t.reshape(pre, dims[axis], post))
        dims[axis] = f.shape[0]
    return t.reshape((-1,) + batch)


def project_gram(gram: np.ndarray, sizes: Sequence[int], keep: Sequence[bool]) -> np.ndarray:
    """W^T G W for the subquery map W = ⊗_i W_i of the residual decomposition (paper Eq. 3).

    W_i = I - J/n_i (centre) on kept attributes, (1/n_i) 1 (average) on the others; ``gram`` is over
    the cells of ``sizes``; the result is over the cells of the kept attributes.
    """
    k = len(sizes)
    t = np.asarray(gram).reshape(tuple(sizes) * 2)
    # Process axes from last to first so earlier axis positions stay valid when dims are removed.
    for axis in reversed(range(k)):
        col_axis = axis + t.ndim // 2
        if keep[axis]:
            t = t - t.mean(axis=col_axis, keepdims=True)
            t = t - t.mean(axis=axis, keepdims=True)
        else:
            t = t.mean(axis=col_axis)
            t = t.mean(axis=axis)
    m = int(np.prod([n for n, kp in zip(sizes, keep) if kp], dtype=np.int64))
    return t.reshape(m, m)


def content_hash(*parts: bytes | str, length: int = 20) -> str:
    """A short, stable hex digest of the given parts (stable across processes and machines)."""
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\x00")
    return h.hexdigest()[:length]


class MatrixStore:
    """Symmetric PSD matrices stored once, normalised to unit trace, under a content key.

    ``intern`` returns (key, scale) with M = scale * store[key], so Grams equal up to a positive
    scale share a key; a zero matrix gives (None, 0.0).

    A store built with a ``loader`` may keep a matrix as its *recipe* instead (``intern(m,
    recipe=...)``): a small JSON-able description from which ``loader(recipe)`` rebuilds M
    exactly. Such an entry costs no memory; ``store[key]`` rebuilds and normalises it on each access
    (the last one is kept), and :meth:`shape` answers without rebuilding. This is how a workload
    of hundreds of large random views is decomposed one view at a time.

    >>> s = MatrixStore()
    >>> k1, c1 = s.intern(2 * np.eye(3)); k2, c2 = s.intern(np.eye(3))
    >>> k1 == k2, c1, c2
    (True, 6.0, 3.0)
    >>> lazy = MatrixStore(loader=lambda r: r["d"] * np.eye(r["n"]))
    >>> k3, c3 = lazy.intern(2 * np.eye(3), recipe={"d": 2.0, "n": 3})
    >>> k3 == k1, lazy.recipe(k3), lazy.shape(k3), bool(np.allclose(lazy[k3], np.eye(3) / 3))
    (True, {'d': 2.0, 'n': 3}, (3, 3), True)
    """

    DECIMALS = 12  # rounding before hashing, so float noise does not split equal matrices

    def __init__(self, loader=None) -> None:
        self._mats: dict[str, np.ndarray] = {}
        self._recipes: dict[str, tuple[tuple[int, int], dict]] = {}
        self._loader = loader
        self._last: tuple[str, np.ndarray] | None = None

    @classmethod
    def normalised(cls, m: np.ndarray, *, zero_tol: float = 1e-12) -> tuple[str | None, float, np.ndarray | None]:
        """(key, scale, m / scale) of a symmetric matrix, as :meth:`intern` stores it; (None, 0.0,
        None) for a zero matrix."""
        m = np.asarray(m, dtype=float)
        m = (m + m.T) / 2
        scale = float(np.trace(m))
        if scale <= zero_tol * max(1.0, float(np.abs(m).max(initial=0.0))) * m.shape[0]:
            return None, 0.0, None
        normed = m / scale
        rounded = np.round(normed, cls.DECIMALS) + 0.0  # + 0.0 turns -0.0 into 0.0
        return content_hash(str(m.shape), rounded.tobytes()), scale, normed

    def intern(self, m: np.ndarray, *, zero_tol: float = 1e-12, recipe: dict | None = None) -> tuple[str | None, float]:
        key, scale, normed = self.normalised(m, zero_tol=zero_tol)
        if key is None or key in self:
            return key, scale
        if recipe is not None and self._loader is not None:
            self._recipes[key] = (normed.shape, dict(recipe))
        else:
            normed.setflags(write=False)
            self._mats[key] = normed
        return key, scale

    def intern_factor(self, f: np.ndarray, *, zero_tol: float = 1e-12) -> tuple[str | None, float]:
        """As :meth:`intern` for the Gram F^T F of a wide F (rows < columns), storing F itself,
        normalised to unit Frobenius norm (unit trace of F^T F), so that no c x c matrix is formed.
        A stored matrix with fewer rows than columns is such a factor; a square one is a Gram."""
        f = np.asarray(f, dtype=float)
        if f.shape[0] >= f.shape[1]:
            raise ValueError(f"a Gram factor must have fewer rows than columns, got {f.shape}")
        scale = float(np.sum(f * f))
        col_max = float(np.einsum("ij,ij->j", f, f).max(initial=0.0))
        if scale <= zero_tol * max(1.0, col_max) * f.shape[1]:
            return None, 0.0
        normed = f / np.sqrt(scale)
        rounded = np.round(normed, self.DECIMALS) + 0.0
        key = content_hash("factor", str(f.shape), rounded.tobytes())
        if key not in self:
            normed.setflags(write=False)
            self._mats[key] = normed
        return key, scale

    def __getitem__(self, key: str) -> np.ndarray:
        if key in self._mats:
            return self._mats[key]
        if key not in self._recipes:
            raise KeyError(key)
        if self._last is None or self._last[0] != key:
            self._last = None  # drop the previous one before building the next
            key_built, _, normed = self.normalised(self._loader(self._recipes[key][1]))
            if key_built != key:  # the recipe no longer builds the matrix it was recorded for
                raise ValueError(f"the recipe of stored matrix {key} builds {key_built}: its generator changed")
            normed.setflags(write=False)
            self._last = (key, normed)
        return self._last[1]

    def __contains__(self, key: str) -> bool:
        return key in self._mats or key in self._recipes

    def __len__(self) -> int:
        return len(self._mats) + len(self._recipes)

    def shape(self, key: str) -> tuple[int, ...]:
        """The shape of a stored matrix, without rebuilding one kept as a recipe."""
        return self._recipes[key][0] if key in self._recipes else self._mats[key].shape

    def recipe(self, key: str) -> dict | None:
        """The recipe a matrix is kept as, or None when the matrix itself is held."""
        return dict(self._recipes[key][1]) if key in self._recipes else None

    def add_recipe(self, key: str, shape, recipe: dict) -> None:
        """Insert a matrix kept as its recipe, read back from a file under its recorded key (the
        first access rebuilds it and checks that it hashes to ``key``)."""
        if self._loader is None:
            raise ValueError("this store has no loader: it cannot keep recipes")
        self._recipes[key] = (tuple(int(n) for n in shape), dict(recipe))

    def add_normalised(self, key: str, m: np.ndarray) -> None:
        """Insert a matrix read back from a file under its recorded key."""
        m = np.array(m, dtype=float)
        m.setflags(write=False)
        self._mats[key] = m


def stored_shape(store, key: str) -> tuple[int, ...]:
    """The shape of ``store[key]`` without rebuilding a matrix kept as a recipe (``store`` may also be
    a plain mapping of arrays)."""
    return tuple(store.shape(key)) if isinstance(store, MatrixStore) else store[key].shape
