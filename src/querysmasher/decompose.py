"""Residual decomposition of a workload (paper §6.2) into compact subworkload Grams.

A query q on view A splits into one subquery per A' ⊆ A: average q over the attributes of A \\ A',
centre it along every attribute of A'. The subqueries sum back to q and subqueries of different A'
are orthogonal, so each residual view A' gets its own optimisation problem, described entirely by
its weighted Gram G_A' = sum_q w_q q_{=>A'}^T q_{=>A'}.

G_A' is kept as a sum of terms, each ``coef * (F_1 ⊗ ... ⊗ F_k)`` (one factor per attribute of A') or
``coef * D`` (a dense matrix over the cells of A'); every matrix is stored once, normalised to unit
trace, in a :class:`MatrixStore`. A dense term whose subqueries are fewer than the view's cells is
stored as its subquery matrix F (D = F^T F, see :func:`term_gram` / :func:`term_factor`), so views of
tens of thousands of cells never hold a c x c matrix. For a product family an attribute of A \\ A' collapses to the
scalar 1^T G_i 1 / n_i^2 (the sum over its rows of mean(row)^2), so query rows are never formed.

>>> from querysmasher.schema import parse_schema
>>> from querysmasher.workload import parse_workload
>>> d = decompose(parse_workload("prefix:1,2", parse_schema("synthetic:n=10,d=40")))
>>> len(d.grams), len({g.canonical(d.store)[0] for g in d.grams.values()})
(821, 3)
"""

from __future__ import annotations

import itertools
import json
import math
import time
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from .families import gram_1d, pair_query_matrix, query_matrix_1d, random_query_matrix
from .linalg import MatrixStore, centering, content_hash, kron_apply, kron_dense, project_gram
from .workload import Workload, WorkloadView

__all__ = [
    "GramTerm",
    "SubworkloadGram",
    "Decomposition",
    "decompose",
    "view_query_matrix",
    "view_answers",
    "lifted_queries",
    "subquery_matrix",
    "term_gram",
    "term_factor",
    "is_factor",
    "rebuild_matrix",
    "recipe_cells",
    "random_gram_bytes",
]

COEF_DIGITS = 12  # significant digits of normalised coefficients in canonical keys
# A lazy decomposition keeps a random view's projected Gram of at least this size as its recipe
# (family, sizes, seed, attributes, residual): rebuilt in about a second at 2,500 cells, where the
# solve of that Gram takes tens of seconds. Smaller parts (a pair's 1-way residuals) stay in memory.
LAZY_MIN_BYTES = 1 << 20
# decompose(lazy=None) keeps recipes when the random views' Grams would hold more than this
LAZY_AUTO_BYTES = 1 << 30


def is_factor(m: np.ndarray) -> bool:
    """A stored dense-term matrix with fewer rows than columns is a factor F of D = F^T F."""
    return m.shape[0] < m.shape[1]


def term_gram(m: np.ndarray) -> np.ndarray:
    """The c x c matrix D of a stored dense term (small views only)."""
    return m.T @ m if is_factor(m) else m


def term_factor(m: np.ndarray) -> np.ndarray:
    """A factor F (rows x c) with D = F^T F of a stored dense term: itself, or from an
    eigendecomposition of a stored Gram (eigenvalues at rounding level dropped)."""
    if is_factor(m):
        return m
    e, v = np.linalg.eigh((m + m.T) / 2)
    keep = e > max(m.shape[0], 32) * np.finfo(float).eps * max(float(e.max(initial=0.0)), 0.0)
    return (v[:, keep] * np.sqrt(e[keep])).T


@dataclass(frozen=True)
class GramTerm:
    """``coef`` times the Kronecker product of unit-trace ``factors`` (or one dense matrix)."""

    coef: float
    factors: tuple[str, ...]
    dense: bool = False


@dataclass(frozen=True)
class SubworkloadGram:
    """The weighted Gram of one residual view's subworkload, as a sum of terms."""

    attrs: tuple[int, ...]
    sizes: tuple[int, ...]
    terms: tuple[GramTerm, ...]

    @property
    def cells(self) -> int:
        return math.prod(self.sizes)

    @property
    def trace(self) -> float:
        # Every stored matrix has unit trace, so a term's trace is its coefficient.
        return float(sum(t.coef for t in self.terms))

    @property
    def single_kron(self) -> bool:
        return len(self.terms) == 1 and not self.terms[0].dense

    def dense(self, store: MatrixStore) -> np.ndarray:
        """The explicit c x c Gram (only for views small enough to hold)."""
        g = np.zeros((self.cells, self.cells))
        for t in self.terms:
            g += t.coef * (term_gram(store[t.factors[0]]) if t.dense else kron_dense([store[f] for f in t.factors]))
        return g

    def apply(self, store: MatrixStore, x: np.ndarray) -> np.ndarray:
        """G x for x over the view's cells, term by term (mode products for Kronecker terms, F^T (F x)
        for factored dense terms): no c x c matrix is formed."""
        out = np.zeros(self.cells)
        for t in self.terms:
            if t.dense:
                m = store[t.factors[0]]
                out += t.coef * (m.T @ (m @ x) if is_factor(m) else m @ x)
            else:
                out += t.coef * kron_apply([store[f] for f in t.factors], x, self.sizes)
        return out

    def factor(self, store: MatrixStore) -> np.ndarray:
        """F with G = F^T F: the stacked factors of the terms, sqrt(coef) times (a subquery matrix,
        or the Kronecker product of per-attribute eigenfactors). No c x c matrix is formed."""
        blocks = []
        for t in self.terms:
            f = term_factor(store[t.factors[0]]) if t.dense else kron_dense([term_factor(store[k]) for k in t.factors])
            blocks.append(math.sqrt(t.coef) * f)
        return np.vstack(blocks)

    def canonical(self, store: MatrixStore) -> tuple[str, float]:
        """(content key, scale): Grams equal up to a positive scale share the key; G = scale * G_key."""
        scale = self.trace
        parts = sorted((float(f"{t.coef / scale:.{COEF_DIGITS}g}"), t.dense, t.factors) for t in self.terms)
        return content_hash(json.dumps([list(self.sizes), parts])), scale

    def scaled(self, factor: float) -> SubworkloadGram:
        return SubworkloadGram(
            self.attrs, self.sizes, tuple(GramTerm(t.coef * factor, t.factors, t.dense) for t in self.terms)
        )


@dataclass
class Decomposition:
    """The residual views of a workload with their subworkload Grams."""

    workload: Workload
    store: MatrixStore
    grams: dict[tuple[int, ...], SubworkloadGram]
    seconds: float = 0.0

    @cached_property
    def keys(self) -> dict[tuple[int, ...], tuple[str, float]]:
        return {a: g.canonical(self.store) for a, g in self.grams.items()}

    def distinct(self) -> dict[str, SubworkloadGram]:
        """One normalised (unit-trace) Gram per distinct subproblem key."""
        out: dict[str, SubworkloadGram] = {}
        for a, g in self.grams.items():
            key, scale = self.keys[a]
            if key not in out:
                out[key] = g.scaled(1.0 / scale)
        return out


@dataclass
class _Accumulator:
    terms: dict[tuple[bool, tuple[str, ...]], float] = field(default_factory=dict)

    def add(self, coef: float, factors: tuple[str, ...], dense: bool) -> None:
        if coef > 0:
            k = (dense, factors)
            self.terms[k] = self.terms.get(k, 0.0) + coef


def view_query_matrix(workload: Workload, v: WorkloadView) -> np.ndarray:
    """Explicit queries (rows) over the cells of a non-product view (affine, abs, random, custom)."""
    sizes = tuple(workload.schema.sizes[i] for i in v.attrs)
    if v.family in ("affine", "abs"):
        return pair_query_matrix(v.family, *sizes)
    if v.family == "random":
        return random_query_matrix(sizes, v.seed, v.attrs)
    if v.family == "custom":
        return workload.custom[workload.terms[v.term].path].queries
    raise ValueError(f"{v.family} is a product family; use its per-attribute factors")


def view_answers(workload: Workload, v: WorkloadView, table: np.ndarray) -> np.ndarray:
    """Answers to every query of workload view ``v`` from a table over its cells (a reconstructed
    one, or true counts for an evaluation; a trailing batch axis kept): product families by mode
    products, the others by their explicit query rows."""
    if v.factors:
        sizes = tuple(workload.schema.sizes[a] for a in v.attrs)
        return kron_apply([query_matrix_1d(f, n) for f, n in zip(v.factors, sizes)], table, sizes)
    return view_query_matrix(workload, v) @ table


def lifted_queries(workload: Workload, v: WorkloadView, z: np.ndarray) -> np.ndarray:
    """(Q_v M_v)^T z over the full domain (cells row-major): view ``v``'s queries weighted by ``z``
    (one weight per query), through the marginalisation onto its attributes; the probe of a
    full-domain mechanism's reach (full-domain plans and HDMM's strategies)."""
    sizes = workload.schema.sizes
    view_sizes = tuple(sizes[a] for a in v.attrs)
    if v.factors:
        mats = [query_matrix_1d(f, n).T for f, n in zip(v.factors, view_sizes)]
        t = kron_apply(mats, z, tuple(m.shape[1] for m in mats))
    else:
        t = view_query_matrix(workload, v).T @ z
    shape = [sizes[a] if a in v.attrs else 1 for a in range(len(sizes))]
    return np.broadcast_to(t.reshape(shape), sizes).ravel()


def query_gram(q: np.ndarray) -> np.ndarray:
    """q^T q, exactly and in single precision when q is 0/1 with fewer than 2^24 rows (random and
    pair families): every partial sum is then an integer a float32 holds, so the product (about
    twice as fast) is exact whatever the summation order.

    >>> q = np.array([[1.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
    >>> query_gram(q).tolist()
    [[2.0, 1.0, 1.0], [1.0, 1.0, 0.0], [1.0, 0.0, 1.0]]
    """
    q = np.asarray(q, dtype=float)
    if q.shape[0] < 1 << 24 and np.array_equal(q, q != 0):
        q32 = q.astype(np.float32)
        return (q32.T @ q32).astype(float)
    return q.T @ q


def subquery_matrix(q: np.ndarray, sizes: tuple[int, ...], keep: tuple[bool, ...]) -> np.ndarray:
    """q_{=>A'} for every row of q (queries over the cells of ``sizes``): average the dropped
    attributes, centre the kept ones. Paper Eq. 3; used by reconstruction and tests."""
    t = np.asarray(q, dtype=float).reshape((q.shape[0],) + tuple(sizes))
    for axis in reversed(range(len(sizes))):
        ax = axis + 1
        t = t - t.mean(axis=ax, keepdims=True) if keep[axis] else t.mean(axis=ax)
    return t.reshape(q.shape[0], -1)


def rebuild_matrix(recipe: dict) -> np.ndarray:
    """The matrix a lazy :func:`decompose` kept as ``recipe``: a random view's Gram projected on one
    residual view, built exactly as the decomposition built it (0/1 queries, an exact integer Gram).

    >>> r = {"family": "random", "sizes": [3, 2], "seed": 0, "attrs": [0, 1], "keep": [True, True]}
    >>> rebuild_matrix(r).shape
    (6, 6)
    """
    sizes, seed, attrs, keep = _recipe_fields(recipe)
    return project_gram(query_gram(random_query_matrix(sizes, seed, attrs)), sizes, keep)


def recipe_cells(recipe) -> int:
    """The cells of the matrix a recipe builds (a ValueError for anything this version cannot
    rebuild: a recipe read from a file is checked before a query matrix is drawn)."""
    sizes, _, _, keep = _recipe_fields(recipe)
    return math.prod(n for n, k in zip(sizes, keep) if k)


def _recipe_fields(recipe) -> tuple[tuple[int, ...], int, tuple[int, ...], tuple[bool, ...]]:
    def ints(x):
        return isinstance(x, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in x)

    ok = (
        isinstance(recipe, dict)
        and recipe.get("family") == "random"
        and ints(recipe.get("sizes"))
        and ints(recipe.get("attrs"))
    )
    ok = (
        ok
        and isinstance(recipe.get("seed"), int)
        and isinstance(recipe.get("keep"), list)
        and all(isinstance(k, bool) for k in recipe["keep"])
    )
    ok = (
        ok
        and 0 < len(recipe["sizes"]) == len(recipe["attrs"]) == len(recipe["keep"])
        and all(n >= 1 for n in recipe["sizes"])
    )
    if not ok:
        raise ValueError(f"not a recipe this version can rebuild: {recipe!r}")
    return tuple(recipe["sizes"]), int(recipe["seed"]), tuple(recipe["attrs"]), tuple(recipe["keep"])


def random_gram_bytes(workload: Workload) -> int:
    """Bytes the dense Grams of ``workload``'s random views take when held (about c^2 per view):
    what a lazy decomposition leaves on disk instead."""
    sizes_all = workload.schema.sizes
    return sum(8 * math.prod(sizes_all[i] for i in v.attrs) ** 2 for v in workload.views if v.family == "random")


class _FactorCache:
    """Per (1-D family, size): the stored centred Gram and the collapse scalar 1^T G 1 / n^2."""

    def __init__(self, store: MatrixStore):
        self.store = store
        self._cache: dict[tuple[str, int], tuple[str | None, float, float]] = {}

    def get(self, family: str, n: int) -> tuple[str | None, float, float]:
        if (family, n) not in self._cache:
            g = gram_1d(family, n)
            c = centering(n)
            key, scale = self.store.intern(c @ g @ c, zero_tol=1e-12 * max(1.0, float(g.max())))
            self._cache[(family, n)] = (key, scale, float(g.sum()) / n**2)
        return self._cache[(family, n)]


def decompose(workload: Workload, *, lazy: bool | None = None) -> Decomposition:
    """Split every workload view into its residual views and accumulate their Grams.

    ``lazy``: keep each random view's large projected Grams as recipes (:func:`rebuild_matrix`),
    rebuilt when read, so that the decomposition holds one such Gram at a time whatever the number
    of views; ``None`` does so when they would hold more than ``LAZY_AUTO_BYTES``. The keys and the
    matrices read back are the same either way."""
    t0 = time.perf_counter()
    sizes_all = workload.schema.sizes
    if lazy is None:
        lazy = random_gram_bytes(workload) > LAZY_AUTO_BYTES
    store = MatrixStore(loader=rebuild_matrix if lazy else None)
    factors = _FactorCache(store)
    acc: dict[tuple[int, ...], _Accumulator] = {}
    dense_cache: dict[tuple, list[tuple[tuple[bool, ...], str | None, float]]] = {}

    for v in workload.views:
        k = len(v.attrs)
        if v.factors:
            per_attr = [factors.get(f, sizes_all[i]) for f, i in zip(v.factors, v.attrs)]
            for keep in itertools.product((False, True), repeat=k):
                coef = v.weight
                keys: list[str] = []
                for (key, scale, collapse), kp in zip(per_attr, keep):
                    if kp:
                        if key is None:
                            coef = 0.0
                            break
                        keys.append(key)
                        coef *= scale
                    else:
                        coef *= collapse
                sub = tuple(a for a, kp in zip(v.attrs, keep) if kp)
                acc.setdefault(sub, _Accumulator()).add(coef, tuple(keys), False)
            continue
        sizes = tuple(sizes_all[i] for i in v.attrs)
        # Grams of the same family on views of the same sizes are equal (random draws per view).
        ck = (
            (v.family, sizes, v.term) if v.family in ("affine", "abs", "custom") else (v.family, sizes, v.seed, v.attrs)
        )
        if ck not in dense_cache:
            q = view_query_matrix(workload, v)
            # max |q^T q| is its largest diagonal entry (PSD): no c x c Gram is needed for the tolerance
            tol = 1e-12 * max(1.0, float(np.einsum("ij,ij->j", q, q).max(initial=0.0)))
            parts = []
            # Tall q (random: 3 rows per cell): its c x c Gram once, projected per residual view,
            # costs one product instead of one per view; wide q keeps each view's factor.
            g = query_gram(q) if q.shape[0] >= q.shape[1] else None
            for keep in itertools.product((False, True), repeat=k):
                if g is not None:
                    p = project_gram(g, sizes, keep)
                    recipe = None
                    if lazy and v.family == "random" and p.nbytes >= LAZY_MIN_BYTES:
                        recipe = {
                            "family": "random",
                            "sizes": list(sizes),
                            "seed": int(v.seed),
                            "attrs": list(v.attrs),
                            "keep": list(keep),
                        }
                    key, scale = store.intern(p, zero_tol=tol, recipe=recipe) if any(keep) else (None, float(p[0, 0]))
                    parts.append((keep, key, scale))
                    continue
                f = subquery_matrix(q, sizes, keep)  # the projected Gram is f^T f (project_gram of q^T q)
                if not sum(keep):
                    key, scale = None, float(np.sum(f * f))
                elif f.shape[0] < f.shape[1]:
                    key, scale = store.intern_factor(f, zero_tol=tol)
                else:
                    key, scale = store.intern(f.T @ f, zero_tol=tol)
                parts.append((keep, key, scale))
            dense_cache[ck] = parts
        for keep, key, scale in dense_cache[ck]:
            sub = tuple(a for a, kp in zip(v.attrs, keep) if kp)
            if not sub:
                acc.setdefault(sub, _Accumulator()).add(v.weight * scale, (), False)
            elif key is not None:
                acc.setdefault(sub, _Accumulator()).add(v.weight * scale, (key,), len(sub) > 1)

    grams = {}
    for sub in sorted(acc, key=lambda a: (len(a), a)):
        terms = tuple(GramTerm(c, f, d) for (d, f), c in sorted(acc[sub].terms.items()) if c > 0)
        if terms:
            grams[sub] = SubworkloadGram(sub, tuple(sizes_all[i] for i in sub), terms)
    return Decomposition(workload, store, grams, time.perf_counter() - t0)
