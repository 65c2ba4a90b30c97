"""Full-domain constructions for brute-force checks on small schemas (tests only).

They live in :mod:`querysmasher.testing` (the solver contract kit uses them too); re-exported here
for the tests that import them by this name.
"""

import numpy as np

from querysmasher.testing import full_privacy_gram, full_workload, marginal_map, pinv, view_queries

__all__ = ["full_privacy_gram", "full_workload", "marginal_map", "pinv", "view_queries", "applied_full_privacy_gram", "cost"]


def applied_full_privacy_gram(plan) -> np.ndarray:
    """The privacy Gram of what ``measure`` really releases, over the full domain: for every measured
    view, the operator ``sqrt_apply`` (built by applying it to unit vectors) composed with the
    marginal map and scaled by 1/sigma; G = sum R^T R."""

    sizes = plan.schema.sizes
    total = np.zeros((int(np.prod(sizes)),) * 2)
    for attrs, key, s2 in zip(plan.views, plan.keys, plan.allocation.sigma2):
        if not np.isfinite(s2):
            continue
        mech = plan.solutions[key].mechanism
        op = mech.sqrt_apply(np.eye(mech.cells)) @ marginal_map(sizes, attrs) / np.sqrt(s2)
        total += op.T @ op
    return total


def cost(gram: np.ndarray, neighbours: str) -> float:
    """Privacy cost of a full-domain privacy Gram: max diagonal (add-remove) or max over cell pairs
    of (e_i - e_j)^T G (e_i - e_j) (replace)."""
    d = np.diag(gram)
    if neighbours == "add-remove":
        return float(d.max())
    return float((d[:, None] + d[None, :] - 2 * gram).max())
