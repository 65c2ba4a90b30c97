r"""The SVD lower bound on the error of every Gaussian matrix mechanism for a workload.

With this project's privacy cost (beta = max diag X, X = B^T Sigma^-1 B the privacy Gram), any
mechanism answering W by generalised least squares has total weighted variance tr(G X^+), G = W^T W.
Taking the dual of ``min tr(G X^+) s.t. diag X <= beta`` at the uniform multiplier p = 1/N
(:func:`querysmasher.solvers.sdp.dual_bound`) gives

    tr(G X^+) >= (tr G^½)^2 / (N beta) = (sum_i sqrt(lambda_i(G)))^2 / (N beta),

Li and Miklau's SVD bound for L2 sensitivity (||A||_{1->2}^2 = max diag A^T A = beta). It covers
every mechanism, also those that do not respect residual spaces, so it is not assembled from the
residual views' Grams: W^T W has cross terms between residual spaces.

* :func:`explicit_svd_bound` — eigenvalues of the explicit W^T W (domains up to the dense limit);
* :func:`marginal_svd_bound` — closed form for workloads of marginals at any size. W^T W =
  sum_V w_V (⊗_{i in V} I ⊗ ⊗_{i not in V} J) is diagonal in the residual basis: on the residual
  space of S (centred along S, constant elsewhere; dimension prod_{i in S} (n_i - 1)) its
  eigenvalue is lambda_S = sum_{V ⊇ S} w_V prod_{i not in V} n_i.

Both return the bound at beta = 1 (divide by beta).

>>> from querysmasher.schema import parse_schema
>>> from querysmasher.workload import parse_workload
>>> w = parse_workload("prefix:1", parse_schema("synthetic:n=10,d=1"))
>>> round(math.sqrt(explicit_svd_bound(w) / 10), 4)  # RMSE at beta = 1 (issue 13's table)
1.4979
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from .fulldomain import DEFAULT_MAX_FULL_CELLS, full_domain_gram
from .workload import Workload

__all__ = ["explicit_svd_bound", "marginal_svd_bound", "is_marginal_workload", "svd_bound"]


def _trace_root(g: np.ndarray) -> float:
    e = np.linalg.eigvalsh((g + g.T) / 2)
    # eigenvalues at rounding level are zero (their square roots would add ~1e-8 each)
    e = e[e > max(g.shape[0], 32) * np.finfo(float).eps * max(float(e.max(initial=0.0)), 0.0)]
    return float(np.sqrt(e).sum())


def explicit_svd_bound(workload: Workload) -> float:
    """(tr (W^T W)^½)^2 / N from the explicit full-domain Gram (small domains only)."""
    g = full_domain_gram(workload)
    return _trace_root(g) ** 2 / g.shape[0]


def is_marginal_workload(workload: Workload) -> bool:
    """Every workload view is a marginal (product views with only marginal factors, or the total)."""
    return all(v.factors and all(f == "marginal" for f in v.factors) for v in workload.views)


def marginal_svd_bound(workload: Workload) -> float:
    """Closed-form (sum_S m_S sqrt(lambda_S))^2 / N for a marginal workload, at any domain size.

    >>> from querysmasher.schema import parse_schema
    >>> from querysmasher.workload import parse_workload
    >>> w = parse_workload("marginal:1", parse_schema("synthetic:n=4,d=2"))
    >>> round(marginal_svd_bound(w), 9) == round(explicit_svd_bound(w), 9)
    True
    """
    if not is_marginal_workload(workload):
        raise ValueError("the closed-form SVD bound needs a workload of marginals only")
    sizes = workload.schema.sizes
    views: dict[tuple[int, ...], float] = {}
    for v in workload.views:
        views[v.attrs] = views.get(v.attrs, 0.0) + v.weight
    # lambda_S / N needs only prod_{i in V} n_i: the domain itself may have 10^40 cells
    log_n = np.log(np.asarray(sizes, dtype=float))
    subsets = {s for a in views for r in range(len(a) + 1) for s in itertools.combinations(a, r)}
    root_sum = 0.0  # sum_S m_S sqrt(lambda_S / N), with lambda_S / N = sum_{V ⊇ S} w_V / prod_{i in V} n_i
    for s in subsets:
        lam_over_n = sum(w * math.exp(-float(log_n[list(a)].sum())) for a, w in views.items() if set(s) <= set(a))
        mult = math.prod(sizes[i] - 1 for i in s)
        root_sum += mult * math.sqrt(lam_over_n)
    # (sum m sqrt(lambda))^2 / N = (sum m sqrt(lambda / N))^2
    return root_sum * root_sum


def svd_bound(workload: Workload, max_cells: int = DEFAULT_MAX_FULL_CELLS) -> float | None:
    """The SVD bound at beta = 1 where it is exactly computable: explicitly when the domain has at
    most ``max_cells`` cells, in closed form for marginal workloads; None otherwise."""
    if workload.schema.domain_cells() <= max_cells:
        return explicit_svd_bound(workload)
    if is_marginal_workload(workload):
        return marginal_svd_bound(workload)
    return None
