r"""The max-variance objective: query classes by symmetry, the nu-weighted decomposition, and the
largest (weighted) variance of any workload query under a plan.

Objective
---------
With per-view privacy Grams Y_v = X_v / sigma_v^2 (X_v at cost c_v = max diag X_v, sum_v c_v /
sigma_v^2 <= beta) the variance of query q is Var_q = sum_v q_v Y_v^+ q_v^T (q_v: its residual
subquery), convex in (Y_v). The objective is max_q w_q Var_q (w_q: the query's workload weight).

Minimax duality
---------------
For query weights nu on the simplex, phi(nu) = min_Y sum_q nu_q w_q Var_q(Y) is the ordinary
weighted-sum optimum of the workload reweighted by nu, so

    max_q w_q Var_q(Y)  >=  phi(nu)   for every mechanism Y and every nu,

and by Sion's theorem max_nu phi(nu) is the max-variance optimum. Every method's sum solver
therefore gives a lower bound (qs: its certified per-view bounds; wff: its closed form is exact
within the Fourier family; rp: exact within RP's fixed bases), and the gap closes as nu -> nu*.

Symmetry
--------
Permuting attributes of equal size and kind (and not used by a random or custom view) maps the
workload to itself, so an optimal nu is constant on the orbits: views of one term with the same
(size, kind) per attribute share one weight per query index. Marginal queries of one view are also
exchangeable (permuting values of each attribute), so a marginal view has a single weight and stays
Kronecker; other views get one weight per query, applied to an explicit Gram Q^T diag(nu) Q.

The planner that drives this objective is :mod:`querysmasher.planners.maxplan`.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass

import numpy as np

from .allocation import Allocation
from .decompose import Decomposition, GramTerm, SubworkloadGram, decompose, view_query_matrix
from .families import query_matrix_1d
from .fulldomain import is_full_domain_plan
from .linalg import kron_dense, project_gram
from .threads import budget, parallel_map
from .variances import view_variances
from .workload import Workload, WorkloadView

__all__ = [
    "QueryClass",
    "query_classes",
    "weighted_decomposition",
    "max_variance_of",
    "view_orbits",
    "class_variances",
    "class_contributions",
    "OBJECTIVES",
    "NU_FLOOR",
]

OBJECTIVES = ("sum", "max")
DEFAULT_MAX_TARGET_GAP = 1e-3
DEFAULT_MAX_ITERATIONS = 60
NU_FLOOR = 1e-9  # relative floor on query weights: every query keeps a share of range(G)


@dataclass(frozen=True)
class QueryClass:
    """Workload views whose queries have equal variances under any symmetric mechanism."""

    views: tuple[int, ...]  # indices into workload.views
    queries: int  # weights per view: 1 (exchangeable marginal cells) or the view's query count
    weight: float  # the workload weight w of these queries

    @property
    def collapsed(self) -> bool:
        return self.queries == 1


def _is_marginal(v: WorkloadView) -> bool:
    return bool(v.factors) and all(f == "marginal" for f in v.factors)


def attribute_types(workload: Workload) -> list[tuple]:
    """Attributes of equal type can be permuted without changing the workload: same size and kind,
    and not used by a random or custom view (those are pinned, each its own type)."""
    schema = workload.schema
    pinned = {a for v in workload.views if v.family in ("random", "custom") for a in v.attrs}
    return [(schema.sizes[a], schema.kinds[a], a if a in pinned else None) for a in range(len(schema))]


def view_orbits(workload: Workload, views: list[tuple[int, ...]]) -> list[int]:
    """An orbit label per residual view (views of equal attribute types get equal mechanisms and,
    at an optimum, equal noise)."""
    types = attribute_types(workload)
    labels: dict[tuple, int] = {}
    return [labels.setdefault(tuple(types[a] for a in sub), len(labels)) for sub in views]


def query_classes(workload: Workload) -> list[QueryClass]:
    """Orbits of workload views under the attribute permutations that fix the workload."""
    types_of = attribute_types(workload)
    groups: dict[tuple, list[int]] = {}
    for j, v in enumerate(workload.views):
        types = tuple(types_of[a] for a in v.attrs)
        groups.setdefault((v.term, v.family, v.factors, v.weight, types), []).append(j)
    out = []
    for js in groups.values():
        v = workload.views[js[0]]
        out.append(QueryClass(tuple(js), 1 if _is_marginal(v) else workload.view_count(v), v.weight))
    return out


def _view_queries(workload: Workload, v: WorkloadView) -> np.ndarray:
    if v.factors:
        return kron_dense([query_matrix_1d(f, workload.schema.sizes[a]) for f, a in zip(v.factors, v.attrs)])
    return view_query_matrix(workload, v)


def weighted_decomposition(workload: Workload, classes: list[QueryClass], nu: list[np.ndarray]) -> Decomposition:
    """The residual decomposition of the workload with query weights w_q nu_q (nu per class, spread
    evenly over the class's views): Kronecker for collapsed classes, explicit Grams otherwise."""
    scalar_views, explicit = [], []
    for c, n in zip(classes, nu):
        share = np.asarray(n, dtype=float) / len(c.views)
        for j in c.views:
            v = workload.views[j]
            if c.collapsed:  # nu_c spread over every (exchangeable) query of the class
                per_query = float(share[0]) / workload.view_count(v)
                scalar_views.append(dataclasses.replace(v, weight=v.weight * per_query))
            else:
                explicit.append((c, j, share))
    d = decompose(Workload(workload.schema, workload.terms, tuple(scalar_views), workload.custom))
    terms: dict[tuple[int, ...], list[GramTerm]] = {a: list(g.terms) for a, g in d.grams.items()}
    sizes_all = workload.schema.sizes
    parts_of: dict[int, list] = {}
    for c, j, share in explicit:
        v = workload.views[j]
        sizes = tuple(sizes_all[a] for a in v.attrs)
        if id(c) not in parts_of:  # views of one class have the same queries: project once
            q = _view_queries(workload, v)
            g = q.T @ ((c.weight * share)[:, None] * q)
            tol = 1e-12 * max(1.0, float(np.abs(g).max(initial=0.0)))
            parts = []
            for keep in itertools.product((False, True), repeat=len(sizes)):
                p = project_gram(g, sizes, keep)
                parts.append((keep, *(d.store.intern(p, zero_tol=tol) if any(keep) else (None, float(p[0, 0])))))
            parts_of[id(c)] = parts
        for keep, key, scale in parts_of[id(c)]:
            sub = tuple(a for a, k in zip(v.attrs, keep) if k)
            if not sub and scale > 0:
                terms.setdefault(sub, []).append(GramTerm(scale, (), False))
            elif key is not None:
                terms.setdefault(sub, []).append(GramTerm(scale, (key,), len(sub) > 1))
    grams = {
        a: SubworkloadGram(a, tuple(sizes_all[i] for i in a), tuple(ts))
        for a, ts in sorted(terms.items(), key=lambda kv: (len(kv[0]), kv[0]))
        if ts
    }
    return Decomposition(workload, d.store, grams, d.seconds)


def _marginal_cell_variance(plan, v: WorkloadView) -> float:
    """Var of one cell of a marginal view: sum over measured residual views A' of sigma^2 times
    prod_{dropped} 1/n_i^2 times u X^+ u^T, u = ⊗_{kept} (e_0 - 1/n_i) (one Kronecker row)."""
    sizes = plan.schema.sizes
    measured = {a: i for i, a in enumerate(plan.views) if np.isfinite(plan.allocation.sigma2[i])}
    total = 0.0
    for keep in itertools.product((False, True), repeat=len(v.attrs)):
        sub = tuple(a for a, k in zip(v.attrs, keep) if k)
        if sub not in measured:
            continue
        i = measured[sub]
        mech = plan.solutions[plan.keys[i]].mechanism
        rows = [(np.eye(1, sizes[a]).ravel() - 1.0 / sizes[a])[None, :] for a in sub]
        quad = float(np.ravel(mech.kron_rows_pinv_quadratic(rows))[0])
        dropped = math.prod(1.0 / sizes[a] ** 2 for a, k in zip(v.attrs, keep) if not k)
        total += float(plan.allocation.sigma2[i]) * dropped * quad
    return total


def _representative_variances(plan, c: QueryClass) -> np.ndarray:
    """Var_q of the class's queries on its first view (one marginal cell for a collapsed class:
    all cells of a marginal have the same variance)."""
    v = plan.workload.views[c.views[0]]
    if c.collapsed:
        return np.array([_marginal_cell_variance(plan, v)])
    return view_variances(plan, v)


def class_variances(plan, classes: list[QueryClass]) -> list[np.ndarray]:
    """w_q Var_q for the queries of each class, from one representative view (symmetry)."""
    return [c.weight * _representative_variances(plan, c) for c in classes]


def max_variance_of(plan) -> tuple[float, int, int]:
    """(max_q w_q Var_q, workload view index, query index in that view) over every query of the plan.

    Residual plans treat the views of one query class alike (one solve per distinct subproblem,
    one noise scale per Gram), so one representative per class is evaluated (one cell of a
    marginal view: its cells are exchangeable); a full-domain plan (``mm``) has no such symmetry
    and every view is evaluated. With a thread budget above one (:mod:`querysmasher.threads`) the
    candidates are split over forked workers (Table 4's random:1,2: 820 classes of one dense view
    each, c^3 work per view); the answer does not depend on the split.
    """
    if is_full_domain_plan(plan):
        items = [(j, j, v.weight, None) for j, v in enumerate(plan.workload.views)]
    else:
        items = [(order, c.views[0], c.weight, c) for order, c in enumerate(query_classes(plan.workload))]

    def best_of(part):
        """(value, -order, view, query) of the largest weighted variance among ``part``."""
        top = (-np.inf, 0, -1, -1)
        for order, j, weight, cls in part:
            var = weight * (
                view_variances(plan, plan.workload.views[j]) if cls is None else _representative_variances(plan, cls)
            )
            i = int(np.argmax(var))
            top = max(top, (float(var[i]), -order, j, i))  # ties: the first candidate, as a serial scan
        return top

    shards = [items[k :: budget()] for k in range(min(budget(), len(items)))]
    value, _, j, i = max(parallel_map(best_of, shards), default=(-np.inf, 0, -1, -1))
    return value, j, i


def class_contributions(plan, classes: list[QueryClass], orbits: list[int]) -> np.ndarray:
    """A[q, g] = w_q Var_q when every view of orbit g has sigma^2 = 1 and no other view is measured
    (rows: class queries, from each class's representative view)."""
    orbit_of = dict(zip(plan.views, orbits))
    a = np.zeros((sum(c.queries for c in classes), max(orbits) + 1))
    row = 0
    for c in classes:
        v = plan.workload.views[c.views[0]]
        subs = [sub for r in range(len(v.attrs) + 1) for sub in itertools.combinations(v.attrs, r) if sub in orbit_of]
        for g in sorted({orbit_of[sub] for sub in subs}):
            s2 = np.where(np.array(orbits) == g, 1.0, np.inf)
            one = dataclasses.replace(plan, allocation=Allocation(s2, 0.0, plan.budget.beta, plan.allocation.costs))
            a[row : row + c.queries, g] = c.weight * _representative_variances(one, c)
        row += c.queries
    return a
