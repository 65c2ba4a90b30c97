"""Full-domain constructions for brute-force checks on small schemas (tests only).

Everything here is written from the definitions with plain numpy, without the library's query
families, Kronecker helpers, decomposition or pseudo-inverse, so that a test comparing the library
with these is not comparing the library with itself:

* the 1-D query matrices are the hand-written ones of :data:`HAND_WRITTEN` for n <= 4 (the sizes of
  the small test schemas), otherwise built cell by cell from the paper's definitions (§8.1);
  ``tests/test_families.py`` checks the library's families, and the definitions below, against the
  hand-written matrices;
* the two-way families (``affine``: A1 + A2 <= c, ``abs``: |A1 - A2| <= c) are built cell by cell;
* a view's queries are the Kronecker product (numpy's) of one 1-D matrix per attribute, chosen from
  the view's family and the schema's attribute kinds (``hybrid``: marginal on categorical
  attributes, prefix on numeric ones), not from what the workload parser resolved;
* marginals are summed with an explicit cell-to-cell map, subqueries by explicit centring and
  averaging matrices (paper Eq. 3), pseudo-inverses by numpy's eigh / lstsq.

The only library calls are the plan's mechanisms themselves (``dense_x``, and ``sqrt_apply``: the
operator measure applies), which are the objects under test.
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np

__all__ = [
    "HAND_WRITTEN",
    "matrix_1d",
    "definition_1d",
    "pair_matrix",
    "marginal_map",
    "view_queries",
    "full_workload",
    "full_privacy_gram",
    "applied_full_privacy_gram",
    "measured_operator",
    "pinv",
    "cost",
    "explicit_variances",
    "gls_histogram",
    "true_histogram",
    "subqueries",
    "product_answers",
]

# ----------------------------------------------------------------------------- hand-written 1-D matrices

# Queries x cells, in the order the library enumerates them:
#   marginal: A = c, c = 0..n-1;  prefix: A <= c, c = 0..n-1;
#   range: A in [a, b] for a <= b, lexicographic in (a, b);
#   circular: length l = 1..n, then start s = 0..n-1, covering s, s+1, .., s+l-1 (mod n).
HAND_WRITTEN: dict[str, dict[int, list[list[int]]]] = {
    "marginal": {
        1: [[1]],
        2: [[1, 0], [0, 1]],
        3: [[1, 0, 0], [0, 1, 0], [0, 0, 1]],
        4: [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]],
    },
    "prefix": {
        1: [[1]],
        2: [[1, 0], [1, 1]],
        3: [[1, 0, 0], [1, 1, 0], [1, 1, 1]],
        4: [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]],
    },
    "range": {
        1: [[1]],
        2: [
            [1, 0],  # [0, 0]
            [1, 1],  # [0, 1]
            [0, 1],
        ],  # [1, 1]
        3: [
            [1, 0, 0],  # [0, 0]
            [1, 1, 0],  # [0, 1]
            [1, 1, 1],  # [0, 2]
            [0, 1, 0],  # [1, 1]
            [0, 1, 1],  # [1, 2]
            [0, 0, 1],
        ],  # [2, 2]
        4: [
            [1, 0, 0, 0],  # [0, 0]
            [1, 1, 0, 0],  # [0, 1]
            [1, 1, 1, 0],  # [0, 2]
            [1, 1, 1, 1],  # [0, 3]
            [0, 1, 0, 0],  # [1, 1]
            [0, 1, 1, 0],  # [1, 2]
            [0, 1, 1, 1],  # [1, 3]
            [0, 0, 1, 0],  # [2, 2]
            [0, 0, 1, 1],  # [2, 3]
            [0, 0, 0, 1],
        ],  # [3, 3]
    },
    "circular": {
        1: [[1]],
        2: [
            [1, 0],  # length 1
            [0, 1],
            [1, 1],  # length 2 (the whole circle, once per start)
            [1, 1],
        ],
        3: [
            [1, 0, 0],  # length 1
            [0, 1, 0],
            [0, 0, 1],
            [1, 1, 0],  # length 2: starts 0, 1, 2
            [0, 1, 1],
            [1, 0, 1],
            [1, 1, 1],  # length 3
            [1, 1, 1],
            [1, 1, 1],
        ],
        4: [
            [1, 0, 0, 0],  # length 1
            [0, 1, 0, 0],
            [0, 0, 1, 0],
            [0, 0, 0, 1],
            [1, 1, 0, 0],  # length 2: starts 0, 1, 2, 3
            [0, 1, 1, 0],
            [0, 0, 1, 1],
            [1, 0, 0, 1],
            [1, 1, 1, 0],  # length 3
            [0, 1, 1, 1],
            [1, 0, 1, 1],
            [1, 1, 0, 1],
            [1, 1, 1, 1],  # length 4
            [1, 1, 1, 1],
            [1, 1, 1, 1],
            [1, 1, 1, 1],
        ],
    },
}


@cache
def definition_1d(family: str, n: int) -> np.ndarray:
    """A 1-D family built cell by cell from its definition (any n; read-only)."""
    cells = range(n)
    if family == "marginal":
        rows = [[x == c for x in cells] for c in range(n)]
    elif family == "prefix":
        rows = [[x <= c for x in cells] for c in range(n)]
    elif family == "range":
        rows = [[a <= x <= b for x in cells] for a in range(n) for b in range(a, n)]
    elif family == "circular":
        rows = [[(x - s) % n < length for x in cells] for length in range(1, n + 1) for s in range(n)]
    else:
        raise ValueError(family)
    out = np.array(rows, dtype=float).reshape(-1, n)
    out.setflags(write=False)
    return out


def matrix_1d(family: str, n: int) -> np.ndarray:
    """The hand-written matrix for n <= 4, the definition otherwise."""
    if n in HAND_WRITTEN.get(family, {}):
        return np.array(HAND_WRITTEN[family][n], dtype=float)
    return definition_1d(family, n)


def pair_matrix(family: str, n1: int, n2: int) -> np.ndarray:
    """``affine`` (A1 + A2 <= c, c = 0..n1+n2-2) or ``abs`` (|A1 - A2| <= c, c = 0..max(n1,n2)-1),
    cell by cell over the cells (a1, a2) in row-major order."""
    cells = [(a1, a2) for a1 in range(n1) for a2 in range(n2)]
    if family == "affine":
        rows = [[a1 + a2 <= c for a1, a2 in cells] for c in range(n1 + n2 - 1)]
    elif family == "abs":
        rows = [[abs(a1 - a2) <= c for a1, a2 in cells] for c in range(max(n1, n2))]
    else:
        raise ValueError(family)
    return np.array(rows, dtype=float)


# ----------------------------------------------------------------------------- views and workloads


def marginal_map(sizes, attrs) -> np.ndarray:
    """M with M x = the marginal on ``attrs`` of a full-domain vector x: cell j of the domain (row-major
    over ``sizes``) adds to the cell of the marginal that has the same values on ``attrs``."""
    sizes, attrs = tuple(int(n) for n in sizes), tuple(int(a) for a in attrs)
    total = math.prod(sizes)
    coords = np.indices(sizes).reshape(len(sizes), total)  # the values of every domain cell
    row = np.zeros(total, dtype=np.int64)
    for a in attrs:  # row-major over attrs, in the order given (schema order)
        row = row * sizes[a] + coords[a]
    m = np.zeros((math.prod(sizes[a] for a in attrs), total))
    m[row, np.arange(total)] = 1.0
    return m


def _factor_family(workload, v, i: int) -> str:
    if v.family == "hybrid":
        return "marginal" if workload.schema.kinds[i] == "categorical" else "prefix"
    return v.family


def view_queries(workload, v) -> np.ndarray:
    """Explicit queries of one workload view over the view's cells."""
    sizes = [workload.schema.sizes[i] for i in v.attrs]
    if v.family in ("marginal", "prefix", "range", "circular", "hybrid"):
        q = np.ones((1, 1))
        for i, n in zip(v.attrs, sizes):
            q = np.kron(q, matrix_1d(_factor_family(workload, v, i), n))
        return q
    if v.family in ("affine", "abs"):
        return pair_matrix(v.family, *sizes)
    if v.family == "random":  # the documented recipe: seeded with (seed, *attrs), 3 x cells rows, P(1) = 0.3
        cells = math.prod(sizes)
        rng = np.random.default_rng([int(v.seed), *map(int, v.attrs)])
        return (rng.random((3 * cells, cells)) < 0.3).astype(float)
    if v.family == "custom":  # the queries of the file, as given
        return np.asarray(workload.custom[workload.terms[v.term].path].queries, dtype=float)
    raise ValueError(v.family)


def product_answers(workload, v, table: np.ndarray) -> np.ndarray:
    """Answers of a product view's queries on a marginal table (shape: the view's sizes), one 1-D
    matrix applied along each axis (mode products): the rows of :func:`view_queries` times the
    flattened table, without forming the Kronecker product (large views)."""
    t = np.asarray(table, dtype=float)
    for axis, i in enumerate(v.attrs):
        q = matrix_1d(_factor_family(workload, v, i), workload.schema.sizes[i])
        t = np.moveaxis(np.tensordot(q, t, axes=([1], [axis])), 0, axis)
    return t.ravel()


def full_workload(workload) -> tuple[np.ndarray, np.ndarray]:
    """(W, weights): every query as a row over the full domain, with its weight."""
    sizes = workload.schema.sizes
    rows, weights = [], []
    for v in workload.views:
        q = view_queries(workload, v) @ marginal_map(sizes, v.attrs)
        rows.append(q)
        weights.append(np.full(q.shape[0], v.weight))
    return np.vstack(rows), np.concatenate(weights)


def subqueries(q: np.ndarray, sizes, keep) -> np.ndarray:
    """q_{=>A'} (paper Eq. 3) of every row of q over the view's cells: centred along the kept
    attributes (I - J/n), averaged over the dropped ones (1/n each), by one explicit matrix."""
    factors = [np.eye(n) - np.ones((n, n)) / n if k else np.ones((n, 1)) / n for n, k in zip(sizes, keep)]
    p = np.ones((1, 1))
    for f in factors:
        p = np.kron(p, f)
    return np.asarray(q, dtype=float) @ p


# ----------------------------------------------------------------------------- mechanisms


def pinv(x: np.ndarray, rtol: float = 1e-9) -> np.ndarray:
    """Pseudo-inverse of a symmetric PSD matrix (numpy's eigh, eigenvalues below rtol * max dropped)."""
    w, v = np.linalg.eigh((x + x.T) / 2)
    keep = w > rtol * max(float(w.max(initial=0.0)), 1e-300)
    return (v[:, keep] / w[keep]) @ v[:, keep].T


def full_privacy_gram(plan) -> np.ndarray:
    """Sum over measured residual views of M^T X_view M / sigma^2 over the full domain: the privacy
    Gram of the released mechanism (X as the plan stores it)."""
    sizes = plan.schema.sizes
    total = np.zeros((math.prod(sizes),) * 2)
    for attrs, key, s2 in zip(plan.views, plan.keys, plan.allocation.sigma2):
        if not np.isfinite(s2):
            continue
        m = marginal_map(sizes, attrs)
        total += m.T @ plan.solutions[key].mechanism.dense_x() @ m / s2
    return total


def measured_operator(plan, i: int) -> np.ndarray:
    """The operator measure applies for plan view i, over the full domain and divided by sigma:
    ``sqrt_apply`` applied to every unit vector, composed with the marginal map."""

    mech = plan.solutions[plan.keys[i]].mechanism
    b = mech.sqrt_apply(np.eye(mech.cells))
    return b @ marginal_map(plan.schema.sizes, plan.views[i]) / np.sqrt(plan.allocation.sigma2[i])


def applied_full_privacy_gram(plan) -> np.ndarray:
    """The privacy Gram of what ``measure`` really releases, over the full domain: G = sum R^T R over
    the measured views' operators (:func:`measured_operator`)."""
    total = np.zeros((math.prod(plan.schema.sizes),) * 2)
    for i, s2 in enumerate(plan.allocation.sigma2):
        if np.isfinite(s2):
            op = measured_operator(plan, i)
            total += op.T @ op
    return total


def cost(gram: np.ndarray, neighbours: str) -> float:
    """Privacy cost of a full-domain privacy Gram: max diagonal (add-remove) or max over cell pairs
    of (e_i - e_j)^T G (e_i - e_j) (replace)."""
    d = np.diag(gram)
    if neighbours == "add-remove":
        return float(d.max())
    return float((d[:, None] + d[None, :] - 2 * gram).max())


def explicit_variances(plan, v, xp: np.ndarray | None = None) -> np.ndarray:
    """Variance of every query of workload view v under the explicit least-squares estimator:
    diag(Q M G^+ M^T Q^T) with G the full-domain privacy Gram (pass its pseudo-inverse as xp to reuse)."""
    xp = pinv(full_privacy_gram(plan)) if xp is None else xp
    q = view_queries(plan.workload, v) @ marginal_map(plan.schema.sizes, v.attrs)
    return np.einsum("ij,jk,ik->i", q, xp, q)


def gls_histogram(plan, meas) -> np.ndarray:
    """The least-squares estimate of the full-domain histogram from a release: the minimum-norm
    solution of R x = y / sigma over every measured view's operator R (numpy's lstsq)."""
    ops, ys = [], []
    for i, y in zip(meas.index, meas.y):
        ops.append(measured_operator(plan, int(i)))
        ys.append(np.asarray(y, dtype=float) / np.sqrt(plan.allocation.sigma2[int(i)]))
    return np.linalg.lstsq(np.vstack(ops), np.concatenate(ys), rcond=1e-10)[0]


def true_histogram(codes: np.ndarray, sizes) -> np.ndarray:
    """The full-domain histogram of records (one row of codes per record), counted with np.add.at."""
    x = np.zeros(tuple(sizes))
    np.add.at(x, tuple(np.asarray(codes).T), 1.0)
    return x.ravel()
