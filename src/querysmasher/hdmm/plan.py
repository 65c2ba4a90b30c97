r"""HDMM: choose a strategy for the whole workload, predict its error, and (on small domains) measure
and reconstruct, with Gaussian noise (a :class:`~querysmasher.accounting.Budget`, zCDP) or, as the
HDMM paper defines it, Laplace noise (a :class:`~.laplace.PureBudget`, pure ε-DP; optimisers of
:mod:`.optimize_laplace`).

:func:`plan_hdmm` runs the applicable optimisers and keeps the one with the lowest expected error:

* ``opt0`` — explicit OPT_0 on the full W^T W, when the domain has at most ``explicit_cells`` cells;
* ``kron`` — OPT_⊗ (always);
* ``plus`` — OPT_+ with one group per ``+``-separated term of the spec (``grouping="term"``, the
  default) or per workload view (``grouping="view"``), when that gives at least two groups. Per-view
  groups would give range:1,2 (n = 20, d = 40) RMSE 93.53, below the 109.56 Table 4 reports for
  HDMM, so the paper's runs did not group that way;
* ``marginals`` — OPT_M, for marginal workloads.

A plan is a union of groups, each a strategy at privacy cost 1 with error E_g (the weighted sum of
variances of the workload views answered from it). Noise variances σ_g^2 = Σ sqrt(E) / (β sqrt(E_g))
spend exactly β (several groups only come from OPT_+, whose factors have unit diagonals, so the
diagonal of Σ_g X_g / σ_g^2 is constant) and give a total variance (Σ_g sqrt(E_g))^2 / β
(:func:`querysmasher.allocation.allocate`). Under Laplace noise each group is a strategy of L1
sensitivity 1 with error E_g, ε_g ∝ E_g^(1/3) and the total variance is 2 (Σ_g E_g^(1/3))^3 / ε^2
(:func:`.laplace.laplace_allocation`).

The noise is calibrated to each group's cost recomputed from the operator measure applies
(:func:`noise_cost`: never below the stated cost 1, or sensitivity), and measure re-checks the
plan's total cost against its budget with no tolerance (:func:`check_hdmm_budget`), as it does for
residual plans: a strategy loaded from a file within the verification tolerance of cost 1 is never
released above the budget.

Measure and reconstruct work on the full data vector, HDMM's real limit: above ``max_domain_cells``
they raise an InputError, while the expected error is still computed implicitly.

>>> from querysmasher.accounting import Budget
>>> p = plan_hdmm("synthetic:n=10,d=40", "marginal:1,2", Budget.from_beta(1.0))
>>> p.optimizer, round(p.rmse, 2)
('marginals', 23.48)
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from ..accounting import Budget
from ..allocation import Allocation, PredictedError, allocate, rmse
from ..errors import InputError
from ..families import query_matrix_1d
from ..linalg import kron_apply
from ..schema import Schema, parse_schema
from ..workload import Workload, parse_workload
from . import optimize_laplace as l1
from .implicit import ImplicitWorkload, KronStrategy
from .laplace import LaplaceAllocation, LaplaceStrategy, PureBudget, laplace_allocation
from ..noise import as_noise, make_noise
from .optimize import DEFAULT_TARGET_GAP, Opt0Cache, marginals_applicable, opt_kron, opt_marginals, opt_plus

__all__ = ["HDMMGroup", "HDMMPlan", "HDMMMeasurements", "plan_hdmm", "hdmm_measure", "hdmm_reconstruct", "OPTIMIZERS", "noise_cost",
           "hdmm_privacy_cost", "check_hdmm_budget"]

OPTIMIZERS: tuple[str, ...] = ("opt0", "kron", "plus", "marginals")
DEFAULT_RESTARTS = 3
DEFAULT_EXPLICIT_CELLS = 256  # OPT_0 over the full domain costs up to ~cells^4 flops per Newton step
MAX_DOMAIN_CELLS = 10**7


@dataclass(frozen=True, eq=False)
class HDMMGroup:
    """A strategy at privacy cost 1 (Gaussian) or L1 sensitivity 1 (Laplace) and the workload views answered from it."""

    views: np.ndarray  # indices into workload.views
    strategy: KronStrategy | LaplaceStrategy
    error: float  # Σ over those views of w_v tr(G_v X^+) (times ||A||_1^2 under Laplace): the group's error at cost 1


@dataclass(eq=False)
class HDMMPlan(PredictedError):
    """The chosen HDMM strategy, its noise scales and its expected error."""

    schema: Schema
    workload: Workload
    budget: Budget | PureBudget
    optimizer: str  # which optimiser won
    groups: tuple[HDMMGroup, ...]
    candidates: dict[str, float]  # optimiser -> total variance at the budget
    seed: int
    restarts: int
    seconds: float
    notes: list[str] = field(default_factory=list)

    @property
    def noise(self) -> str:
        return "laplace" if isinstance(self.budget, PureBudget) else "gaussian"

    @property
    def allocation(self) -> Allocation | LaplaceAllocation:
        return _allocation([g.error for g in self.groups], [g.strategy for g in self.groups], self.budget)

    def summary(self) -> dict:
        return {
            "schema": self.schema.name,
            "workload": self.workload.spec,
            "method": "hdmm",
            "noise": self.noise,
            "rmse": self.rmse,
            "total_variance": self.total_variance,
            "queries": self.queries,
            "views": len({v.attrs for v in self.workload.views}),
            **self.budget.to_dict(),
            "seconds": self.seconds,
            "optimizer": self.optimizer,
            "candidates_rmse": {k: rmse(v, self.queries) for k, v in self.candidates.items()},
            "groups": len(self.groups),
            "seed": self.seed,
            "restarts": self.restarts,
            "notes": list(self.notes),
        }


def _groups(workload: Workload, grouping: str) -> list[np.ndarray]:
    key = (lambda v: v.term) if grouping == "term" else (lambda v: v.attrs)
    labels: dict = {}
    for j, v in enumerate(workload.views):
        labels.setdefault(key(v), []).append(j)
    return [np.array(js) for js in labels.values()]


def _group(implicit: ImplicitWorkload, views: np.ndarray, strategy: KronStrategy | LaplaceStrategy) -> HDMMGroup:
    return HDMMGroup(views, strategy, float(strategy.term_variances(implicit.subset(views)).sum()))


def noise_cost(strategy: KronStrategy | LaplaceStrategy) -> float:
    """The cost a group's noise is calibrated to: the stated one (privacy cost 1, or the L1
    sensitivity Σ θ_b), or the one recomputed from the operator measure applies when that is larger
    (a stored strategy within the verification tolerance of cost 1 is never released above it)."""
    if isinstance(strategy, LaplaceStrategy):
        return max(strategy.sensitivity(), strategy.applied_sensitivity())
    return max(1.0, strategy.applied_cost())


def _allocation(errors: list[float], strategies, budget: Budget | PureBudget) -> Allocation | LaplaceAllocation:
    costs = [noise_cost(s) for s in strategies]
    if isinstance(budget, PureBudget):
        return laplace_allocation(errors, costs, budget.epsilon)
    return allocate(errors, budget.beta, costs)


def hdmm_privacy_cost(plan: "HDMMPlan") -> float:
    """The plan's privacy cost recomputed from the operators measure applies and the noise it adds:
    Σ_g applied cost_g / σ_g² (β, add-remove) for Gaussian noise, Σ_g applied sensitivity_g / b_g
    (ε) for Laplace noise."""
    alloc = plan.allocation
    if plan.noise == "laplace":
        return float(sum(g.strategy.applied_sensitivity() / b for g, b in zip(plan.groups, alloc.scales)))
    return float(sum(g.strategy.applied_cost() / s2 for g, s2 in zip(plan.groups, alloc.sigma2) if np.isfinite(s2)))


def check_hdmm_budget(plan: "HDMMPlan") -> float:
    """Refuse (InputError) a plan whose recomputed privacy cost exceeds its budget; return the cost.
    No tolerance: the allocation leaves a relative 1e-10 of the budget unspent for rounding."""
    cost = hdmm_privacy_cost(plan)
    limit = plan.budget.epsilon if plan.noise == "laplace" else plan.budget.beta
    if not cost <= limit:
        what = "epsilon" if plan.noise == "laplace" else "beta"
        raise InputError("hdmm plan privacy cost", cost, f"exceeds its budget {what} {limit!r}: the plan file is stale or edited; refusing to measure")
    return cost


def plan_hdmm(
    schema: Schema | str,
    workload: Workload | str,
    budget: Budget | PureBudget,
    *,
    seed: int = 0,
    restarts: int = DEFAULT_RESTARTS,
    optimizers: tuple[str, ...] = OPTIMIZERS,
    grouping: Literal["term", "view"] = "term",
    explicit_cells: int = DEFAULT_EXPLICIT_CELLS,
    target_gap: float = DEFAULT_TARGET_GAP,
    all_numeric: bool = False,
) -> HDMMPlan:
    """Optimise HDMM strategies for ``workload`` and keep the one with the lowest expected error.

    ``restarts`` OPT_⊗ runs per Kronecker strategy (the first from the identity, the others from
    factors drawn with ``seed``); ``optimizers`` restricts the candidates (those not applicable to
    the workload are skipped); ``target_gap`` is the certified gap of every OPT_0 solve;
    ``all_numeric`` is as in :func:`querysmasher.planning.make_plan`. A :class:`~.laplace.PureBudget`
    selects Laplace noise and the L1 optimisers of :mod:`.optimize_laplace` (p-Identity factors, random starts).
    """
    t0 = time.perf_counter()
    # The strategies are normalised to unit cost under add-remove; under replace one record moves
    # between two cells and the same strategy can cost up to 4x. Refuse rather than under-report.
    if isinstance(budget, Budget) and budget.neighbours != "add-remove":
        raise InputError("neighbours", budget.neighbours, "hdmm plans are accounted for add-remove neighbours only")
    if isinstance(schema, str):
        schema = parse_schema(schema, all_numeric=all_numeric)
    if isinstance(workload, str):
        workload = parse_workload(workload, schema)
    unknown = sorted(set(optimizers) - set(OPTIMIZERS))
    if unknown:
        raise InputError("hdmm optimizer", unknown[0], f"must be one of {', '.join(OPTIMIZERS)}")
    if grouping not in ("term", "view"):
        raise InputError("hdmm grouping", grouping, "must be 'term' or 'view'")
    implicit = ImplicitWorkload.from_workload(workload)
    everything = np.arange(len(implicit))
    rng = np.random.default_rng(seed)
    solve = Opt0Cache(target_gap)
    options = {"rng": rng, "restarts": restarts, "solve": solve}
    laplace = isinstance(budget, PureBudget)
    kron_opt, plus_opt = (l1.opt_kron, l1.opt_plus) if laplace else (opt_kron, opt_plus)
    candidates: dict[str, tuple[HDMMGroup, ...]] = {}
    notes: list[str] = []
    if "opt0" in optimizers:
        if implicit.cells <= explicit_cells:
            merged = implicit.merged()
            if laplace:
                strategy = LaplaceStrategy.single((l1.p_identity(l1.opt_0(merged.dense_gram(), rng=rng)),))
            else:
                strategy = KronStrategy.single((solve(merged.dense_gram()),))
            candidates["opt0"] = (HDMMGroup(everything, strategy, float(strategy.term_variances(merged).sum())),)
        else:
            notes.append(f"opt0 skipped: the domain has {_cells_text(implicit.cells)} cells, above explicit_cells={explicit_cells}")
    if "kron" in optimizers:
        candidates["kron"] = (_group(implicit, everything, kron_opt(implicit, **options)),)
    groups = _groups(workload, grouping)
    if "plus" in optimizers:
        if len(groups) > 1:
            candidates["plus"] = tuple(_group(implicit, g, s) for g, s in zip(groups, plus_opt(implicit, groups, **options)))
        else:
            notes.append(f"plus skipped: grouping by {grouping} gives one group (the same strategy as kron)")
    if "marginals" in optimizers:
        if marginals_applicable(implicit):
            strategy = l1.opt_marginals(implicit, rng=rng, restarts=restarts) if laplace else opt_marginals(implicit)
            candidates["marginals"] = (_group(implicit, everything, strategy),)
        else:
            notes.append("marginals skipped: the workload has non-marginal factors")
    if not candidates:
        raise InputError("hdmm optimizer", ",".join(optimizers), f"none applies to this workload and schema ({'; '.join(notes)})")
    variances = {k: _allocation([g.error for g in gs], [g.strategy for g in gs], budget).total_variance for k, gs in candidates.items()}
    best = min(variances, key=variances.get)
    return HDMMPlan(schema, workload, budget, best, candidates[best], variances, seed, restarts, time.perf_counter() - t0, notes)


def _cells_text(cells: int) -> str:
    # domains of 10^40 cells and more do not fit a float: print the exponent instead
    return f"{cells:,}" if cells < 10**15 else f"~1e{len(str(cells)) - 1}"


@dataclass(frozen=True, eq=False)
class HDMMMeasurements:
    """Noisy strategy answers: per group, one vector per Kronecker block."""

    y: tuple[tuple[np.ndarray, ...], ...]


def _check_domain(plan: HDMMPlan, max_domain_cells: int) -> int:
    cells = plan.schema.domain_cells()
    if cells > max_domain_cells:
        raise InputError(
            "domain", f"{_cells_text(cells)} cells",
            f"HDMM measures and reconstructs the full data vector, which exceeds max_domain_cells={max_domain_cells:g}; "
            "its expected error is still available (plan.rmse)",
        )
    return cells


def hdmm_measure(plan: HDMMPlan, x_full: np.ndarray, rng=None, *, max_domain_cells: int = MAX_DOMAIN_CELLS) -> HDMMMeasurements:
    """Answer every group's strategy on the full data vector (cells row-major in schema order) with
    Gaussian noise of variance σ_g^2, or Laplace noise of scale b_g = ||A_g||_1 / ε_g, spending the
    plan's budget. ``rng``: a :class:`querysmasher.noise.NoiseSource`, a numpy generator
    (experiments), or None for OpenDP's samplers with OS entropy (releases)."""
    cells = _check_domain(plan, max_domain_cells)
    check_hdmm_budget(plan)
    x = np.asarray(x_full, dtype=float)
    if x.shape != (cells,):
        raise InputError("data vector", f"shape {x.shape}", f"must have shape ({cells},): one count per cell of the domain")
    noise = make_noise() if rng is None else as_noise(rng)
    if plan.noise == "laplace":
        alloc = plan.allocation
        return HDMMMeasurements(tuple(
            tuple(noise.add_laplace(y, b, noise_cost(g.strategy)) for y in g.strategy.answer(x))
            for g, b in zip(plan.groups, alloc.scales)
        ))
    sigma2 = plan.allocation.sigma2
    return HDMMMeasurements(tuple(g.strategy.measure(x, math.sqrt(s2), noise) for g, s2 in zip(plan.groups, sigma2)))


def hdmm_reconstruct(plan: HDMMPlan, meas: HDMMMeasurements, *, max_domain_cells: int = MAX_DOMAIN_CELLS) -> list[np.ndarray]:
    """Workload answers, one array per workload view (in ``plan.workload.views`` order): each group's
    least-squares estimate x̂_g = X_g^+ A_g^T y_g answers the views of that group (HDMM's OPT_+ error
    model, which the plan predicts exactly; a joint estimate over all groups could only lower it)."""
    _check_domain(plan, max_domain_cells)
    sizes = plan.schema.sizes
    answers: list[np.ndarray | None] = [None] * len(plan.workload.views)
    for g, y in zip(plan.groups, meas.y):
        xhat = g.strategy.estimate(y).reshape(sizes)
        for j in g.views:
            v = plan.workload.views[j]
            marg = xhat.sum(axis=tuple(i for i in range(len(sizes)) if i not in v.attrs)).ravel()
            view_sizes = tuple(sizes[i] for i in v.attrs)
            answers[j] = kron_apply([query_matrix_1d(f, n) for f, n in zip(v.factors, view_sizes)], marg, view_sizes)
    return answers


class HDMMPlanner:
    """Method ``hdmm``: a whole-workload planner (:mod:`querysmasher.methods`) over
    :func:`plan_hdmm`, whose keyword arguments (but ``all_numeric``) are its options."""

    name = "hdmm"
    objectives = ("sum",)
    noises = ("gaussian", "laplace")
    # the strategies are normalised to unit cost under add-remove; under replace the same strategy
    # can cost up to 4x
    neighbours = ("add-remove",)
    plan_kind = "hdmm-plan"  # its own plan record and files (querysmasher.stages), answers without per-view tables

    def __init__(self, **options):
        import inspect

        known = [p.name for p in inspect.signature(plan_hdmm).parameters.values() if p.kind is p.KEYWORD_ONLY and p.name != "all_numeric"]
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise TypeError(f"hdmm takes the options {', '.join(known)}, not {', '.join(unknown)}")
        self.options = dict(options)

    @staticmethod
    def unsupported(workload) -> str:
        """Why HDMM cannot plan ``workload`` ("" when it can): its implicit workloads are Kronecker
        products, so non-product families are not implemented (the paper's NI)."""
        try:
            ImplicitWorkload.from_workload(workload)
        except InputError as exc:
            return f"{exc.value} {exc.reason}"
        return ""

    @staticmethod
    def measurable(schema) -> bool:
        """Measure and reconstruct need the full data vector: at most ``MAX_DOMAIN_CELLS`` cells."""
        return schema.domain_cells() <= MAX_DOMAIN_CELLS

    def plan(self, schema, workload, budget, *, objective: str = "sum") -> HDMMPlan:
        return plan_hdmm(schema, workload, budget, **self.options)
