"""Query families: explicit query matrices, their Grams and their query counts.

Product families (marginal, prefix, range, circular; hybrid resolves to marginal or prefix per
attribute kind) are defined per attribute; a query on a view is the Kronecker product of one row per
attribute. Their Grams have closed forms, so a Gram never needs the (possibly huge) query list:

>>> import numpy as np
>>> bool(np.allclose(gram_1d("range", 5), query_matrix_1d("range", 5).T @ query_matrix_1d("range", 5)))
True
>>> count_1d("circular", 10)
100

Non-product families live on two attributes (``affine``: A_i + A_j <= c, ``abs``: |A_i - A_j| <= c);
``random`` draws 0/1 queries per view from a recorded seed; ``custom`` queries come from a file.
Cells of a view are ordered row-major over its attributes in schema order.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from .errors import InputError
from .schema import MAX_ATTRIBUTE_SIZE

__all__ = [
    "PRODUCT_FAMILIES",
    "PAIR_FAMILIES",
    "FAMILIES",
    "count_1d",
    "query_matrix_1d",
    "gram_1d",
    "pair_query_matrix",
    "pair_count",
    "random_query_matrix",
    "RANDOM_DENSITY",
    "RANDOM_ROWS_PER_CELL",
]

PRODUCT_FAMILIES: tuple[str, ...] = ("marginal", "prefix", "range", "circular", "hybrid")
PAIR_FAMILIES: tuple[str, ...] = ("affine", "abs")
FAMILIES: tuple[str, ...] = PRODUCT_FAMILIES + PAIR_FAMILIES + ("random", "custom")
BASIC_1D: tuple[str, ...] = ("marginal", "prefix", "range", "circular")

RANDOM_DENSITY = 0.3
RANDOM_ROWS_PER_CELL = 3


def _check_1d(family: str, n: int) -> None:
    if family not in BASIC_1D:
        raise InputError("family", family, f"is not a per-attribute family ({', '.join(BASIC_1D)})")
    if n < 1:
        raise InputError("domain size", n, "must be >= 1")


def count_1d(family: str, n: int) -> int:
    """Number of queries of a 1-D family on an attribute of size ``n``."""
    _check_1d(family, n)
    return {"marginal": n, "prefix": n, "range": n * (n + 1) // 2, "circular": n * n}[family]


def query_matrix_1d(family: str, n: int) -> np.ndarray:
    """The explicit query matrix (queries x n) of a 1-D family.

    prefix: row c is ``A <= c`` (c = 0..n-1); range: rows ``A in [a, b]`` for a <= b in lexicographic
    order; circular: row (l, s) covers cells s, s+1, .. s+l-1 mod n for l = 1..n, s = 0..n-1.
    """
    _check_1d(family, n)
    if family == "marginal":
        return np.eye(n)
    if family == "prefix":
        return np.tril(np.ones((n, n)))
    if family == "range":
        a, b = np.triu_indices(n)
        cells = np.arange(n)
        return ((cells[None, :] >= a[:, None]) & (cells[None, :] <= b[:, None])).astype(float)
    rows = []
    cells = np.arange(n)
    for length in range(1, n + 1):
        starts = np.arange(n)
        rows.append((((cells[None, :] - starts[:, None]) % n) < length).astype(float))
    return np.vstack(rows)


@lru_cache(maxsize=256)
def _gram_1d_cached(family: str, n: int) -> np.ndarray:
    if n > MAX_ATTRIBUTE_SIZE:  # refuse before allocating n x n
        raise InputError(
            "attribute size",
            n,
            f"is above {MAX_ATTRIBUTE_SIZE:,}: the {family} Gram would be {n:,} x {n:,}; coarsen the attribute",
        )
    i = np.arange(n)
    lo, hi = np.minimum.outer(i, i), np.maximum.outer(i, i)
    if family == "marginal":
        g = np.eye(n)
    elif family == "prefix":
        g = (n - hi).astype(float)  # prefixes c >= max(a, b)
    elif family == "range":
        g = ((lo + 1) * (n - hi)).astype(float)  # intervals [a, b] with a <= lo and b >= hi
    else:
        # Arcs of length l < n containing cells 0 and k (distance k forward, n - k backward):
        # max(0, l - k) + max(0, l - (n - k)); the n arcs of length n contain both.
        k = np.arange(n)
        first = np.zeros(n)
        for length in range(1, n):
            first += np.maximum(0, length - k) + np.where(k > 0, np.maximum(0, length - (n - k)), 0)
        first += n
        g = first[(i[None, :] - i[:, None]) % n].astype(float)
    g.setflags(write=False)
    return g


def gram_1d(family: str, n: int) -> np.ndarray:
    """Q^T Q of a 1-D family, from its closed form (read-only array)."""
    _check_1d(family, n)
    return _gram_1d_cached(family, n)


def pair_count(family: str, n1: int, n2: int) -> int:
    """Number of queries of a two-way non-product family on attributes of sizes n1, n2."""
    if family == "affine":
        return n1 + n2 - 1
    if family == "abs":
        return max(n1, n2)
    raise InputError("family", family, f"is not a two-way family ({', '.join(PAIR_FAMILIES)})")


def pair_query_matrix(family: str, n1: int, n2: int) -> np.ndarray:
    """Query matrix (queries x n1*n2, row-major cells (a1, a2)) of ``affine`` or ``abs``.

    affine: A1 + A2 <= c for c = 0..n1+n2-2; abs: |A1 - A2| <= c for c = 0..max(n1, n2)-1.
    """
    a1, a2 = np.meshgrid(np.arange(n1), np.arange(n2), indexing="ij")
    if family == "affine":
        stat, top = (a1 + a2).ravel(), n1 + n2 - 1
    elif family == "abs":
        stat, top = np.abs(a1 - a2).ravel(), max(n1, n2)
    else:
        raise InputError("family", family, f"is not a two-way family ({', '.join(PAIR_FAMILIES)})")
    return (stat[None, :] <= np.arange(top)[:, None]).astype(float)


def random_query_matrix(sizes: tuple[int, ...], seed: int, attrs: tuple[int, ...]) -> np.ndarray:
    """The ``random`` family on one view: 3 x cells queries, each cell 1 with probability 0.3.

    The generator is seeded with (seed, *attrs), so every view draws its own queries and a rerun with
    the recorded seed draws the same ones.
    """
    cells = math.prod(sizes)
    rng = np.random.default_rng([int(seed), *map(int, attrs)])
    return (rng.random((RANDOM_ROWS_PER_CELL * cells, cells)) < RANDOM_DENSITY).astype(float)
