r"""Implicit union-of-Kronecker workloads and strategies over the full domain (HDMM §5-6).

Nothing here materialises the full domain (which may have 10^40 cells) unless asked to (``dense``,
``merged``, ``measure``, ``estimate``: small domains only).

A workload is the union of its product views; view j has queries ⊗_i Q_ji over the full domain, with
Q_ji the view's 1-D family on its attributes and the total 1^T elsewhere, so

    W^T W = Σ_j w_j ⊗_i G_{i, F[j, i]}     (G_i,f: the distinct 1-D Grams of attribute i; 1 1^T = "total").

A strategy is a union of Kronecker blocks with mutually orthogonal ranges,

    X = A^T A = Σ_b κ_b ⊗_i M_{i, H[b, i]},   max diag M = 1,

with unit-diagonal factors when there are several blocks, so that diag(X) = Σ_b κ_b everywhere: the
privacy cost (max diag X) is exactly Σ_b κ_b (for one block, κ ∏ max diag M_i = κ). Orthogonal ranges give
X^+ = Σ_b κ_b^-1 ⊗_i M^+, so the expected squared error of view j, w_j tr(G_j X^+), is
Σ_b κ_b^-1 w_j ∏_i tr(G_{i,F[j,i]} M_{i,H[b,i]}^+): products of per-attribute traces, computed from small tables.

>>> from querysmasher.schema import parse_schema
>>> from querysmasher.workload import parse_workload
>>> w = ImplicitWorkload.from_workload(parse_workload("prefix:1", parse_schema("synthetic:n=3,d=2")))
>>> s = KronStrategy.single((np.eye(3), np.eye(3)))
>>> s.privacy_cost(), s.term_variances(w).tolist()  # Σ_c ||prefix c||^2 x ||1||^2 per view
(1.0, [18.0, 18.0])
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..errors import InputError
from ..families import gram_1d
from ..linalg import kron_apply, kron_dense, pinv_psd, psd_power
from ..workload import Workload

__all__ = ["TOTAL", "ImplicitWorkload", "KronStrategy", "sym_sqrt", "pinv_factor"]

TOTAL = "total"  # the 1-D "family" of an attribute a view does not use: the query 1^T, Gram 1 1^T
_CHUNK_ENTRIES = 1 << 22  # (terms x blocks) entries evaluated at a time: bounds memory on huge workloads
_UNIT_DIAG_ATOL = 1e-9
_PINV_MEMO_BYTES = 64 << 20  # pseudo-inverses kept by pinv_factor (least recently used dropped first)


class _PinvMemo:
    """Pseudo-inverses of strategy factors by content, bounded in bytes.

    One plan evaluates the same factors over and over: the total 1 1^T on every attribute a view
    does not use (38 of 40 in Table 4's 2-way views) and one OPT_0 solution shared by every view
    with that attribute and family. Each pseudo-inverse is an eigendecomposition; 820 views x 40
    attributes of them took most of a per-view OPT_+ plan (range:1,2 on [40]^40)."""

    def __init__(self, max_bytes: int):
        self.max_bytes, self.used = max_bytes, 0
        self._kept: OrderedDict[bytes, np.ndarray] = OrderedDict()

    def __call__(self, m: np.ndarray) -> np.ndarray:
        m = np.ascontiguousarray(m, dtype=float)
        h = hashlib.blake2b(str(m.shape).encode(), digest_size=20)
        h.update(m.tobytes())
        key = h.digest()
        hit = self._kept.get(key)
        if hit is not None:
            self._kept.move_to_end(key)
            return hit
        out = pinv_psd(m)
        out.setflags(write=False)  # shared between callers
        if out.nbytes <= self.max_bytes // 4:
            self._kept[key] = out
            self.used += out.nbytes
            while self.used > self.max_bytes:
                self.used -= self._kept.popitem(last=False)[1].nbytes
        return out


pinv_factor = _PinvMemo(_PINV_MEMO_BYTES)


def sym_sqrt(m: np.ndarray, power: float = 0.5) -> np.ndarray:
    """M^power on range(M) (0 on its null space) for symmetric PSD M; power -0.5 gives (M^½)^+."""
    return psd_power(m, power)


@dataclass(frozen=True, eq=False)
class ImplicitWorkload:
    """W^T W = Σ_j weights[j] ⊗_i grams[i][index[j, i]]; term j is workload view j."""

    sizes: tuple[int, ...]
    grams: tuple[tuple[np.ndarray, ...], ...]  # per attribute: its distinct 1-D Grams
    names: tuple[tuple[str, ...], ...]  # their families (TOTAL for 1 1^T)
    index: np.ndarray  # (terms, attributes) int
    weights: np.ndarray  # (terms,)
    labels: tuple[int, ...]  # the spec term (``+``-separated) each term comes from

    @classmethod
    def from_workload(cls, workload: Workload) -> ImplicitWorkload:
        """One term per workload view; non-product families have no Kronecker form (InputError)."""
        bad = sorted({t.spec() for t in workload.terms if t.family in ("affine", "abs", "random", "custom")})
        if bad:
            raise InputError(
                "method",
                "hdmm",
                f"does not support non-product families (affine, abs, random, custom): {', '.join(bad)}",
            )
        sizes = workload.schema.sizes
        used: list[dict[str, int]] = [{TOTAL: 0} for _ in sizes]
        index = np.zeros((len(workload.views), len(sizes)), dtype=np.int64)
        for j, v in enumerate(workload.views):
            for a, f in zip(v.attrs, v.factors):
                index[j, a] = used[a].setdefault(f, len(used[a]))
        names = tuple(tuple(u) for u in used)
        grams = tuple(
            tuple(np.ones((n, n)) if f == TOTAL else np.array(gram_1d(f, n)) for f in fs) for fs, n in zip(names, sizes)
        )
        return cls(
            sizes,
            grams,
            names,
            index,
            np.array([v.weight for v in workload.views], dtype=float),
            tuple(v.term for v in workload.views),
        )

    @property
    def cells(self) -> int:
        return math.prod(self.sizes)

    def __len__(self) -> int:
        return len(self.weights)

    def subset(self, terms: np.ndarray) -> ImplicitWorkload:
        terms = np.asarray(terms, dtype=np.int64)
        return ImplicitWorkload(
            self.sizes,
            self.grams,
            self.names,
            self.index[terms],
            self.weights[terms],
            tuple(self.labels[t] for t in terms),
        )

    def active(self) -> list[int]:
        """Attributes on which some term is not the total (the others are best measured by 1^T)."""
        return [
            i for i in range(len(self.sizes)) if any(self.names[i][f] != TOTAL for f in np.unique(self.index[:, i]))
        ]

    def dense_gram(self) -> np.ndarray:
        """The explicit W^T W over the full domain (small domains only)."""
        g = np.zeros((self.cells, self.cells))
        for row, w in zip(self.index, self.weights):
            g += w * kron_dense([self.grams[i][f] for i, f in enumerate(row)])
        return g

    def merged(self) -> ImplicitWorkload:
        """The same W^T W as one dense term on one attribute of size ``cells`` (HDMM's explicit OPT_0)."""
        return ImplicitWorkload(
            (self.cells,), ((self.dense_gram(),),), (("explicit",),), np.zeros((1, 1), dtype=np.int64), np.ones(1), (0,)
        )


@dataclass(frozen=True, eq=False)
class KronStrategy:
    """X = Σ_b weights[b] ⊗_i mats[i][index[b, i]]: orthogonal blocks, factors with max diagonal 1
    (unit diagonals when there are several blocks)."""

    sizes: tuple[int, ...]
    mats: tuple[tuple[np.ndarray, ...], ...]  # per attribute: distinct PSD factors
    index: np.ndarray  # (blocks, attributes) int
    weights: np.ndarray  # (blocks,) > 0

    def __post_init__(self) -> None:
        several = len(self.weights) > 1
        for fs in self.mats:
            for m in fs:
                diag = np.diag(m)
                if abs(diag.max() - 1.0) > _UNIT_DIAG_ATOL or (
                    several and not np.allclose(diag, 1.0, rtol=0, atol=_UNIT_DIAG_ATOL)
                ):
                    raise ValueError(
                        "strategy factors need max diagonal 1, and a unit diagonal in a union of blocks "
                        "(exact privacy cost)"
                    )
        if several and not self._blocks_orthogonal():
            raise ValueError("the blocks of a strategy must have mutually orthogonal ranges")

    @classmethod
    def single(cls, factors: tuple[np.ndarray, ...]) -> KronStrategy:
        """One Kronecker block ⊗ X_i at privacy cost 1."""
        return cls(
            tuple(len(f) for f in factors),
            tuple((f,) for f in factors),
            np.zeros((1, len(factors)), dtype=np.int64),
            np.ones(1),
        )

    def _blocks_orthogonal(self) -> bool:
        # Two Kronecker blocks are orthogonal iff some attribute has factors with M M' = 0.
        ortho = np.zeros((len(self.weights),) * 2, dtype=bool)
        for i, fs in enumerate(self.mats):
            pair = np.array([[np.allclose(a @ b, 0, atol=1e-10) for b in fs] for a in fs])
            ortho |= pair[np.ix_(self.index[:, i], self.index[:, i])]
        np.fill_diagonal(ortho, True)
        return bool(ortho.all())

    def privacy_cost(self) -> float:
        """max diag(X) = Σ_b κ_b (see the module docstring)."""
        return float(self.weights.sum())

    def applied_cost(self) -> float:
        """Privacy cost at unit noise of what :meth:`measure` applies, A_b = κ_b^½ ⊗_i R_i with R_i
        the (eigen-truncated) square root of each stored factor, recomputed from those roots:
        Σ_b κ_b ∏_i max diag(R_i^T R_i), at least max diag(Σ_b A_b^T A_b) whatever the stored
        factors' diagonals (:meth:`privacy_cost` assumes them exact)."""
        diag = [[float(np.einsum("ij,ij->j", root, root).max(initial=0.0)) for root, _ in fs] for fs in self._roots]
        return float(
            sum(w * math.prod(diag[i][h] for i, h in enumerate(row)) for row, w in zip(self.index, self.weights))
        )

    def block_rows(self) -> list[int]:
        """Length of each block's measured vector (every factor's root is square)."""
        return [math.prod(self.sizes)] * len(self.weights)

    def _tables(self, workload: ImplicitWorkload) -> list[np.ndarray]:
        """Per attribute i: T_i[f, h] = tr(G_{i,f} M_{i,h}^+)."""
        out = []
        for gs, ms in zip(workload.grams, self.mats):
            pinvs = [pinv_factor(m) for m in ms]
            out.append(np.array([[float(np.sum(g * p)) for p in pinvs] for g in gs]))
        return out

    def _chunks(self, workload: ImplicitWorkload):
        """Yield (term slice, V) with V[j, b] = w_j κ_b^-1 ∏_i T_i[F_ji, H_bi], a block of terms at a time."""
        tables = self._tables(workload)
        step = max(1, _CHUNK_ENTRIES // len(self.weights))
        for lo in range(0, len(workload), step):
            sl = slice(lo, lo + step)
            v = np.outer(workload.weights[sl], 1.0 / self.weights)
            for i, t in enumerate(tables):
                v *= t[np.ix_(workload.index[sl, i], self.index[:, i])]
            yield sl, v

    def term_variances(self, workload: ImplicitWorkload) -> np.ndarray:
        """w_j tr(G_j X^+) for every term j: its weighted sum of variances at unit noise."""
        out = np.empty(len(workload))
        for sl, v in self._chunks(workload):
            out[sl] = v.sum(axis=1)
        return out

    def block_variances(self, workload: ImplicitWorkload) -> np.ndarray:
        """Σ_j w_j κ_b^-1 tr(G_j ⊗ M_b^+) for every block b: the error each block carries."""
        out = np.zeros(len(self.weights))
        for _, v in self._chunks(workload):
            out += v.sum(axis=0)
        return out

    def dense(self) -> np.ndarray:
        """The explicit X over the full domain (small domains only)."""
        return sum(
            w * kron_dense([self.mats[i][h] for i, h in enumerate(row)]) for row, w in zip(self.index, self.weights)
        )

    @cached_property
    def _roots(self) -> tuple[tuple[tuple[np.ndarray, np.ndarray], ...], ...]:
        """(M^½, (M^½)^+) of every distinct factor, computed once per strategy."""
        return tuple(tuple((sym_sqrt(m), sym_sqrt(m, -0.5)) for m in fs) for fs in self.mats)

    def answer(self, x: np.ndarray) -> tuple[np.ndarray, ...]:
        """A x, one vector per block, with A_b = κ_b^½ ⊗_i M_i^½ (so A^T A = X); the release adds
        the noise (:mod:`querysmasher.hdmm.release`)."""
        return tuple(
            math.sqrt(w) * kron_apply([self._roots[i][h][0] for i, h in enumerate(row)], x, self.sizes)
            for row, w in zip(self.index, self.weights)
        )

    def pinv_apply(self, v: np.ndarray) -> np.ndarray:
        """X^+ v = Σ_b κ_b^-1 ⊗_i M_i^+ v (the blocks are orthogonal)."""
        x = np.zeros(math.prod(self.sizes))
        for row, w in zip(self.index, self.weights):
            roots = [self._roots[i][h][1] for i, h in enumerate(row)]
            x += kron_apply(roots, kron_apply(roots, v, self.sizes), self.sizes) / w
        return x

    def estimate(self, ys: tuple[np.ndarray, ...]) -> np.ndarray:
        """Least squares x̂ = X^+ A^T y = Σ_b A_b^+ y_b (the blocks are orthogonal)."""
        x = np.zeros(math.prod(self.sizes))
        for row, w, y in zip(self.index, self.weights, ys):
            x += kron_apply([self._roots[i][h][1] for i, h in enumerate(row)], y, self.sizes) / math.sqrt(w)
        return x
