"""View mechanisms: one class per kind, with every operation the stages need (cost, apply, variances, rank).

A mechanism over one view (its cells row-major over the view's attributes) is a Gaussian mechanism
at privacy cost <= 1, described by its privacy Gram X = B^T B (unit noise): it releases
y = B x + N(0, sigma^2 I). Four kinds keep large views implicit:

* ``kron`` (:class:`KronMechanism`): X = X_1 ⊗ ... ⊗ X_k, one small matrix per attribute (RP, WFF,
  QS on one-term Grams); B = ⊗ X_i^(1/2);
* ``dense`` (:class:`DenseMechanism`): one c x c matrix (QS on several-term Grams, ``mm``);
  B = X^(1/2);
* ``fourier`` (:class:`FourierMechanism`): X = F^H diag(w) F, F the unnormalised multi-dimensional
  DFT and w a table over frequencies (WFF on several-term Grams); B x = sqrt(c) IFFT(sqrt(w) FFT(x));
* ``lowrank`` (:class:`LowRankMechanism`): X = V diag(s) V^T with V (c x r) orthonormal columns and
  s >= 0 (QS on several-term Grams of rank r < c); B = W diag(s)^(1/2) V^T, r noisy values, with W an
  orthogonal ``rotation`` (the identity unless re-derived from a query factor).

Every kind answers the same questions, so no stage switches on the kind: the privacy cost under
each neighbouring relation (:meth:`~ViewMechanism.cost`), the operator actually applied
(:meth:`~ViewMechanism.applied`, refusing malformed arrays), B x and B^+ y
(:meth:`~ViewMechanism.sqrt_apply`, :meth:`~ViewMechanism.pinv_sqrt_apply`), q X^+ q^T for explicit
and for Kronecker query rows (:meth:`~ViewMechanism.rows_pinv_quadratic`,
:meth:`~ViewMechanism.kron_rows_pinv_quadratic`) and the rank of X (:meth:`~ViewMechanism.rank`),
none of them forming a c x c matrix for kron, fourier or lowrank mechanisms.
``ViewMechanism(kind, sizes, mats)`` builds the class of ``kind`` (the form solvers and plugins use).

>>> v = np.array([[0.6], [0.8]])  # X = 2 v v^T, rank 1 over 2 cells
>>> m = ViewMechanism("lowrank", (2,), (v, np.array([2.0])))
>>> type(m).__name__, round(m.max_diag(), 12), m.outputs, m.rank(), m.dense_x().round(12).tolist()
('LowRankMechanism', 1.28, 1, 1, [[0.72, 0.96], [0.96, 1.28]])
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

import numpy as np

from .errors import InputError
from .linalg import content_hash, kron_apply, kron_dense, psd_eigh, psd_power

__all__ = [
    "ViewMechanism", "KronMechanism", "DenseMechanism", "FourierMechanism", "LowRankMechanism", "MECHANISM_KINDS",
    "EXACT_PAIR_CELLS", "shared_psd_eigh", "shared_psd_power", "prime_eigh", "mechanism_cost", "RANK_RTOL",
]

EXACT_PAIR_CELLS = 4096  # replace costs are computed exactly over all cell pairs up to this many cells
LOWRANK_EXACT_PAIR_WORK = 4e9  # cells^2 * rank up to which a lowrank replace cost is exact
RANK_RTOL = 1e-9  # eigenvalues below this fraction of the largest count as zero
_CHUNK_BYTES = 64 << 20  # per-query variances are accumulated over blocks of at most this size

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
    if not isinstance(mech, (KronMechanism, DenseMechanism)) or len(eig) != len(mech.mats):
        raise ValueError("eig must hold one (w, V) per matrix of a kron or dense mechanism")
    _PRIMED_EIGH[mech] = eig


@lru_cache(maxsize=64)
def _mechanism_eigh(mech: "ViewMechanism") -> list[tuple[np.ndarray, np.ndarray]]:
    """Cached per mechanism object (hashed by identity; mechanisms are immutable and shared by views)."""
    return [shared_psd_eigh(m) for m in mech.mats]


def _count_positive(w: np.ndarray) -> int:
    w = np.asarray(w, dtype=float)
    return int(np.sum(w > RANK_RTOL * max(float(w.max(initial=0.0)), 1e-300)))


def _refuse(kind: str, reason: str) -> InputError:
    return InputError("plan mechanism", kind, reason)


MECHANISM_KINDS: dict[str, type] = {}


@dataclass(frozen=True, eq=False)
class ViewMechanism:
    """A mechanism over one view, at privacy cost <= 1 (see the module docstring). Built as
    ``ViewMechanism(kind, sizes, mats[, rotation])``, which gives the class of ``kind``."""

    kind: str
    sizes: tuple[int, ...]
    mats: tuple[np.ndarray, ...]
    # lowrank only: an orthogonal r x r W; the measured operator is B = W diag(s)^(1/2) V^T (None: W = I).
    # B^T B = X either way; a mechanism re-derived from its query factor (querysmasher.queryfactor)
    # sets W so that B = L^T F whatever basis the SVD returned.
    rotation: np.ndarray | None = None

    KIND: ClassVar[str] = ""
    ROTATED: ClassVar[bool] = False  # whether the kind takes a rotation
    FACTORWISE: ClassVar[bool] = False  # variances of a view's cells factor by factor, whatever its size

    def __new__(cls, kind=None, *args, **kwargs):
        if cls is ViewMechanism:
            kind = kind if kind is not None else kwargs.get("kind")
            if kind not in MECHANISM_KINDS:
                raise ValueError(f"unknown mechanism kind {kind!r}")
            cls = MECHANISM_KINDS[kind]
        return object.__new__(cls)

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if cls.KIND:
            MECHANISM_KINDS[cls.KIND] = cls

    def __post_init__(self) -> None:
        if self.kind != self.KIND:
            raise ValueError(f"a {type(self).__name__} has kind {self.KIND!r}, not {self.kind!r}")
        if len(self.mats) != self.array_count(self.kind, self.sizes):
            raise ValueError(f"a {self.kind} mechanism over {len(self.sizes)} attributes holds {self.array_count(self.kind, self.sizes)} arrays")
        if self.rotation is not None and not self.ROTATED:
            raise ValueError("a rotation is an r x r matrix of a lowrank mechanism")

    @staticmethod
    def array_count(kind: str, sizes: tuple[int, ...]) -> int:
        """How many arrays a mechanism of this kind holds (plan files store them as m0, m1, ...)."""
        if kind not in MECHANISM_KINDS:
            raise ValueError(f"unknown mechanism kind {kind!r}")
        return MECHANISM_KINDS[kind].arrays(sizes)

    @staticmethod
    def arrays(sizes: tuple[int, ...]) -> int:
        return 1

    @property
    def cells(self) -> int:
        return math.prod(self.sizes)

    def __repr__(self) -> str:
        return f"ViewMechanism({self.kind}, sizes={self.sizes})"

    @property
    def outputs(self) -> int:
        """Noisy values one measurement of the view releases."""
        return self.cells

    # --- privacy ---------------------------------------------------------------------------------

    def max_diag(self) -> float:
        """Privacy cost under add-remove: the largest diagonal entry of X."""
        raise NotImplementedError

    def replace_cost(self) -> float:
        """Privacy cost when one record is replaced by another: max over cell pairs of
        (e_i - e_j)^T X (e_i - e_j); exact up to ``EXACT_PAIR_CELLS`` cells, above an upper bound
        where the kind has no exact form (over-reporting is safe).

        >>> ViewMechanism("kron", (3,), (np.eye(3),)).replace_cost()
        2.0
        """
        if self.cells < 2:
            return 0.0
        return _max_pair_distance(self.dense_x())

    def cost(self, neighbours: str) -> float:
        """Privacy cost at unit noise under the neighbouring relation."""
        if neighbours == "add-remove":
            return float(self.max_diag())
        if neighbours == "replace":
            return float(self.replace_cost())
        raise InputError("neighbours", neighbours, "must be add-remove or replace")

    def applied(self) -> "ViewMechanism":
        """The mechanism :meth:`sqrt_apply` really applies, of the same kind, so that a stored X
        that is not PSD, not symmetric or edited is charged for what is released; malformed arrays
        (wrong shapes, NaN) are an InputError."""
        for m in self.mats:
            if not np.all(np.isfinite(m)):
                raise _refuse(self.kind, "holds a NaN or infinite entry")
        return self._applied()

    def _applied(self) -> "ViewMechanism":
        return self

    # --- the measured operator ------------------------------------------------------------------

    def sqrt_apply(self, x: np.ndarray) -> np.ndarray:
        """B x (x: cells, or cells x batch)."""
        raise NotImplementedError

    def pinv_sqrt_apply(self, y: np.ndarray) -> np.ndarray:
        """B^+ y: the least-squares estimate of the view's vector from y = B x + noise."""
        raise NotImplementedError

    # --- variances (unit noise) -----------------------------------------------------------------

    def rows_pinv_quadratic(self, s: np.ndarray) -> np.ndarray:
        """s X^+ s^T for every row of s (explicit queries over the mechanism's cells)."""
        z = self.pinv_sqrt_apply(s.T)
        return np.sum(z * z, axis=0)

    def kron_rows_pinv_quadratic(self, kept_q: list[np.ndarray]) -> np.ndarray:
        """q X^+ q^T for every Kronecker row q = ⊗ kept_q[j][a_j] (a table over the row indices),
        without forming the rows: through a factor X^+ = E E^T applied to the queries by mode
        products, a block of E's columns at a time."""
        shape = [q.shape[0] for q in kept_q]
        e = self.pinv_factor()
        rows = math.prod(shape)
        out = np.zeros(rows)
        step = max(1, _CHUNK_BYTES // (8 * max(rows, self.cells)))
        for lo in range(0, e.shape[1], step):
            t = kron_apply(kept_q, e[:, lo:lo + step], self.sizes)
            out += np.einsum("ij,ij->i", t, t)
        return out.reshape(shape)

    def pinv_factor(self) -> np.ndarray:
        """E (c x r) with X^+ = E E^T."""
        raise NotImplementedError

    # --- structure ------------------------------------------------------------------------------

    def rank(self) -> int:
        """The rank of X (eigenvalues above ``RANK_RTOL`` of the largest)."""
        raise NotImplementedError

    def dense_x(self) -> np.ndarray:
        """The explicit privacy Gram X (small views and tests)."""
        raise NotImplementedError

    def eigh(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """:func:`~querysmasher.linalg.psd_eigh` of each stored matrix (kron factors, or the dense X),
        computed once per mechanism: its square roots (measure), pseudo-inverse factor (variances)
        and every other power come from these."""
        raise ValueError(f"eigh is for kron and dense mechanisms, not {self.kind}")

    def powers(self, power: float) -> list[np.ndarray]:
        """X^power of each stored matrix (kron factors, or the dense X) on its range: from the
        primed eigenpairs when a solver or a plan file gave them, else once per distinct small
        matrix (:func:`shared_psd_power`), else from this mechanism's cached :meth:`eigh`."""
        if _PRIMED_EIGH.get(self) is None and all(m.size <= _SMALL_CELLS for m in self.mats):
            return [shared_psd_power(m, power) for m in self.mats]
        return [psd_power(m, power, eig=e) for m, e in zip(self.mats, self.eigh())]

    def _matrix_eigh(self) -> list[tuple[np.ndarray, np.ndarray]]:
        primed = _PRIMED_EIGH.get(self)
        return primed if primed is not None else _mechanism_eigh(self)

    @property
    def _sqrt(self) -> list[np.ndarray]:
        return _cached_powers(self, 0.5)

    @property
    def _pinv_sqrt(self) -> list[np.ndarray]:
        return _cached_powers(self, -0.5)


@lru_cache(maxsize=128)
def _cached_powers(mech: ViewMechanism, power: float) -> list[np.ndarray]:
    """X^(1/2) and X^(+1/2) of a mechanism, for the last mechanisms used (bounded: a plan's dense
    roots are c x c each; mechanisms are immutable and hashed by identity)."""
    return mech.powers(power)


@lru_cache(maxsize=64)
def _lowrank_factors(mech: "LowRankMechanism") -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """V, diag(s)^(1/2) and W restricted to s > 0 (what B and B^+ apply)."""
    v, s = mech.mats
    nz = s > 0
    return v[:, nz], np.sqrt(s[nz]), None if mech.rotation is None else mech.rotation[:, nz]


def _check_square_factors(mech: ViewMechanism, shapes: list[tuple[int, int]]) -> None:
    if [tuple(m.shape) for m in mech.mats] != shapes:
        raise _refuse(mech.kind, f"has matrices of shapes {[m.shape for m in mech.mats]}, expected {shapes}")


class KronMechanism(ViewMechanism):
    """X = X_1 ⊗ ... ⊗ X_k."""

    KIND = "kron"
    FACTORWISE = True

    @staticmethod
    def arrays(sizes: tuple[int, ...]) -> int:
        return len(sizes)

    def max_diag(self) -> float:
        return math.prod(float(np.diag(m).max()) for m in self.mats) if self.mats else 1.0

    def replace_cost(self) -> float:
        if self.cells < 2 or self.cells <= EXACT_PAIR_CELLS:
            return super().replace_cost()
        return _kron_pair_bound(self.mats)

    def _applied(self) -> ViewMechanism:
        _check_square_factors(self, [(n, n) for n in self.sizes])
        return KronMechanism("kron", self.sizes, tuple(r @ r for r in self._sqrt))

    def sqrt_apply(self, x: np.ndarray) -> np.ndarray:
        return kron_apply(self._sqrt, x, self.sizes) if self.mats else x.copy()

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
        return math.prod(_count_positive(np.linalg.eigvalsh((m + m.T) / 2)) for m in self.mats)

    def dense_x(self) -> np.ndarray:
        return kron_dense(self.mats)

    def eigh(self) -> list[tuple[np.ndarray, np.ndarray]]:
        return self._matrix_eigh()


class DenseMechanism(ViewMechanism):
    """One c x c matrix X."""

    KIND = "dense"

    def max_diag(self) -> float:
        return float(np.diag(self.mats[0]).max())

    def _applied(self) -> ViewMechanism:
        _check_square_factors(self, [(self.cells, self.cells)])
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
        return _count_positive(np.linalg.eigvalsh((self.mats[0] + self.mats[0].T) / 2))

    def dense_x(self) -> np.ndarray:
        return self.mats[0]

    def eigh(self) -> list[tuple[np.ndarray, np.ndarray]]:
        return self._matrix_eigh()


class LowRankMechanism(ViewMechanism):
    """X = V diag(s) V^T, measured as B = W diag(s)^(1/2) V^T."""

    KIND = "lowrank"
    ROTATED = True

    @staticmethod
    def arrays(sizes: tuple[int, ...]) -> int:
        return 2

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
        if self.cells < 2 or self.cells <= EXACT_PAIR_CELLS:
            return super().replace_cost()
        return _lowrank_pair_distance(*self.mats)

    def _applied(self) -> ViewMechanism:
        rot = self.rotation
        if rot is not None:
            # B = W diag(s)^(1/2) V^T costs max diag(V s V^T), as charged, only for an orthogonal W
            if not np.all(np.isfinite(rot)) or float(np.abs(rot.T @ rot - np.eye(rot.shape[0])).max(initial=0.0)) > 1e-8:
                raise _refuse("lowrank", "has a rotation W that is not orthogonal (B = W diag(s)^(1/2) V^T would cost more than the stored X)")
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
        return _count_positive(self.mats[1])  # V has orthonormal columns: X's eigenvalues are s

    def dense_x(self) -> np.ndarray:
        v, s = self.mats
        return (v * s) @ v.T


class FourierMechanism(ViewMechanism):
    """X = F^H diag(w) F, F the unnormalised multi-dimensional DFT."""

    KIND = "fourier"

    def max_diag(self) -> float:
        return float(self.mats[0].sum())  # |F[f, x]| = 1: every diagonal entry is sum(w)

    def replace_cost(self) -> float:
        if self.cells < 2:
            return 0.0
        # Re X[x, y] = Re c(x - y) with c = fftn(w) (|F| = 1), so the cost is 2 (c(0) - min Re c(d ≠ 0)).
        c = np.real(np.fft.fftn(self.mats[0])).ravel()
        return float(2.0 * (c[0] - c[1:].min()))

    def _applied(self) -> ViewMechanism:
        w = self.mats[0]
        if tuple(w.shape) != tuple(self.sizes) or np.any(w < 0):
            raise _refuse("fourier", f"weights must be non-negative over shape {self.sizes}")
        return self  # the applied operator is X, or its real part, which costs no more

    def _root_apply(self, x: np.ndarray, inverse: bool) -> np.ndarray:
        # X = F^H diag(w) F with F the unnormalised DFT: X^(1/2) x = sqrt(c) IFFT(sqrt(w) FFT(x)).
        w = self.mats[0]
        sqrt_w = np.sqrt(w)
        scale = np.where(w > 0, 1.0 / np.where(w > 0, sqrt_w, 1.0), 0.0) if inverse else sqrt_w
        c = self.cells
        batch = x.shape[1:]
        t = x.reshape(self.sizes + batch)
        axes = tuple(range(len(self.sizes)))
        out = np.real(np.fft.ifftn(scale.reshape(self.sizes + (1,) * len(batch)) * np.fft.fftn(t, axes=axes), axes=axes))
        return (out / math.sqrt(c) if inverse else out * math.sqrt(c)).reshape((c,) + batch)

    def sqrt_apply(self, x: np.ndarray) -> np.ndarray:
        return self._root_apply(x, inverse=False)

    def pinv_sqrt_apply(self, y: np.ndarray) -> np.ndarray:
        return self._root_apply(y, inverse=True)

    @property
    def variance_weights(self) -> np.ndarray:
        """a^2 with |Re(X^(+1/2)) q|^2 = sum_f a^2(f) |F q|^2(f) / c^2: reconstruct applies the real
        part of the root, F^H diag(a) F / c with a = (r(f) + r(-f)) / 2 and r = (w^+)^(1/2) (a = r
        when w is symmetric under f -> -f, as WFF's weights are)."""
        w = self.mats[0]
        r = np.where(w > 0, 1.0 / np.sqrt(np.where(w > 0, w, 1.0)), 0.0)
        mirrored = r
        for axis, n in enumerate(r.shape):
            mirrored = np.take(mirrored, (-np.arange(n)) % n, axis=axis)
        return ((r + mirrored) / 2) ** 2

    def rows_pinv_quadratic(self, s: np.ndarray) -> np.ndarray:
        # one FFT per query, not the root's FFT and inverse
        f = np.fft.fftn(s.reshape((s.shape[0],) + tuple(self.sizes)), axes=tuple(range(1, len(self.sizes) + 1)))
        return (f.real ** 2 + f.imag ** 2).reshape(s.shape[0], -1) @ self.variance_weights.ravel() / self.cells**2

    def kron_rows_pinv_quadratic(self, kept_q: list[np.ndarray]) -> np.ndarray:
        # the Kronecker row's |F q|^2 is prod_j |F_j q_j|^2(f_j): a mode product of the variance
        # weights by the |FFT|^2 of each attribute
        shape = [q.shape[0] for q in kept_q]
        power = [np.abs(np.fft.fft(qc, axis=1)) ** 2 for qc in kept_q]
        return kron_apply(power, self.variance_weights.reshape(-1), self.sizes).reshape(shape) / self.cells**2

    def pinv_factor(self) -> np.ndarray:
        raise ValueError("pinv_factor is for dense, kron and lowrank mechanisms, not fourier")

    def rank(self) -> int:
        return _count_positive(self.mats[0])

    def dense_x(self) -> np.ndarray:
        f = _dft_matrix(self.sizes)
        return np.real(f.conj().T @ (self.mats[0].ravel()[:, None] * f))


def mechanism_cost(mech: ViewMechanism, neighbours: str) -> float:
    """Privacy cost of one view mechanism at unit noise (:meth:`ViewMechanism.cost`)."""
    return mech.cost(neighbours)


def _max_pair_distance(x: np.ndarray, rows: int = 512) -> float:
    """max over i != j of x_ii + x_jj - 2 x_ij, in row blocks (no cells^2 temporary)."""
    d = np.diag(x)
    best = 0.0
    for lo in range(0, x.shape[0], rows):
        block = d[lo:lo + rows, None] + d[None, :] - 2.0 * x[lo:lo + rows]
        best = max(best, float(block.max()))
    return best


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
