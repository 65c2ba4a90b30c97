"""The residual plan kind (kind ``plan``: qs, rp, rpplus, wff, mm): its measurements, estimates and variances.

For every measured residual view A' (privacy Gram X at cost 1, noise scale sigma^2 from the
allocation) the release is y_A' = X^(1/2) x_A' + N(0, sigma^2 I), whose privacy Gram is X / sigma^2;
X^(1/2) is applied implicitly (:meth:`querysmasher.mechanisms.ViewMechanism.sqrt_apply`: factor by
factor for Kronecker mechanisms, by FFT for Fourier ones, by one symmetric square root for dense
ones) to the view's marginal x_A', never the full domain vector. A low-rank mechanism X = V diag(s)
V^T releases y_A' = W diag(s)^(1/2) V^T x_A' + N(0, sigma^2 I): r values with the same privacy Gram
(W: the mechanism's orthogonal ``rotation``, :mod:`querysmasher.queryfactor`). Each measurement's
cost is recomputed from the operator actually applied (``mechanism.applied()``).

From the measurements the residual estimate is x̂_A' = (X^+)^(1/2) y_A' (generalised least squares).
A query q on view A decomposes into subqueries q_{=>A'} = q (⊗ W_i) (W_i = I - J/n_i on A', (1/n_i) 1
elsewhere), each in the range of its view's mechanism, so

    answer(q) = sum_{A' ⊆ A} q_{=>A'} · x̂_A' = q · T̂_A,  T̂_A = sum_{A' ⊆ A} (⊗ W_i) x̂_A',

is unbiased, and its variance sum_{A'} sigma^2_A' q_{=>A'} X_A'^+ q_{=>A'}^T is known from the plan
alone (:mod:`querysmasher.variances`). T̂_A, the reconstructed marginal table of A, answers every
workload query on A. A cell count is estimable (T̂_A unbiased for it) only when every residual view
A' ⊆ A is measured at full rank on its residual space (prod_{i in A'} (n_i - 1)); rank-deficient
mechanisms (QS or WFF on abs/affine workloads) estimate only the workload's queries.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from .decompose import decompose, lifted_queries, view_answers
from .errors import InputError
from .fulldomain import is_full_domain_plan, marginal_estimable, marginalise
from .measurement import LinearMeasurement, Measurements
from .plan import Plan
from .variances import ViewVarianceMemo, query_variances, view_variances
from .workload import WorkloadView

__all__ = [
    "residual_measurements",
    "check_estimable",
    "Reconstruction",
    "ResidualVariances",
    "cells_estimable",
    "cell_variances",
    "MAX_EXPLICIT_CELLS",
    "ESTIMABLE_RTOL",
]

MAX_EXPLICIT_CELLS = 4096  # cell variances through a non-Kronecker residual mechanism: explicit up to this many cells
CACHE_CELLS = 4096  # residual estimates and tables up to this size are kept: many tables reuse them
ESTIMABLE_RTOL = 1e-6  # the part of G r outside the range of X, relative to G r


def residual_measurements(plan: Plan) -> list[LinearMeasurement]:
    """One measurement per measured view (finite sigma^2), its cost recomputed from the operator
    measure applies (once per distinct mechanism); an InputError for a view with loss > 0 left
    unmeasured, a sigma^2 that is not a positive number (or inf), a missing mechanism or one whose
    sizes are not its view's."""
    neighbours, sizes = plan.budget.neighbours, plan.schema.sizes
    costs: dict[str, float] = {}
    out = []
    for i, (attrs, key, s2, loss) in enumerate(zip(plan.views, plan.keys, plan.allocation.sigma2, plan.losses)):
        s2 = float(s2)
        if s2 == math.inf:
            if not float(loss) == 0.0:  # its queries would be answered 0 with variance 0
                raise InputError(
                    "plan sigma2",
                    s2,
                    f"of view {attrs} is infinite but the view has loss {float(loss)!r}: it would go unmeasured",
                )
            continue
        if not (math.isfinite(s2) and s2 > 0):
            raise InputError("plan sigma2", s2, f"of view {attrs} must be a positive number (or inf: not measured)")
        if key not in plan.solutions:
            raise InputError("plan view key", key, f"of view {attrs} has no stored mechanism")
        mech = plan.solutions[key].mechanism
        if tuple(mech.sizes) != tuple(sizes[a] for a in attrs):
            raise InputError(
                "plan mechanism sizes",
                tuple(mech.sizes),
                f"do not match view {attrs} of sizes {tuple(sizes[a] for a in attrs)}",
            )
        if key not in costs:
            costs[key] = mech.applied().cost(neighbours)
        out.append(
            LinearMeasurement(
                tuple(attrs), int(mech.outputs), mech.sqrt_apply, "gaussian", s2, costs[key], i, mech.sqrt_factors()
            )
        )
    return out


def check_estimable(plan: Plan) -> None:
    """Refuse (InputError), before any record is read, a residual plan whose measurements do not
    determine every workload query: a residual view whose subworkload Gram G is not zero must be
    measured, and G must lie in the range of its mechanism X, which :class:`Reconstruction` relies
    on (it applies X^+; outside the range the answers would be biased and their variances wrong).
    Tested on one random vector in the range of G per view: g = G r is compared with P g =
    X^(+1/2) X^(1/2) g, the projection through the operators measure and reconstruct apply (a part
    of G outside the range shows in g with probability one). The workload is decomposed again, as
    the planner did (seconds at the paper's largest scale). A full-domain plan (one mechanism over
    every attribute) is probed the same way with one random combination w of every workload query,
    lifted to the full domain (:func:`querysmasher.decompose.lifted_queries`)."""
    rng = np.random.default_rng(0)  # a probe of the plan, not of the data
    if is_full_domain_plan(plan):
        mech = plan.solutions[plan.keys[0]].mechanism
        w = sum(
            lifted_queries(plan.workload, v, rng.standard_normal(plan.workload.view_count(v)))
            for v in plan.workload.views
        )
        if not np.linalg.norm(w - mech.pinv_sqrt_apply(mech.sqrt_apply(w))) <= ESTIMABLE_RTOL * np.linalg.norm(w):
            raise InputError(
                "plan",
                plan.method,
                "its full-domain mechanism does not reach the workload's queries: measuring the plan would "
                "spend the budget on answers that cannot be given",
            )
        return
    dec = decompose(plan.workload)
    index = {attrs: i for i, attrs in enumerate(plan.views)}
    names = plan.schema.names
    for attrs, gram in dec.grams.items():
        if not gram.trace > 0:
            continue
        view = "(" + ",".join(names[a] for a in attrs) + ")"
        i = index.get(attrs)
        if i is None or not np.isfinite(plan.allocation.sigma2[i]):
            raise InputError(
                "plan",
                plan.method,
                f"residual view {view} of the workload is not measured: measuring the plan would spend the budget on "
                "answers that cannot be given",
            )
        mech = plan.solutions[plan.keys[i]].mechanism
        g = gram.apply(dec.store, rng.standard_normal(gram.cells))
        outside = np.linalg.norm(g - mech.pinv_sqrt_apply(mech.sqrt_apply(g)))
        if not outside <= ESTIMABLE_RTOL * np.linalg.norm(g):
            raise InputError(
                "plan",
                plan.method,
                f"the mechanism of residual view {view} does not reach the workload's queries on it: measuring "
                "the plan would spend the budget on answers that cannot be given",
            )


def _lift(x: np.ndarray, sub: tuple[int, ...], attrs: tuple[int, ...], sizes_all: tuple[int, ...]) -> np.ndarray:
    """(⊗ W_i) x: a residual estimate over ``sub`` as a table over ``attrs`` (batch dims kept)."""
    sub_sizes = tuple(sizes_all[a] for a in sub)
    batch = x.shape[1:]
    t = x.reshape(sub_sizes + batch)
    for axis in range(len(sub)):
        t = t - t.mean(axis=axis, keepdims=True)
    shape = tuple(sizes_all[a] for a in attrs)
    expand = tuple(p for p, a in enumerate(attrs) if a not in sub)
    divisor = math.prod(shape[p] for p in expand)
    t = np.expand_dims(t, tuple(expand)) if expand else t
    return (np.broadcast_to(t, shape + batch) / divisor).reshape((-1,) + batch)


@dataclass(eq=False)
class Reconstruction:
    """Residual estimates of every measured view (computed on demand), and the answers they give."""

    plan: Plan
    meas: Measurements
    _residual: dict[tuple[int, ...], np.ndarray] = field(default_factory=dict, repr=False)
    _tables: dict[tuple[int, ...], np.ndarray] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._position = {self.plan.views[int(i)]: k for k, i in enumerate(self.meas.index)}

    def __repr__(self) -> str:
        return f"Reconstruction({self.plan.method} on {self.plan.workload.spec}: {len(self._position)} measured views)"

    def residual(self, sub: tuple[int, ...]) -> np.ndarray | None:
        """x̂_A' = (X^+)^(1/2) y_A' for a measured residual view (None when it is not measured)."""
        if sub in self._residual:
            return self._residual[sub]
        k = self._position.get(sub)
        if k is None:
            return None
        i = int(self.meas.index[k])
        x = self.plan.solutions[self.plan.keys[i]].mechanism.pinv_sqrt_apply(np.asarray(self.meas.y[k]))
        if x.shape[0] <= CACHE_CELLS:
            self._residual[sub] = x
        return x

    def table(self, attrs: tuple[int, ...]) -> np.ndarray:
        """T̂_A over the cells of ``attrs`` (row-major): unbiased for every workload query on A."""
        attrs = tuple(attrs)
        if attrs in self._tables:
            return self._tables[attrs]
        sizes = self.plan.schema.sizes
        if is_full_domain_plan(self.plan):  # one full-domain estimate: marginalise it (method mm)
            full = self.residual(self.plan.views[0])
            total = np.zeros(math.prod(sizes[a] for a in attrs)) if full is None else marginalise(full, sizes, attrs)
            self._tables[attrs] = total
            return total
        total = None
        for r in range(len(attrs) + 1):
            for sub in itertools.combinations(attrs, r):
                x = self.residual(sub)
                if x is not None:
                    part = _lift(x, sub, attrs, sizes)
                    total = part.copy() if total is None else total.__iadd__(part)
        if total is None:
            total = np.zeros(math.prod(sizes[a] for a in attrs))
        if total.shape[0] <= CACHE_CELLS:
            self._tables[attrs] = total
        return total

    def answer(self, attrs: tuple[int, ...], queries: np.ndarray) -> np.ndarray:
        """Answers to explicit query rows over the cells of ``attrs``."""
        return np.asarray(queries, dtype=float) @ self.table(attrs)

    def view_answers(self, v: WorkloadView) -> np.ndarray:
        """Answers to every query of one workload view (product families by mode products)."""
        return view_answers(self.plan.workload, v, self.table(v.attrs))


def cells_estimable(plan: Plan, attrs: tuple[int, ...]) -> tuple[bool, str]:
    """(estimable, reason): whether every cell count of view ``attrs`` is estimable."""
    if is_full_domain_plan(plan):  # one mechanism over every attribute: its range, not residual views
        return marginal_estimable(plan, tuple(attrs))
    sizes = plan.schema.sizes
    measured = {a: i for i, a in enumerate(plan.views) if np.isfinite(plan.allocation.sigma2[i])}
    for r in range(len(attrs) + 1):
        for sub in itertools.combinations(attrs, r):
            name = ",".join(plan.schema.names[a] for a in sub) or "total"
            if sub not in measured:
                return False, f"residual view ({name}) is not measured"
            need = math.prod(sizes[a] - 1 for a in sub)
            got = plan.solutions[plan.keys[measured[sub]]].mechanism.rank()
            if got < need:
                return (
                    False,
                    f"the mechanism of residual view ({name}) has rank {got} < {need}: the table is a projection",
                )
    return True, ""


def cell_variances(plan: Plan, attrs: tuple[int, ...]) -> np.ndarray | None:
    """Variance of every cell estimate of view ``attrs`` (None when too costly to compute)."""
    if not attrs:
        return query_variances(plan, (), np.ones((1, 1)))
    # view_variances is factor-wise for kron residual views and explicit (sub-view cells squared) otherwise.
    subs = {s for r in range(len(attrs) + 1) for s in itertools.combinations(attrs, r)}
    for i, a in enumerate(plan.views):
        if (
            a in subs
            and np.isfinite(plan.allocation.sigma2[i])
            and not plan.solutions[plan.keys[i]].mechanism.FACTORWISE
        ):
            if math.prod(plan.schema.sizes[x] for x in a) > MAX_EXPLICIT_CELLS:
                return None
    return view_variances(plan, WorkloadView(tuple(attrs), "marginal", 1.0, ("marginal",) * len(attrs)))


class ResidualVariances:
    """The variances of a residual plan's answers, known from the plan alone: every workload view's
    (views of one shape, mechanism and noise share one computation) and a table's cells."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self._memo = ViewVarianceMemo(plan)

    def view(self, v: WorkloadView) -> np.ndarray:
        return self._memo(v)

    def cells(self, attrs: tuple[int, ...]) -> tuple[np.ndarray | None, str]:
        """(variance of every cell of the table on ``attrs``, "") where its cells are estimable;
        else (None, why)."""
        ok, why = cells_estimable(self.plan, tuple(attrs))
        if not ok:
            return None, why
        var = cell_variances(self.plan, tuple(attrs))
        if var is None:
            return (
                None,
                f"a residual view of more than {MAX_EXPLICIT_CELLS} cells has a non-Kronecker mechanism: "
                "cell variances not computed",
            )
        return var, ""
