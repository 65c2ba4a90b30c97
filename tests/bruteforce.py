"""Full-domain constructions for brute-force checks on small schemas (tests only).

Everything the library keeps implicit is built explicitly here: every workload query as a row over
the full domain, and the released mechanism as one privacy Gram over the full domain.
"""

from __future__ import annotations

import numpy as np

from querysmasher.decompose import view_query_matrix
from querysmasher.families import query_matrix_1d
from querysmasher.linalg import kron_dense
from querysmasher.workload import Workload, WorkloadView


def marginal_map(sizes: tuple[int, ...], attrs: tuple[int, ...]) -> np.ndarray:
    """M with M x = the marginal on ``attrs`` of a full-domain vector x."""
    return kron_dense([np.eye(n) if i in attrs else np.ones((1, n)) for i, n in enumerate(sizes)])


def view_queries(workload: Workload, v: WorkloadView) -> np.ndarray:
    """Explicit queries of one workload view over the view's cells."""
    if v.factors:
        sizes = [workload.schema.sizes[i] for i in v.attrs]
        return kron_dense([query_matrix_1d(f, n) for f, n in zip(v.factors, sizes)])
    return view_query_matrix(workload, v)


def full_workload(workload: Workload) -> tuple[np.ndarray, np.ndarray]:
    """(W, weights): every query as a row over the full domain, with its weight."""
    sizes = workload.schema.sizes
    rows, weights = [], []
    for v in workload.views:
        q = view_queries(workload, v) @ marginal_map(sizes, v.attrs)
        rows.append(q)
        weights.append(np.full(q.shape[0], v.weight))
    return np.vstack(rows), np.concatenate(weights)


def full_privacy_gram(plan) -> np.ndarray:
    """Sum over measured residual views of M^T X_view M / sigma^2 over the full domain."""
    sizes = plan.schema.sizes
    total = np.zeros((int(np.prod(sizes)),) * 2)
    for attrs, key, s2 in zip(plan.views, plan.keys, plan.allocation.sigma2):
        if not np.isfinite(s2):
            continue
        m = marginal_map(sizes, attrs)
        total += m.T @ plan.solutions[key].mechanism.dense_x() @ m / s2
    return total


def applied_full_privacy_gram(plan) -> np.ndarray:
    """The privacy Gram of what ``measure`` really releases, over the full domain: for every measured
    view, the operator ``sqrt_apply`` (built by applying it to unit vectors) composed with the
    marginal map and scaled by 1/sigma; G = sum R^T R."""
    from querysmasher.measure import sqrt_apply

    sizes = plan.schema.sizes
    total = np.zeros((int(np.prod(sizes)),) * 2)
    for attrs, key, s2 in zip(plan.views, plan.keys, plan.allocation.sigma2):
        if not np.isfinite(s2):
            continue
        mech = plan.solutions[key].mechanism
        op = sqrt_apply(mech, np.eye(mech.cells)) @ marginal_map(sizes, attrs) / np.sqrt(s2)
        total += op.T @ op
    return total


def cost(gram: np.ndarray, neighbours: str) -> float:
    """Privacy cost of a full-domain privacy Gram: max diagonal (add-remove) or max over cell pairs
    of (e_i - e_j)^T G (e_i - e_j) (replace)."""
    d = np.diag(gram)
    if neighbours == "add-remove":
        return float(d.max())
    return float((d[:, None] + d[None, :] - 2 * gram).max())


def pinv(x: np.ndarray) -> np.ndarray:
    w, v = np.linalg.eigh((x + x.T) / 2)
    keep = w > 1e-9 * w.max()
    return (v[:, keep] / w[keep]) @ v[:, keep].T
