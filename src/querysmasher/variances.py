"""Per-query variances known from the plan alone (no data): sum over measured residual views of
sigma^2 q_{=>A'} X_A'^+ q_{=>A'}^T, for explicit query rows and for whole workload views.

Reconstruction uses them beside its answers; planning uses them for the largest query variance
(:mod:`querysmasher.maxvar`) without depending on how answers are reconstructed. A plan here is
anything with the fields of :class:`querysmasher.plan.Plan` (schema, workload, views, keys,
solutions, allocation, layout): this module sits below the record, which reports its largest
variance through it.
"""

from __future__ import annotations

import itertools
import math
from collections import OrderedDict

import numpy as np

from .decompose import subquery_matrix, view_query_matrix
from .families import query_matrix_1d
from .fulldomain import is_full_domain_plan, plan_query_variances, plan_view_variances
from .workload import WorkloadView

__all__ = ["query_variances", "view_variances", "ViewVarianceMemo"]


def _measured(plan: Plan) -> dict[tuple[int, ...], int]:  # noqa: F821  (the plan record lives a layer above)
    return {a: i for i, a in enumerate(plan.views) if np.isfinite(plan.allocation.sigma2[i])}


def query_variances(plan: Plan, attrs: tuple[int, ...], queries: np.ndarray) -> np.ndarray:  # noqa: F821  (the plan record lives a layer above)
    """Variance of the answer to each explicit query row over the cells of ``attrs`` (no data)."""
    if is_full_domain_plan(plan):
        return plan_query_variances(plan, attrs, queries)
    q = np.atleast_2d(np.asarray(queries, dtype=float))
    sizes = tuple(plan.schema.sizes[a] for a in attrs)
    measured = _measured(plan)
    out = np.zeros(q.shape[0])
    for keep in itertools.product((False, True), repeat=len(attrs)):
        sub = tuple(a for a, k in zip(attrs, keep) if k)
        if sub not in measured:
            continue
        i = measured[sub]
        s = subquery_matrix(q, sizes, keep)
        mech = plan.solutions[plan.keys[i]].mechanism
        out += plan.allocation.sigma2[i] * mech.rows_pinv_quadratic(s)
    return out


def view_variances(plan: Plan, v: WorkloadView) -> np.ndarray:  # noqa: F821  (the plan record lives a layer above)
    """Variances of every query of a workload view. For product families the Kronecker query rows
    are never formed (:meth:`~querysmasher.mechanisms.ViewMechanism.kron_rows_pinv_quadratic`);
    other families use their explicit rows."""
    sizes_all = plan.schema.sizes
    if is_full_domain_plan(plan):
        return plan_view_variances(plan, v)
    if not v.factors:
        return query_variances(plan, v.attrs, view_query_matrix(plan.workload, v))
    qs = [query_matrix_1d(f, sizes_all[a]) for f, a in zip(v.factors, v.attrs)]
    measured = _measured(plan)
    out = np.zeros(math.prod(q.shape[0] for q in qs))
    for keep in itertools.product((False, True), repeat=len(v.attrs)):
        sub = tuple(a for a, k in zip(v.attrs, keep) if k)
        if sub not in measured:
            continue
        i = measured[sub]
        mech = plan.solutions[plan.keys[i]].mechanism
        dropped = np.ones(())
        for q, k in zip(qs, keep):
            if not k:
                dropped = np.multiply.outer(dropped, q.mean(axis=1) ** 2)
        kept_q = [q - q.mean(axis=1, keepdims=True) for q, k in zip(qs, keep) if k]
        part = mech.kron_rows_pinv_quadratic(kept_q)
        # Put the kept and dropped per-attribute factors back in attribute order.
        kept_axes = [p for p, k in enumerate(keep) if k]
        dropped_axes = [p for p, k in enumerate(keep) if not k]
        full = np.multiply.outer(part, dropped)
        full = np.moveaxis(full, list(range(len(keep))), kept_axes + dropped_axes)
        out += plan.allocation.sigma2[i] * full.reshape(-1)
    return out


def _query_identity(plan: Plan, v: WorkloadView):  # noqa: F821  (the plan record lives a layer above)
    """What fixes a view's query rows, given its attribute sizes: the 1-D factors, the pair family,
    or (random, custom) the view itself."""
    sizes = tuple(plan.schema.sizes[a] for a in v.attrs)
    if v.factors:
        return ("product", v.factors, sizes)
    if v.family in ("affine", "abs"):
        return (v.family, sizes)
    return (v.family, v.attrs, v.seed, v.term)


class ViewVarianceMemo:
    """:func:`view_variances` for many views of one plan, computed once per distinct signature:
    the same query rows and, for every subset of the view's attributes, the same measured
    mechanism (solution key) and noise scale. Equal-size views of one family then share one
    computation (an evaluation of 9,880 prefix:3 views on [40]^40 does one, not 9,880). Exact:
    views with equal signatures have equal variances by construction, whatever the allocation.
    At most ``max_bytes`` of results are kept (least recently used dropped first).

    >>> import querysmasher as qs
    >>> plan = qs.make_plan("synthetic:n=8,d=4", "prefix:2", method="rp", beta=1.0)
    >>> memo = ViewVarianceMemo(plan)
    >>> all(np.array_equal(memo(v), view_variances(plan, v)) for v in plan.workload.views)
    True
    >>> memo.misses, memo.hits  # six pairs of equal-size attributes: one computation
    (1, 5)
    """

    def __init__(self, plan: Plan, max_bytes: int = 256 << 20):  # noqa: F821  (the plan record lives a layer above)
        self.plan = plan
        self.max_bytes = int(max_bytes)
        self._measured = _measured(plan)
        self._cache: OrderedDict = OrderedDict()
        self._bytes = 0
        self.hits = self.misses = 0

    def signature(self, v: WorkloadView):
        plan = self.plan
        subs = []
        for keep in itertools.product((False, True), repeat=len(v.attrs)):
            sub = tuple(a for a, k in zip(v.attrs, keep) if k)
            i = self._measured.get(sub)
            if i is not None:
                subs.append((keep, plan.keys[i], float(plan.allocation.sigma2[i])))
        return (_query_identity(plan, v), tuple(subs))

    def __call__(self, v: WorkloadView) -> np.ndarray:
        if is_full_domain_plan(self.plan):  # one mechanism over the whole domain: no shared structure
            return view_variances(self.plan, v)
        sig = self.signature(v)
        hit = self._cache.get(sig)
        if hit is not None:
            self._cache.move_to_end(sig)
            self.hits += 1
            return hit
        self.misses += 1
        var = view_variances(self.plan, v)
        var.setflags(write=False)  # shared between views: callers must not change it in place
        if var.nbytes <= self.max_bytes:
            self._cache[sig] = var
            self._bytes += var.nbytes
            while self._bytes > self.max_bytes:
                _, old = self._cache.popitem(last=False)
                self._bytes -= old.nbytes
        return var
