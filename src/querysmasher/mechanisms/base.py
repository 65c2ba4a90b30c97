"""The mechanism record every kind shares: :class:`ViewMechanism` (privacy cost, the applied operator,
variances, rank, shared eigendecompositions), the kind registry and the helpers the kinds use.

The kinds are :mod:`.kron`, :mod:`.dense`, :mod:`.lowrank` and :mod:`.fourier`; the package's
docstring (:mod:`querysmasher.mechanisms`) describes them.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

import numpy as np

from ..errors import InputError
from ..linalg import content_hash, kron_apply, psd_eigh, psd_power

__all__ = [
    "ViewMechanism",
    "MECHANISM_KINDS",
    "EXACT_PAIR_CELLS",
    "LOWRANK_EXACT_PAIR_WORK",
    "RANK_RTOL",
    "SMALL_CELLS",
    "shared_psd_eigh",
    "shared_psd_power",
    "prime_eigh",
    "mechanism_cost",
    "count_positive",
    "refuse",
    "max_pair_distance",
    "factor_pair_distance",
    "check_square_factors",
]

EXACT_PAIR_CELLS = 4096  # replace costs are computed exactly over all cell pairs up to this many cells
LOWRANK_EXACT_PAIR_WORK = 4e9  # cells^2 * rank up to which a lowrank replace cost is exact
RANK_RTOL = 1e-9  # eigenvalues below this fraction of the largest count as zero
_CHUNK_BYTES = 64 << 20  # per-query variances are accumulated over blocks of at most this size

_SMALL_EIGH: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # content hash -> psd_eigh, for Kronecker factors
SMALL_CELLS = 256 * 256  # factors up to this size are shared by content (at most _SMALL_ENTRIES of them)
_SMALL_ENTRIES = 1024


def shared_psd_eigh(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """psd_eigh, once per distinct small matrix: the Kronecker mechanisms of a plan repeat the same
    1-D factors over hundreds of views and solution keys (measure did 375 eigendecompositions for
    Adult's hybrid:2, of a few dozen distinct factors)."""
    if m.size > SMALL_CELLS:
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
    if m.size > SMALL_CELLS:
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
_PRIMED_EIGH: weakref.WeakKeyDictionary[ViewMechanism, list] = weakref.WeakKeyDictionary()


def prime_eigh(mech: ViewMechanism, eig: list[tuple[np.ndarray, np.ndarray]]) -> None:
    """Give ``mech`` the :func:`~querysmasher.linalg.psd_eigh` of its matrices, computed elsewhere
    (with the same truncation policy: :func:`~querysmasher.linalg.psd_truncate`)."""
    if not mech.PRIMABLE or len(eig) != len(mech.mats):
        raise ValueError("eig must hold one (w, V) per matrix of a kron or dense mechanism")
    _PRIMED_EIGH[mech] = eig


@lru_cache(maxsize=64)
def _mechanism_eigh(mech: ViewMechanism) -> list[tuple[np.ndarray, np.ndarray]]:
    """Cached per mechanism object (hashed by identity; mechanisms are immutable and shared by views)."""
    return [shared_psd_eigh(m) for m in mech.mats]


def count_positive(w: np.ndarray) -> int:
    w = np.asarray(w, dtype=float)
    return int(np.sum(w > RANK_RTOL * max(float(w.max(initial=0.0)), 1e-300)))


def refuse(kind: str, reason: str) -> InputError:
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
    PRIMABLE: ClassVar[bool] = False  # whether its matrices' eigenpairs may be given (prime_eigh): kron, dense

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
            raise ValueError(
                f"a {self.kind} mechanism over {len(self.sizes)} attributes holds "
                f"{self.array_count(self.kind, self.sizes)} arrays"
            )
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

    @classmethod
    def stored_arrays(cls, g, sizes: tuple[int, ...]) -> tuple[np.ndarray, ...]:
        """The arrays of a stored mechanism of this kind (HDF5 group ``g`` of a plan or solve file),
        each checked (:mod:`querysmasher.h5read`) for its shape from ``sizes`` before it is read and
        for finite float entries; a kind that says no more (a plugin's) gets m0, m1, ... checked
        for finite floats, and its class checks their shapes."""
        from .. import h5read as r  # loads h5py only where it is used

        return tuple(r.array(g, f"m{i}", kind="f") for i in range(cls.arrays(sizes)))

    @classmethod
    def stored_rotation(cls, g, mats: tuple[np.ndarray, ...]) -> np.ndarray | None:
        """The stored rotation of a kind that takes one (checked as for :meth:`stored_arrays`)."""
        return None

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
        return max_pair_distance(self.dense_x())

    @property
    def pairs_enumerable(self) -> bool:
        """Whether the replace cost is exact over all cell pairs (at most ``EXACT_PAIR_CELLS`` cells)."""
        return self.cells <= EXACT_PAIR_CELLS

    def cost(self, neighbours: str) -> float:
        """Privacy cost at unit noise under the neighbouring relation."""
        if neighbours == "add-remove":
            return float(self.max_diag())
        if neighbours == "replace":
            return float(self.replace_cost())
        raise InputError("neighbours", neighbours, "must be add-remove or replace")

    def applied(self) -> ViewMechanism:
        """The mechanism :meth:`sqrt_apply` really applies, of the same kind, so that a stored X
        that is not PSD, not symmetric or edited is charged for what is released; malformed arrays
        (wrong shapes, NaN) are an InputError."""
        for m in self.mats:
            if not np.all(np.isfinite(m)):
                raise refuse(self.kind, "holds a NaN or infinite entry")
        return self._applied()

    def _applied(self) -> ViewMechanism:
        return self

    # --- the measured operator ------------------------------------------------------------------

    def sqrt_apply(self, x: np.ndarray) -> np.ndarray:
        """B x (x: cells, or cells x batch)."""
        raise NotImplementedError

    def sqrt_factors(self) -> tuple[np.ndarray, ...] | None:
        """The per-attribute matrices :meth:`sqrt_apply` applies, whose Kronecker product is the
        measured operator, for kinds that are a Kronecker product (None otherwise)."""
        return None

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
            t = kron_apply(kept_q, e[:, lo : lo + step], self.sizes)
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
        if _PRIMED_EIGH.get(self) is None and all(m.size <= SMALL_CELLS for m in self.mats):
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


def check_square_factors(mech: ViewMechanism, shapes: list[tuple[int, int]]) -> None:
    if [tuple(m.shape) for m in mech.mats] != shapes:
        raise refuse(mech.kind, f"has matrices of shapes {[m.shape for m in mech.mats]}, expected {shapes}")


def factor_pair_distance(u: np.ndarray, rows: int = 512) -> float:
    """Replace cost of X = U U^T from its factor U (one row per cell): max over cell pairs of
    |u_i - u_j|^2, exact in row blocks while cells^2 * columns stays below
    ``LOWRANK_EXACT_PAIR_WORK``; above it the bound (|u_i| + |u_j|)^2 <= 4 max |u_i|^2
    (over-reporting is safe)."""
    u = np.asarray(u, dtype=float)
    n = np.einsum("ij,ij->i", u, u)
    if u.shape[0] < 2:
        return 0.0
    if u.shape[0] ** 2 * max(u.shape[1], 1) > LOWRANK_EXACT_PAIR_WORK:
        return 4.0 * float(n.max(initial=0.0))
    best = 0.0
    for lo in range(0, u.shape[0], rows):
        block = n[lo : lo + rows, None] + n[None, :] - 2.0 * (u[lo : lo + rows] @ u.T)
        best = max(best, float(block.max()))
    return best


def mechanism_cost(mech: ViewMechanism, neighbours: str) -> float:
    """Privacy cost of one view mechanism at unit noise (:meth:`ViewMechanism.cost`)."""
    return mech.cost(neighbours)


def max_pair_distance(x: np.ndarray, rows: int = 512) -> float:
    """max over i != j of x_ii + x_jj - 2 x_ij, in row blocks (no cells^2 temporary)."""
    d = np.diag(x)
    best = 0.0
    for lo in range(0, x.shape[0], rows):
        block = d[lo : lo + rows, None] + d[None, :] - 2.0 * x[lo : lo + rows]
        best = max(best, float(block.max()))
    return best
