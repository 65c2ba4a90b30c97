"""The checks every per-view solver must pass (the contract of ``docs/solvers.md``), as a kit.

Plugin authors run them in their own tests; the built-in solvers' tests run the same ones
(``tests/test_solver_kit.py``). Everything is checked by brute force on a small schema, from
explicit matrices, never from what the solver reports:

* :func:`check_view_solutions`: per distinct subproblem, X is symmetric PSD and lives on the
  view's residual subspace, the mechanism's privacy cost (largest diagonal of the explicit X) is at
  most 1, every subquery is estimable (G in the range of X), the reported loss equals tr(G X^+)
  recomputed, and 0 <= lower_bound <= loss;
* :func:`check_privacy`: the whole released mechanism, built over the full domain, costs at most
  beta, and the predicted total variance is that of the explicit least-squares estimator;
* :func:`check_monte_carlo`: measured many times, the answers are unbiased and their empirical
  variances match the predicted ones (chi-square band).

:func:`check_solver` runs all three on a few workloads (pass a registered name, a factory or a
solver object) and raises :class:`SolverCheckError` naming the first failure.

>>> check_solver("rp", workloads=("prefix:1,2",), draws=0)
'rp: 1 workloads, 10 subproblems, cost, loss, range, lower bound and full-domain privacy checked'
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from . import variances
from .accounting import Budget
from .data import Records, validate_records
from .decompose import decompose, view_query_matrix
from .families import query_matrix_1d
from .linalg import kron_dense
from .planners.residual import assemble_plan, solve_distinct
from .schema import Attribute, Schema
from .solvers import get_solver
from .workload import Workload, WorkloadView, parse_workload

__all__ = [
    "SolverCheckError",
    "SMALL_SCHEMA",
    "SMALL_WORKLOADS",
    "plan_with",
    "check_view_solutions",
    "check_privacy",
    "check_monte_carlo",
    "check_solver",
    "full_privacy_gram",
    "full_workload",
    "records_of_counts",
    "workload_answers",
    "marginal_map",
    "view_queries",
    "pinv",
]

# 3 x 4 x 2 x 3 = 72 cells: every full-domain matrix is small; a categorical attribute for hybrid.
SMALL_SCHEMA = Schema(
    "kit",
    (
        Attribute("A", 3, "numeric"),
        Attribute("B", 4, "categorical"),
        Attribute("C", 2, "numeric"),
        Attribute("D", 3, "numeric"),
    ),
)
# one-term Kronecker views, several-term dense views, explicit (random) queries, weights
SMALL_WORKLOADS = ("prefix:1,2", "range:1+affine:2", "marginal:2+abs:2@2", "random:2", "hybrid:1,2,3")

COST_RTOL = 1e-9  # privacy: a cost above 1 by more than rounding is a failure
LOSS_RTOL = 1e-6  # the reported loss must be the mechanism's loss


class SolverCheckError(AssertionError):
    """A solver broke its contract; the message names the solver, the subproblem and the figures."""


# ----------------------------------------------------------------------------- explicit matrices


def pinv(x: np.ndarray, rtol: float = 1e-9) -> np.ndarray:
    """Pseudo-inverse of a symmetric PSD matrix, computed here independently of the library's."""
    w, v = np.linalg.eigh((x + x.T) / 2)
    keep = w > rtol * max(float(w.max(initial=0.0)), 1e-300)
    return (v[:, keep] / w[keep]) @ v[:, keep].T


def records_of_counts(schema: Schema, counts) -> Records:
    """Records whose full-domain histogram (cells row-major in schema order) is ``counts``
    (non-negative integers): a data vector given to the shared measure path as records.

    >>> len(records_of_counts(Schema("s", (Attribute("a", 2, "numeric"),)), [3, 1]))
    4
    """
    counts = np.asarray(counts)
    if counts.shape != (schema.domain_cells(),) or np.any(counts < 0) or np.any(counts != np.round(counts)):
        raise ValueError("counts must be one non-negative integer per cell of the domain")
    cells = np.repeat(np.arange(counts.size), counts.astype(np.int64))
    codes = np.stack(np.unravel_index(cells, schema.sizes), axis=1) if len(schema) else np.zeros((cells.size, 0))
    return Records(codes.astype(np.int64), schema)


def workload_answers(plan, measurements) -> list[np.ndarray]:
    """Every workload view's answers (in ``plan.workload.views`` order) from ``measurements``,
    through the plan's kind (:func:`querysmasher.reconstruct.reconstruct`)."""
    from .reconstruct import reconstruct  # loads h5py only where it is used

    est = reconstruct(plan, measurements)
    return [np.asarray(est.view_answers(v)) for v in plan.workload.views]


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
    """Sum over measured residual views of M^T X_view M / sigma^2 over the full domain: the privacy
    Gram of the released mechanism (the operator measure applies is X^(1/2) on the view's marginal)."""
    sizes = plan.schema.sizes
    total = np.zeros((int(np.prod(sizes)),) * 2)
    for attrs, key, s2 in zip(plan.views, plan.keys, plan.allocation.sigma2):
        if not np.isfinite(s2):
            continue
        m = marginal_map(sizes, attrs)
        total += m.T @ plan.solutions[key].mechanism.dense_x() @ m / s2
    return total


# ----------------------------------------------------------------------------- checks


def _solver_of(solver) -> tuple[object, str]:
    """(solver object, name) from a registered name, a factory or a solver object."""
    if isinstance(solver, str):
        return get_solver(solver), solver
    obj = solver if callable(getattr(solver, "solve", None)) else solver()
    return obj, str(getattr(obj, "name", type(obj).__name__))


def plan_with(solver, workload: Workload | str, budget: Budget | None = None, schema: Schema = SMALL_SCHEMA):
    """A plan made with a solver object (or name/factory), the way ``make_plan`` makes one."""
    obj, name = _solver_of(solver)
    wl = parse_workload(workload, schema) if isinstance(workload, str) else workload
    decomp = decompose(wl)
    if hasattr(obj, "prepare"):
        obj.prepare(decomp)
    sols = solve_distinct(decomp.distinct(), decomp.store, obj)
    return assemble_plan(decomp, sols, name, budget or Budget.from_beta(1.0))


def check_view_solutions(plan) -> int:
    """Per distinct subproblem of a plan: X = P X P (residual subspace), cost <= 1, range,
    loss = tr(G X^+), 0 <= lower bound <= loss.
    Returns the number of subproblems checked."""
    decomp = decompose(plan.workload)
    distinct = decomp.distinct()
    for key, sol in plan.solutions.items():
        where = (
            f"{plan.method}: subproblem {key[:12]} (view sizes {distinct[key].sizes}, {len(distinct[key].terms)} terms)"
        )
        g = distinct[key].dense(decomp.store)
        mech = sol.mechanism
        if tuple(mech.sizes) != tuple(distinct[key].sizes):
            raise SolverCheckError(f"{where}: mechanism sizes {mech.sizes} are not the view's")
        x = np.asarray(mech.dense_x(), dtype=float)
        if x.shape != g.shape or not np.allclose(x, x.T, atol=1e-10 * max(1.0, float(np.abs(x).max()))):
            raise SolverCheckError(f"{where}: X is not a symmetric {g.shape} matrix")
        if np.linalg.eigvalsh((x + x.T) / 2).min() < -1e-9 * max(1.0, float(np.abs(x).max())):
            raise SolverCheckError(f"{where}: X is not positive semidefinite")
        p = kron_dense([np.eye(n) - 1.0 / n for n in mech.sizes])
        if not np.allclose(p @ x @ p, x, atol=1e-9 * max(1.0, float(np.abs(x).max()))):
            raise SolverCheckError(
                f"{where}: X is not supported on the view's residual subspace (X != P X P, P = ⊗ (I - J/n))"
            )
        cost = float(np.diag(x).max())
        if cost > 1 + COST_RTOL:
            raise SolverCheckError(f"{where}: privacy cost max diag(X) = {cost!r} > 1")
        if abs(mech.max_diag() - cost) > 1e-9 * max(1.0, cost):
            raise SolverCheckError(
                f"{where}: mechanism.max_diag() = {mech.max_diag()!r} but the explicit X has {cost!r}"
            )
        xp = pinv(x)
        if not np.allclose(x @ xp @ g, g, atol=1e-8 * max(1.0, float(np.abs(g).max()))):
            raise SolverCheckError(
                f"{where}: the subworkload is not in the range of X (some queries cannot be estimated)"
            )
        loss = float(np.sum(g * xp))
        if not math.isclose(sol.loss, loss, rel_tol=LOSS_RTOL, abs_tol=1e-12):
            raise SolverCheckError(f"{where}: reported loss {sol.loss!r} but tr(G X^+) = {loss!r}")
        if not (0.0 <= sol.lower_bound <= sol.loss * (1 + 1e-9) + 1e-12):
            raise SolverCheckError(f"{where}: lower_bound {sol.lower_bound!r} is not in [0, loss = {sol.loss!r}]")
    return len(plan.solutions)


def check_privacy(plan) -> None:
    """The released mechanism over the full domain: cost <= beta, every query estimable, and the
    predicted total variance and RMSE equal the explicit estimator's."""
    x = full_privacy_gram(plan)
    cost = float(np.diag(x).max())
    if cost > plan.budget.beta * (1 + COST_RTOL):
        raise SolverCheckError(
            f"{plan.method} on {plan.workload.spec}: full-domain privacy cost {cost!r} > beta {plan.budget.beta!r}"
        )
    w, weights = full_workload(plan.workload)
    xp = pinv(x)
    if not np.allclose(w @ xp @ x, w, atol=1e-8):
        raise SolverCheckError(
            f"{plan.method} on {plan.workload.spec}: some workload query is not estimable from the release"
        )
    total = float(weights @ np.einsum("ij,jk,ik->i", w, xp, w))
    if not math.isclose(total, plan.total_variance, rel_tol=1e-7):
        raise SolverCheckError(
            f"{plan.method} on {plan.workload.spec}: predicted total variance {plan.total_variance!r}, "
            f"explicit {total!r}"
        )


def check_monte_carlo(plan, *, draws: int = 2000, records: int = 300, seed: int = 0, alpha: float = 1e-3) -> float:
    """Measure ``draws`` times (seeded: a test, not a release): answers unbiased within 4 standard
    errors, empirical variances in a Bonferroni chi-square band around the predicted ones, and the
    empirical RMSE within 5% of the predicted. Returns the empirical RMSE."""
    import pandas as pd  # loads pandas only where it is used
    from scipy.stats import chi2  # loads scipy only where it is used

    from .measure import measure  # loads h5py only where it is used
    from .reconstruct import reconstruct  # loads h5py, numpy only where it is used

    schema = plan.schema
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({a.name: rng.integers(0, a.size, records) for a in schema.attributes})
    data = validate_records(frame, schema)
    full = np.bincount(np.ravel_multi_index(data.codes.T, schema.sizes), minlength=int(np.prod(schema.sizes))).astype(
        float
    )
    rec = reconstruct(plan, measure(plan, data, rng, draws=draws))
    views = plan.workload.views
    sq, pred, wts = [], [], []
    for v in views:
        truth = view_queries(plan.workload, v) @ (marginal_map(schema.sizes, v.attrs) @ full)
        a = rec.view_answers(v)
        var = variances.view_variances(
            plan, v
        )  # looked up when called: the kit's own tests plant a wrong prediction there
        where = f"{plan.method} on {plan.workload.spec}, view {v.attrs}"
        if np.any(np.abs(a.mean(axis=1) - truth) > 4 * np.sqrt(var / draws)):
            raise SolverCheckError(f"{where}: mean answer further than 4 standard errors from the truth (biased?)")
        m = len(var) * len(views)
        lo, hi = chi2.ppf(alpha / m, draws - 1) / (draws - 1), chi2.ppf(1 - alpha / m, draws - 1) / (draws - 1)
        ratio = a.var(axis=1, ddof=1) / var
        if not np.all((ratio > lo) & (ratio < hi)):
            raise SolverCheckError(
                f"{where}: empirical / predicted variance {ratio.min():.3f}..{ratio.max():.3f} "
                f"outside [{lo:.3f}, {hi:.3f}]"
            )
        sq.append(((a - truth[:, None]) ** 2).mean(axis=1))
        pred.append(var)
        wts.append(np.full(len(var), v.weight))
    w = np.concatenate(wts)
    empirical = float(np.sqrt(np.concatenate(sq) @ w / w.sum()))
    if not math.isclose(empirical, plan.rmse, rel_tol=0.05):
        raise SolverCheckError(
            f"{plan.method} on {plan.workload.spec}: empirical RMSE {empirical:.6g} vs predicted {plan.rmse:.6g}"
        )
    return empirical


def check_solver(
    solver: str | Callable | object,
    *,
    workloads: Sequence[str] = SMALL_WORKLOADS[:2],
    budget: Budget | None = None,
    draws: int = 1000,
    schema: Schema = SMALL_SCHEMA,
) -> str:
    """Every check on ``workloads`` over ``schema`` (Monte Carlo on the first workload, skipped
    with ``draws=0``). Raises :class:`SolverCheckError` on the first failure; returns a summary."""
    budget = budget or Budget.from_rho(0.5)
    name = solver if isinstance(solver, str) else _solver_of(solver)[1]
    subproblems = 0
    for k, spec in enumerate(workloads):
        plan = plan_with(solver, spec, budget, schema)
        subproblems += check_view_solutions(plan)
        check_privacy(plan)
        if draws and k == 0:
            check_monte_carlo(plan, draws=draws)
    mc = f", Monte Carlo ({draws} draws)" if draws else ""
    return (
        f"{name}: {len(workloads)} workloads, {subproblems} subproblems, cost, loss, range, lower bound{mc} "
        "and full-domain privacy checked"
    )
