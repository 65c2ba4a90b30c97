"""The workload and mechanisms over the full domain (small domains only): W^T W, marginals, variances.

Residual methods never form the full domain; the exact matrix mechanism (``mm``) and the explicit SVD
bound do, for domains of at most a few thousand cells. Cells are row-major over all attributes in
schema order, as everywhere else, so the marginal of a full-domain vector on ``attrs`` is a sum over
the other axes.

>>> from querysmasher.schema import parse_schema
>>> from querysmasher.workload import parse_workload
>>> g = full_domain_gram(parse_workload("prefix:1", parse_schema("synthetic:n=3,d=1")))
>>> g.tolist()  # P^T P for the prefixes A <= 0, A <= 1, A <= 2
[[3.0, 2.0, 1.0], [2.0, 2.0, 1.0], [1.0, 1.0, 1.0]]
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from functools import lru_cache

import numpy as np

from .decompose import view_query_matrix
from .errors import InputError
from .families import gram_1d, query_matrix_1d
from .linalg import kron_dense, pinv_psd
from .workload import Workload, WorkloadView

__all__ = [
    "DEFAULT_MAX_FULL_CELLS",
    "check_fits",
    "cell_index",
    "full_domain_gram",
    "marginalise",
    "view_gram",
    "query_row_chunks",
    "full_domain_variances",
    "is_full_domain_plan",
    "marginal_estimable",
    "plan_query_variances",
    "plan_view_variances",
]

DEFAULT_MAX_FULL_CELLS = 2500  # the dense solver's limit (qs ``max_dense_cells``)
_CHUNK_ENTRIES = 1 << 22  # explicit query rows x cells built at a time


def check_fits(workload: Workload, max_cells: int, what: str) -> int:
    """The number of full-domain cells; InputError (one line) when it exceeds ``max_cells``."""
    n = workload.schema.domain_cells()
    if n > max_cells:
        raise InputError(
            "method",
            what,
            f"needs the full domain of {workload.schema.name!r} ({n} cells) to fit the dense solver "
            f"(at most {max_cells} cells)",
        )
    return n


def cell_index(sizes: tuple[int, ...], attrs: tuple[int, ...]) -> np.ndarray:
    """For every full-domain cell, the index of its cell in the marginal on ``attrs``."""
    grids = np.indices(sizes).reshape(len(sizes), -1) if sizes else np.zeros((0, 1), dtype=int)
    idx = np.zeros(grids.shape[1], dtype=np.int64)
    for a in attrs:
        idx = idx * sizes[a] + grids[a]
    return idx


def view_gram(workload: Workload, v: WorkloadView) -> np.ndarray:
    """Q^T Q of one workload view over its own cells (unweighted)."""
    if v.factors:
        return kron_dense([gram_1d(f, workload.schema.sizes[a]) for f, a in zip(v.factors, v.attrs)])
    q = view_query_matrix(workload, v)
    return q.T @ q


def full_domain_gram(workload: Workload) -> np.ndarray:
    """W^T W = sum_v w_v M_v^T (Q_v^T Q_v) M_v over the full domain (M_v: marginal on the view).

    (M^T G M)[x, y] = G[idx(x), idx(y)], so each view costs one gather of N^2 entries.
    """
    sizes = workload.schema.sizes
    n = workload.schema.domain_cells()
    out = np.zeros((n, n))
    for v in workload.views:
        idx = cell_index(sizes, v.attrs)
        out += v.weight * view_gram(workload, v)[np.ix_(idx, idx)]
    return out


def marginalise(x: np.ndarray, sizes: tuple[int, ...], attrs: tuple[int, ...]) -> np.ndarray:
    """The marginal on ``attrs`` of full-domain vectors (cells, or cells x batch)."""
    batch = x.shape[1:]
    t = x.reshape(tuple(sizes) + batch)
    drop = tuple(i for i in range(len(sizes)) if i not in attrs)
    return t.sum(axis=drop).reshape((-1,) + batch) if drop else t.reshape((-1,) + batch)


def query_row_chunks(workload: Workload, v: WorkloadView, max_entries: int = _CHUNK_ENTRIES) -> Iterator[np.ndarray]:
    """The explicit queries of a workload view (over its cells), a block of rows at a time.

    Product views are split along the first attribute's queries, so no block holds more than about
    ``max_entries`` numbers (plus one first-attribute row).
    """
    if not v.factors:
        yield view_query_matrix(workload, v)
        return
    sizes = [workload.schema.sizes[a] for a in v.attrs]
    mats = [query_matrix_1d(f, n) for f, n in zip(v.factors, sizes)]
    rest = kron_dense(mats[1:])
    per_row = rest.shape[0] * math.prod(sizes)
    step = max(1, max_entries // max(per_row, 1))
    for lo in range(0, mats[0].shape[0], step):
        yield np.kron(mats[0][lo : lo + step], rest)


def full_domain_variances(
    sizes: tuple[int, ...], x_pinv: np.ndarray, sigma2: float, attrs: tuple[int, ...], queries: np.ndarray
) -> np.ndarray:
    """Variances of queries over the cells of ``attrs`` answered from y = X^½ x + N(0, sigma2 I)
    by generalised least squares: sigma2 q M X^+ M^T q^T (``x_pinv`` = X^+ over the full domain)."""
    k = marginalise(np.ascontiguousarray(marginalise(x_pinv, sizes, attrs).T), sizes, attrs)  # M X^+ M^T
    q = np.atleast_2d(np.asarray(queries, dtype=float))
    return sigma2 * np.einsum("ij,jk,ik->i", q, k, q)


# ----------------------------------------------------------------------------- full-domain plans (mm)


def is_full_domain_plan(plan) -> bool:
    """True for plans whose one mechanism covers the whole domain (``mm``, whole-workload plugins),
    whose views are not residual views: reconstruction marginalises the full-domain estimate."""
    return plan.layout == "full-domain"


@lru_cache(maxsize=8)
def _pinv(mech) -> np.ndarray:
    """X^+ of a (dense, full-domain) mechanism, once per mechanism object."""
    return pinv_psd(mech.dense_x())


def marginal_estimable(plan, attrs: tuple[int, ...], rtol: float = 1e-8) -> tuple[bool, str]:
    """(estimable, reason) for the marginal table on ``attrs`` under a full-domain plan: every row
    of the marginalisation map M lies in the range of the mechanism X (M X X^+ = M), so the table
    reconstructed from the full-domain estimate is unbiased (not only when X has full rank: a plan
    for 1-way marginals may leave 2-way directions out)."""
    if not np.isfinite(plan.allocation.sigma2[0]):
        return False, "the full-domain view is not measured"
    mech = plan.solutions[plan.keys[0]].mechanism
    x = mech.dense_x()
    projector = x @ _pinv(mech)
    m = marginalise(np.eye(x.shape[0]), plan.schema.sizes, attrs)
    off = np.linalg.norm(marginalise(projector.T, plan.schema.sizes, attrs) - m)
    if off > rtol * max(np.linalg.norm(m), 1.0):
        return False, "the full-domain mechanism does not reach every cell of this marginal: the table is a projection"
    return True, ""


def plan_query_variances(plan, attrs: tuple[int, ...], queries: np.ndarray) -> np.ndarray:
    """Variances of explicit queries over the cells of ``attrs`` under a full-domain plan."""
    q = np.atleast_2d(np.asarray(queries, dtype=float))
    measured = np.flatnonzero(np.isfinite(plan.allocation.sigma2))
    if measured.size == 0:
        return np.zeros(q.shape[0])
    i = int(measured[0])
    mech = plan.solutions[plan.keys[i]].mechanism
    return full_domain_variances(plan.schema.sizes, _pinv(mech), float(plan.allocation.sigma2[i]), attrs, q)


def plan_view_variances(plan, v: WorkloadView) -> np.ndarray:
    """Variances of every query of a workload view under a full-domain plan (explicit rows, in blocks)."""
    return np.concatenate([plan_query_variances(plan, v.attrs, q) for q in query_row_chunks(plan.workload, v)])
