"""Release math of a marginal-family plan: noisy measurements, GLS answers and exact variances.

What measure applies -- the operators and their privacy cost -- lives in :mod:`.operators`, which
planning uses too; this module is the measure and reconstruct side only, so editing it never re-runs
a plan.

Each marginal view k releases y_k = B_k x_k + N(0, sigma_k^2 I) with B_k = F^T (the view's unit-
diagonal correlation factor) and sigma_k^2 = 1 / share_k, so its privacy Gram B^T B / sigma^2 is
the planned X_k; each residual-only subset T releases y_T = X_T^1/2 x_T + N(0, sigma_T^2 I) with
its ``qs`` mechanism, as ``qs`` measures it. x_k is the view's marginal (cells row-major in schema
order), never the full domain.

Reconstruction is generalised least squares in the residual coordinates (:mod:`.problem`): with
phi = sqrt(N) U^T x, y_m = B_m U_m phi_(m) / sqrt(n_m) + noise, so the normal equations are X' phi =
b, X' = sum_m (1/n_m) embed(U_m^T B_m^T B_m U_m) / sigma_m^2, b = sum_m embed(U_m^T B_m^T y_m) /
(sqrt(n_m) sigma_m^2); they are solved view by view (each top eliminated, one lower system), and a
workload view's marginal is x̂_v = U_v phî_(v) / sqrt(n_v). Every answer is unbiased and its
variance, diag(Q_v U_v Cov(phî)_(v) U_v^T Q_v^T) / n_v with Cov = X'^-1 = E + R S^-1 R^T, is exact.
"""

from __future__ import annotations

import itertools
import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.linalg

from ..decompose import view_query_matrix
from ..errors import InputError
from ..families import query_matrix_1d
from .basis import from_residual, to_residual, view_coords
from .operators import Measurement, applied_privacy_cost, measurement_operators, operator_cost

__all__ = [
    "measure_marginals",
    "Answers",
    "reconstruct",
    "view_table",
    "query_variances",
    "solver_of",
    "table_estimable",
    "view_queries",
    "check_estimable",
]


def _add_noise(noise, clean: np.ndarray, sigma2: float, sensitivity2: float) -> np.ndarray:
    if hasattr(noise, "add_gaussian"):
        return noise.add_gaussian(clean, sigma2, sensitivity2=sensitivity2)
    if isinstance(noise, np.random.Generator):
        return clean + noise.standard_normal(clean.shape) * math.sqrt(sigma2)
    if callable(noise):
        return np.asarray(noise(clean, sigma2), dtype=float)
    raise TypeError(
        "noise must be a NoiseSource, a numpy Generator or a callable (clean, sigma2) -> noisy, "
        f"not {type(noise).__name__}"
    )


def measure_marginals(plan, marginals: dict[tuple[int, ...], np.ndarray] | Callable, noise) -> list[np.ndarray]:
    """Noisy measurements, one per :func:`measurement_operators` entry. ``marginals`` maps an
    attribute tuple to its marginal vector (or is a callable attrs -> vector); ``noise`` is a
    :class:`querysmasher.noise.NoiseSource`, a numpy Generator (experiments) or a callable
    (clean, sigma2) -> noisy. The applied operators' privacy cost is re-checked against the
    budget first (an InputError above it)."""
    ops = measurement_operators(plan)
    cost = applied_privacy_cost(ops, plan.budget.neighbours)
    if not cost <= plan.budget.beta:
        raise InputError(
            "plan privacy cost", cost, f"exceeds its budget beta {plan.budget.beta!r}: refusing to measure"
        )
    get = marginals if callable(marginals) else (lambda a: marginals[tuple(a)])
    neighbours = plan.budget.neighbours
    return [
        _add_noise(
            noise, m.operator @ np.asarray(get(m.attrs), dtype=float), m.sigma2, operator_cost(m.operator, neighbours)
        )
        for m in ops
    ]


def view_queries(workload, v) -> np.ndarray:
    """The explicit queries (rows, over the view's cells) of one workload view, weights not applied."""
    sizes = tuple(workload.schema.sizes[a] for a in v.attrs)
    if v.factors:
        q = np.ones((1, 1))
        for f, n in zip(v.factors, sizes):
            q = np.kron(q, query_matrix_1d(f, n))
        return q
    return view_query_matrix(workload, v)


@dataclass
class Answers:
    """Per workload view (in the workload's order): answers, their variances, and the view's
    reconstructed marginal table."""

    answers: list[np.ndarray]
    variances: list[np.ndarray]
    tables: list[np.ndarray]
    cell_variances: list[np.ndarray | None] | None = None  # when asked: per view, None where not estimable

    def total_variance(self, workload) -> float:
        return float(sum(v.weight * var.sum() for v, var in zip(workload.views, self.variances)))


class _Solver:
    """The plan's normal equations, eliminated once (tops, lower system, residual-only blocks)."""

    def __init__(self, plan):
        self.plan = plan
        p = plan.problem
        self.p = p
        self.elim = []
        for k, v in enumerate(p.views):
            y = p.residual_gram(k, plan.gram(k)) / v.cells
            a = y[np.ix_(v.top, v.top)]
            b = y[np.ix_(v.top, v.low)]
            c = y[np.ix_(v.low, v.low)]
            ainv = scipy.linalg.cho_solve(scipy.linalg.cho_factor(a), np.eye(len(v.top)))
            kk = ainv @ b
            self.elim.append((ainv, kk, c - b.T @ kk))
            if p.tied:  # every view has the same X: one elimination serves all
                self.elim = [self.elim[0]] * len(p.views)
                break
        s = np.zeros((p.lower_dim, p.lower_dim))
        for k, v in enumerate(p.views):
            s[np.ix_(v.low_glob, v.low_glob)] += self.elim[k][2]
        self.q = scipy.linalg.cho_solve(scipy.linalg.cho_factor(s), np.eye(p.lower_dim))
        self.vindex = {v.attrs: k for k, v in enumerate(p.views)}
        # residual-only: the top block of each mechanism (centred: it lives on its own residual)
        self.res = {}
        sizes_all = plan.schema.sizes
        for j, t in enumerate(plan.residual_views):
            sz = tuple(sizes_all[a] for a in t)
            c = view_coords(t, sz)
            pos = c.positions(t)
            x = plan.residual_mechanism(j).dense_x() / plan.residual_sigma2[j]
            y = to_residual(to_residual(x, sz).T, sz).T / math.prod(sz)
            self.res[t] = (pos, np.linalg.pinv(y[np.ix_(pos, pos)], hermitian=True), y[np.ix_(pos, pos)])

    def solve(self, measurements: list[Measurement], ys: list[np.ndarray]) -> dict:
        """phî as {subset: coordinates} for every top, residual-only and lower subset."""
        p, sizes_all = self.p, self.plan.schema.sizes
        btop = {}
        bres = {}
        batch = np.asarray(ys[0]).shape[1:]
        bl = np.zeros((p.lower_dim,) + batch)
        for m, y in zip(measurements, ys):
            sz = tuple(sizes_all[a] for a in m.attrs)
            back = (m.operator.T @ np.asarray(y, dtype=float)).reshape(m.operator.shape[1], -1)
            r = to_residual(back.T, sz).T.reshape((-1,) + batch) / (math.sqrt(math.prod(sz)) * m.sigma2)
            if m.kind == "marginal":
                v = p.views[self.vindex[m.attrs]]
                btop[m.attrs] = r[v.top]
                bl[v.low_glob] += r[v.low]
            else:
                pos = self.res[m.attrs][0]
                bres[m.attrs] = r[pos]
        rhs = bl.copy()
        for k, v in enumerate(p.views):
            rhs[v.low_glob] -= self.elim[k][1].T @ btop[v.attrs]
        phil = self.q @ rhs
        tops = {}
        for k, v in enumerate(p.views):
            ainv, kk, _ = self.elim[k]
            tops[v.attrs] = ainv @ btop[v.attrs] - kk @ phil[v.low_glob]
        for t, (pos, pinv, _) in self.res.items():
            tops[t] = pinv @ bres[t]
        return {"lower": phil, "tops": tops}

    def view_layout(self, attrs: tuple[int, ...]):
        """For a workload view: its coordinates split into lower (global index), marginal-view tops
        and residual-only tops, and R_v (coords x its lower columns) for the covariance."""
        p, sizes_all = self.p, self.plan.schema.sizes
        sz = tuple(sizes_all[a] for a in attrs)
        c = view_coords(attrs, sz)
        lower_pos, lower_glob, tops, res = [], [], [], []
        for s in c.subsets:
            pos = c.positions(s)
            if s in p.lower:
                lower_pos.append(pos)
                lower_glob.append(p.lower[s] + np.arange(len(pos)))
            elif s in self.vindex:
                tops.append((self.vindex[s], pos))
            elif s in self.res:
                res.append((s, pos))
        lp = np.concatenate(lower_pos) if lower_pos else np.zeros(0, dtype=np.int64)
        lg = np.concatenate(lower_glob) if lower_glob else np.zeros(0, dtype=np.int64)
        return c, sz, lp, lg, tops, res


# One elimination per plan object: the privacy re-check (check_estimable), measure's own re-check and
# reconstruct all use it (a plan record is not changed once planned; a rescaled plan is a new object).
_ELIMINATED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def solver_of(plan) -> _Solver:
    sol = _ELIMINATED.get(plan)
    if sol is None:
        sol = _ELIMINATED[plan] = _Solver(plan)
    return sol


ESTIMABLE_RTOL = 1e-8  # a query's part outside its residual mechanism's range, relative to the part


def check_estimable(plan) -> None:
    """Refuse (InputError), before any record is read, a plan whose measurements do not determine
    every workload query: the normal equations of its marginal views are singular (a zeroed or
    rank-deficient mechanism), or a query has a part on a residual-only subset outside the range of
    that subset's mechanism. :func:`reconstruct` relies on both; measuring such a plan would spend
    the budget on answers that cannot be given."""
    try:
        sol = solver_of(plan)
    except (np.linalg.LinAlgError, ValueError):
        raise InputError(
            "plan",
            plan.method,
            "its mechanisms do not determine every workload query (singular normal equations): "
            "measuring it would spend the budget on answers that cannot be given",
        ) from None
    for v in plan.workload.views:
        _, sz, _, _, _, res = sol.view_layout(v.attrs)
        if not res:
            continue
        qu = to_residual(view_queries(plan.workload, v), sz)
        for s, pos in res:
            z = qu[:, pos]
            pinv, y = sol.res[s][1], sol.res[s][2]
            outside = np.linalg.norm(z - z @ pinv @ y)
            if outside > ESTIMABLE_RTOL * max(np.linalg.norm(z), 1e-300) and outside > 0:
                name = ",".join(plan.schema.names[a] for a in s)
                raise InputError(
                    "plan",
                    plan.method,
                    f"the mechanism of residual view ({name}) does not reach the workload's queries on it: "
                    "measuring it would spend the budget on answers that cannot be given",
                )


def view_table(plan, phi: dict, attrs: tuple[int, ...]) -> np.ndarray:
    """x̂_v over the cells of ``attrs`` (row-major, batch axes kept) from the solved coordinates
    ``phi`` (:meth:`_Solver.solve`): unbiased for every workload query on ``attrs``."""
    sol = solver_of(plan)
    _, sz, lp, lg, tops, res = sol.view_layout(tuple(attrs))
    n = math.prod(sz)
    batch = phi["lower"].shape[1:]
    coef = np.zeros((n,) + batch)
    coef[lp] = phi["lower"][lg]
    for k, pos in tops:
        coef[pos] = phi["tops"][plan.views[k]]
    for s, pos in res:
        coef[pos] = phi["tops"][s]
    return (from_residual(coef.reshape(n, -1).T, sz).T / math.sqrt(n)).reshape((n,) + batch)


def query_variances(plan, attrs: tuple[int, ...], q: np.ndarray) -> np.ndarray:
    """The exact variance of every query (rows of ``q``, over the cells of ``attrs``)."""
    sol = solver_of(plan)
    _, sz, lp, lg, tops, res = sol.view_layout(tuple(attrs))
    return _query_variances(sol, q, sz, lp, lg, tops, res)


def reconstruct(
    plan,
    measurements: list[np.ndarray],
    *,
    ops: list[Measurement] | None = None,
    cell_variances: bool = False,
    max_cells: int = 4096,
) -> Answers:
    """GLS answers to every workload query with exact variances (module docstring). Measurements
    may carry a trailing batch axis (independent draws): answers and tables then carry it too.
    ``cell_variances``: also the variance of every cell of each workload view's table (views of at
    most ``max_cells`` cells whose table is an unbiased estimate of the marginal, else None;
    :func:`table_estimable` says why)."""
    ops = measurement_operators(plan) if ops is None else ops
    phi = solver_of(plan).solve(ops, measurements)
    wl = plan.workload
    answers, variances, tables, cell_var = [], [], [], []
    for v in wl.views:
        table = view_table(plan, phi, v.attrs)
        q = view_queries(wl, v)
        answers.append(q @ table)
        tables.append(table)
        variances.append(query_variances(plan, v.attrs, q))
        if cell_variances:
            n = table.shape[0]
            ok = table_estimable(plan, v.attrs)[0] and n <= max_cells
            cell_var.append(query_variances(plan, v.attrs, np.eye(n)) if ok else None)
    return Answers(answers, variances, tables, cell_var if cell_variances else None)


def _query_variances(sol: _Solver, q: np.ndarray, sz, lp, lg, tops, res) -> np.ndarray:
    """diag(Q U Cov(phî) U^T Q^T) / n for queries Q over a workload view's cells, Cov = E + R S^-1 R^T
    on the view's coordinates (its tops eliminated, its lower columns from the lower system)."""
    n = math.prod(sz)
    qu = to_residual(q, sz) / math.sqrt(n)
    cols = (
        np.unique(np.concatenate([lg] + [sol.p.views[k].low_glob for k, _ in tops]))
        if (len(lg) or tops)
        else np.zeros(0, dtype=np.int64)
    )
    r = np.zeros((n, len(cols)))
    if len(lp):
        r[lp, np.searchsorted(cols, lg)] = 1.0
    var = np.zeros(q.shape[0])
    for k, pos in tops:
        ainv, kk, _ = sol.elim[k]
        r[np.ix_(pos, np.searchsorted(cols, sol.p.views[k].low_glob))] = -kk
        z = qu[:, pos]
        var += np.einsum("ij,ij->i", z @ ainv, z)
    for s, pos in res:
        z = qu[:, pos]
        var += np.einsum("ij,ij->i", z @ sol.res[s][1], z)
    if len(cols):
        z = qu @ r
        var += np.einsum("ij,ij->i", z @ sol.q[np.ix_(cols, cols)], z)
    return var


def table_estimable(plan, attrs: tuple[int, ...]) -> tuple[bool, str]:
    """(estimable, reason): whether a view's reconstructed table is an unbiased estimate of its
    marginal, i.e. every residual coordinate of the view is measured at full rank (marginal views'
    mechanisms are full rank; a residual-only subset's ``qs`` mechanism may not be)."""
    p, sizes_all = plan.problem, plan.schema.sizes
    marginal = {v.attrs for v in p.views}
    residual = dict(zip(plan.residual_views, range(len(plan.residual_views))))
    for r in range(len(attrs) + 1):
        for sub in itertools.combinations(attrs, r):
            if sub in p.lower or sub in marginal or math.prod(sizes_all[a] - 1 for a in sub) == 0:
                continue
            name = ",".join(plan.schema.names[a] for a in sub)
            if sub not in residual:
                return False, f"residual view ({name}) is not measured"
            need = math.prod(sizes_all[a] - 1 for a in sub)
            got = plan.residual_mechanism(residual[sub]).rank()
            if got < need:
                return (
                    False,
                    f"the mechanism of residual view ({name}) has rank {got} < {need}: the table is a projection",
                )
    return True, ""
