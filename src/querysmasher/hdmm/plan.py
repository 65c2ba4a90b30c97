r"""HDMM: choose a strategy for the whole workload, predict its error, and (on small domains) measure
and reconstruct, with Gaussian noise (a :class:`~querysmasher.accounting.Budget`, zCDP) or, as the
HDMM paper defines it, Laplace noise (a :class:`~.laplace.PureBudget`, pure ε-DP; optimisers of
:mod:`.optimize_laplace`).

:func:`plan_hdmm` optimises every requested strategy *template* that applies to the workload and
keeps the one with the lowest expected error; the plan records the winner and every candidate's
error. The templates are those of HDMM's paper (§6, §8) and code:

* ``kron`` — OPT_⊗, one Kronecker product for the whole workload (the paper's Table 4 column for
  prefix and range workloads);
* ``plus-view`` — OPT_+ with one Kronecker product per workload view (attribute set): the paper's
  Table 2 figures for hybrid workloads, where HDMM's reported result is the better of OPT_⊗ and this;
* ``plus-term`` — OPT_+ with one Kronecker product per ``+``-separated term of the spec, when there
  are at least two (a term of the grammar spans one view only when it is the d-way term, so the two
  groupings never coincide);
* ``marginal`` — OPT_M, weighted marginals, for marginal workloads (Table 4's marginal column);
* ``explicit`` — OPT_0 on the explicit W^T W, when the domain has at most ``explicit_cells`` cells.

A template that gives the same strategy as another (OPT_+ with one group is OPT_⊗) or does not apply
is skipped with a note. Restarts (``restarts``, default 3) go where a template has a random start:
Gaussian ``kron``/``plus-*`` run from the identity and ``restarts`` - 1 random factors (a group of
one view is a product of independent convex OPT_0 problems and runs once); Laplace ``kron``/``plus-*``
run from ``restarts`` random p-Identity starts (a group of one view: one OPT_0 per attribute from
3 x ``restarts`` starts, the same number), Laplace ``marginal`` from three fixed and
``restarts`` - 1 random weights, Laplace ``explicit`` from max(8, ``restarts``) random starts.
Gaussian ``explicit`` and ``marginal`` are solved exactly (certified SDP, closed form). Each template
draws from its own generator (``seed``, template), so its candidate does not depend on which other
templates run.

A plan is a union of groups, each a strategy at privacy cost 1 with error E_g (the weighted sum of
variances of the workload views answered from it). Noise variances σ_g^2 = Σ sqrt(E) / (β sqrt(E_g))
spend exactly β (several groups only come from OPT_+, whose factors have unit diagonals, so the
diagonal of Σ_g X_g / σ_g^2 is constant) and give a total variance (Σ_g sqrt(E_g))^2 / β
(:func:`querysmasher.allocation.allocate`). Under Laplace noise each group is a strategy of L1
sensitivity 1 with error E_g, ε_g ∝ E_g^(1/3) and the total variance is 2 (Σ_g E_g^(1/3))^3 / ε^2
(:func:`.laplace.laplace_allocation`).

The noise is calibrated to each group's cost recomputed from the operator measure applies
(:func:`noise_cost`: never below the stated cost 1, or sensitivity), and measure re-checks the
plan's total cost against its budget with no tolerance (:func:`querysmasher.measure.check_budget`
on :func:`.release.hdmm_measurements`), as for every plan kind: a strategy loaded from a file within the
verification tolerance of cost 1 is never released above the budget.

Measure and reconstruct work on the full data vector, HDMM's real limit: above ``max_domain_cells``
they raise an InputError, while the expected error is still computed implicitly.

>>> from querysmasher.accounting import Budget
>>> p = plan_hdmm("synthetic:n=10,d=8", "marginal:1,2", Budget.from_beta(1.0))
>>> p.template, round(p.rmse, 2), sorted(p.candidates)
('marginal', 4.8, ['kron', 'marginal', 'plus-view'])
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from ..accounting import Budget
from ..allocation import Allocation, PredictedError, allocate, rmse
from ..errors import InputError
from ..options import Option, check_options
from ..schema import Schema, parse_schema
from ..threads import at_most
from ..workload import Workload, parse_workload
from . import optimize_laplace as l1
from .implicit import ImplicitWorkload, KronStrategy
from .laplace import LaplaceAllocation, LaplaceStrategy, PureBudget, laplace_allocation
from .optimize import DEFAULT_TARGET_GAP, Opt0Cache, marginals_applicable, opt_kron, opt_marginals, opt_plus

__all__ = [
    "HDMMGroup",
    "HDMMPlan",
    "plan_hdmm",
    "TEMPLATES",
    "DEFAULT_TEMPLATES",
    "TEMPLATE_TIE_RTOL",
    "best_template",
    "DEFAULT_RESTARTS",
    "DEFAULT_EXPLICIT_CELLS",
    "check_domain",
    "noise_cost",
    "OPTIONS",
    "MAX_RESTARTS",
]

TEMPLATES: tuple[str, ...] = ("kron", "plus-view", "plus-term", "marginal", "explicit")
DEFAULT_TEMPLATES = TEMPLATES  # the strongest baseline: the best of every template that applies
TEMPLATE_TIE_RTOL = 1e-12  # templates whose errors differ by less than this (relative) are tied
DEFAULT_RESTARTS = 3  # Table 2 and 4 figures are reached with 3; 10 gives the same to 6 digits (measured 2026-12-02)
DEFAULT_EXPLICIT_CELLS = 256  # OPT_0 over the full domain costs up to ~cells^4 flops per Newton step
MAX_DOMAIN_CELLS = 10**7
# Restarts have no time limit (each is a whole OPT_⊗ run per product, minutes on Adult): a cap keeps a
# typo such as 1e9 from running for ever; far above where more restarts stop helping (10, above).
MAX_RESTARTS = 100
OPTIONS = (
    Option(
        "templates",
        "choices",
        "strategy templates to try: OPT_kron, OPT_+ by workload view or by term, OPT_M "
        "(marginal workloads), OPT_0 (small domains); default all",
        choices=TEMPLATES,
    ),
    Option(
        "restarts",
        "int",
        f"runs of each template with a random start (default {DEFAULT_RESTARTS})",
        low=1,
        high=MAX_RESTARTS,
    ),
    Option("seed", "int", "seed of the random starts (default 0)", low=0),
    Option("explicit_cells", "int", f"largest full domain OPT_0 runs on (default {DEFAULT_EXPLICIT_CELLS})", low=0),
    Option(
        "target_gap",
        "number",
        f"certified gap of every OPT_0 solve (default {DEFAULT_TARGET_GAP:g})",
        low=0,
        high=1,
        open_low=True,
        open_high=True,
    ),
)


@dataclass(frozen=True, eq=False)
class HDMMGroup:
    """A strategy at privacy cost 1 (Gaussian) or L1 sensitivity 1 (Laplace) and the workload views answered from it."""

    views: np.ndarray  # indices into workload.views
    strategy: KronStrategy | LaplaceStrategy
    error: float  # Σ over those views of w_v tr(G_v X^+) (times ||A||_1^2 under Laplace): the group's error at cost 1


@dataclass(frozen=True)
class Candidate:
    """One template's result: its total variance at the plan's budget and its planning time."""

    total_variance: float
    seconds: float


@dataclass(eq=False)
class HDMMPlan(PredictedError):
    """The winning HDMM strategy, its noise scales and expected error, and every candidate's error."""

    file_kind: ClassVar[str] = "hdmm-plan"  # its kind in querysmasher.plankinds (files, release stages)
    method: ClassVar[str] = "hdmm"
    schema: Schema
    workload: Workload
    budget: Budget | PureBudget
    template: str  # which template won (the lowest total variance)
    groups: tuple[HDMMGroup, ...]
    candidates: dict[str, Candidate]  # every template that ran, the winner included
    templates: tuple[str, ...]  # the templates requested
    seed: int
    restarts: int
    seconds: float
    notes: list[str] = field(default_factory=list)  # why a requested template did not run

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
            "template": self.template,
            "candidates": {
                k: {
                    "total_variance": c.total_variance,
                    "rmse": rmse(c.total_variance, self.queries),
                    "seconds": c.seconds,
                }
                for k, c in self.candidates.items()
            },
            "templates": list(self.templates),
            "groups": len(self.groups),
            "seed": self.seed,
            "restarts": self.restarts,
            "notes": list(self.notes),
        }


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


def _group(implicit: ImplicitWorkload, views: np.ndarray, strategy: KronStrategy | LaplaceStrategy) -> HDMMGroup:
    return HDMMGroup(views, strategy, float(strategy.term_variances(implicit.subset(views)).sum()))


def _partition(workload: Workload, by: str) -> list[np.ndarray]:
    """The workload's views grouped by their attribute set (``view``) or by their spec term (``term``)."""
    key = (lambda v: v.attrs) if by == "view" else (lambda v: v.term)
    labels: dict = {}
    for j, v in enumerate(workload.views):
        labels.setdefault(key(v), []).append(j)
    return [np.array(js) for js in labels.values()]


class _NotApplicable(Exception):
    """A template that does not apply to the workload, or would repeat another's strategy (the reason)."""


@dataclass
class _Search:
    """What every template builder shares: the workload, the noise, the options and the OPT_0 caches."""

    workload: Workload
    implicit: ImplicitWorkload
    laplace: bool
    seed: int
    restarts: int
    explicit_cells: int
    solve: Opt0Cache  # Gaussian OPT_0 solutions by content, shared by every template
    memo: dict = field(default_factory=dict)  # Laplace OPT_0 factors of one-view groups, likewise

    def options(self, template: str) -> dict:
        """Optimiser options, with the template's own generator (its draws do not depend on the others')."""
        rng = np.random.default_rng([self.seed, TEMPLATES.index(template)])
        return {
            "rng": rng,
            "restarts": self.restarts,
            **({"memo": self.memo} if self.laplace else {"solve": self.solve}),
        }

    @property
    def everything(self) -> np.ndarray:
        return np.arange(len(self.implicit))


def _kron(s: _Search) -> tuple[HDMMGroup, ...]:
    """OPT_⊗: one Kronecker product for every view."""
    strategy = (l1.opt_kron if s.laplace else opt_kron)(s.implicit, **s.options("kron"))
    return (_group(s.implicit, s.everything, strategy),)


def _plus(s: _Search, by: str) -> tuple[HDMMGroup, ...]:
    """OPT_+: one Kronecker product per group of views (by attribute set or by spec term)."""
    groups = _partition(s.workload, by)
    if len(groups) == 1:
        raise _NotApplicable(f"the workload has one {by}, so OPT_+ is OPT_⊗ (kron)")
    strategies = (l1.opt_plus if s.laplace else opt_plus)(s.implicit, groups, **s.options(f"plus-{by}"))
    return tuple(_group(s.implicit, g, st) for g, st in zip(groups, strategies))


def _marginal(s: _Search) -> tuple[HDMMGroup, ...]:
    """OPT_M: weighted marginals (closed form under Gaussian noise, L-BFGS-B under Laplace noise)."""
    if not marginals_applicable(s.implicit):
        raise _NotApplicable("the workload has non-marginal factors")
    if s.laplace:
        opts = s.options("marginal")
        strategy = l1.opt_marginals(s.implicit, rng=opts["rng"], restarts=opts["restarts"])
    else:
        strategy = opt_marginals(s.implicit)
    return (_group(s.implicit, s.everything, strategy),)


def _explicit(s: _Search) -> tuple[HDMMGroup, ...]:
    """OPT_0 on the explicit W^T W over the full domain (one attribute of ``cells`` values)."""
    if s.implicit.cells > s.explicit_cells:
        raise _NotApplicable(
            f"the domain has {_cells_text(s.implicit.cells)} cells, above explicit_cells={s.explicit_cells}"
        )
    merged = s.implicit.merged()
    if s.laplace:
        starts = max(l1.DEFAULT_STARTS, s.restarts)
        strategy = LaplaceStrategy.single(
            (l1.p_identity(l1.opt_0(merged.dense_gram(), rng=s.options("explicit")["rng"], restarts=starts)),)
        )
    else:
        strategy = KronStrategy.single((s.solve(merged.dense_gram()),))
    return (HDMMGroup(s.everything, strategy, float(strategy.term_variances(merged).sum())),)


_BUILDERS: dict[str, Callable[[_Search], tuple[HDMMGroup, ...]]] = {
    "kron": _kron,
    "plus-view": lambda s: _plus(s, "view"),
    "plus-term": lambda s: _plus(s, "term"),
    "marginal": _marginal,
    "explicit": _explicit,
}


def best_template(candidates: dict[str, Candidate]) -> str:
    """The winning template: the lowest total variance, where ties to rounding (``TEMPLATE_TIE_RTOL``)
    go to the first in TEMPLATES order (the marginal and explicit strategies of marginal:1,2 on
    [4]^3 differ in the 16th digit, which way depending on the per-view solver's arithmetic).

    >>> best_template(
    ...     {"explicit": Candidate(1.0, 0.0), "marginal": Candidate(1.0 + 1e-15, 0.0), "kron": Candidate(2.0, 0.0)}
    ... )
    'marginal'
    """
    low = min(c.total_variance for c in candidates.values())
    order = sorted(candidates, key=lambda k: TEMPLATES.index(k) if k in TEMPLATES else len(TEMPLATES))
    return next(k for k in order if candidates[k].total_variance <= low * (1 + TEMPLATE_TIE_RTOL))


def plan_hdmm(
    schema: Schema | str,
    workload: Workload | str,
    budget: Budget | PureBudget,
    *,
    templates: Sequence[str] = DEFAULT_TEMPLATES,
    restarts: int = DEFAULT_RESTARTS,
    seed: int = 0,
    explicit_cells: int = DEFAULT_EXPLICIT_CELLS,
    target_gap: float = DEFAULT_TARGET_GAP,
    all_numeric: bool = False,
) -> HDMMPlan:
    """Optimise the HDMM strategy ``templates`` (default: all of :data:`TEMPLATES`) for ``workload``
    and keep the one with the lowest expected error.

    ``restarts`` (default 3, at most :data:`MAX_RESTARTS`) runs of OPT_⊗ per Kronecker product, the
    first from the identity, the others from random factors drawn with ``seed``; ``explicit_cells``
    (default 256) the largest domain on which ``explicit`` runs; ``target_gap`` the certified gap of
    every OPT_0 solve (the ranges: :data:`OPTIONS`); ``all_numeric`` as in
    :func:`querysmasher.planning.make_plan`. Templates that do not apply are skipped with a note (an
    InputError when none applies). A :class:`~.laplace.PureBudget` selects Laplace noise and the L1
    optimisers of :mod:`.optimize_laplace` (p-Identity factors, random starts).
    """
    t0 = time.perf_counter()
    opts = check_options(
        "hdmm",
        OPTIONS,
        {
            "templates": templates,
            "restarts": restarts,
            "seed": seed,
            "explicit_cells": explicit_cells,
            "target_gap": target_gap,
        },
    )
    chosen = tuple(t for t in TEMPLATES if t in opts["templates"])
    # The strategies are normalised to unit cost under add-remove; under replace one record moves
    # between two cells and the same strategy can cost up to 4x. Refuse rather than under-report.
    if isinstance(budget, Budget) and budget.neighbours != "add-remove":
        raise InputError("neighbours", budget.neighbours, "hdmm plans are accounted for add-remove neighbours only")
    if isinstance(schema, str):
        schema = parse_schema(schema, all_numeric=all_numeric)
    if isinstance(workload, str):
        workload = parse_workload(workload, schema)
    implicit = ImplicitWorkload.from_workload(workload)
    search = _Search(
        workload,
        implicit,
        isinstance(budget, PureBudget),
        opts["seed"],
        opts["restarts"],
        opts["explicit_cells"],
        Opt0Cache(opts["target_gap"]),
    )
    results: dict[str, tuple[HDMMGroup, ...]] = {}
    candidates: dict[str, Candidate] = {}
    notes: list[str] = []
    # The search is thousands of small eigendecompositions (factors of at most a few hundred values;
    # solve_dense re-enables threads for large ones): BLAS threads only cost there, most when other
    # jobs share the cores (Adult hybrid:1 OPT_⊗ 29.5 s with two threads, 17.5 s with one, on 2 busy cores).
    with at_most(1):
        for name in chosen:
            t = time.perf_counter()
            try:
                results[name] = _BUILDERS[name](search)
            except _NotApplicable as why:
                notes.append(f"{name} skipped: {why}")
                continue
            variance = _allocation(
                [g.error for g in results[name]], [g.strategy for g in results[name]], budget
            ).total_variance
            candidates[name] = Candidate(variance, time.perf_counter() - t)
    if not candidates:
        raise InputError(
            "hdmm templates", ",".join(chosen), f"none applies to this workload and schema ({'; '.join(notes)})"
        )
    best = best_template(candidates)
    return HDMMPlan(
        schema,
        workload,
        budget,
        best,
        results[best],
        candidates,
        chosen,
        opts["seed"],
        opts["restarts"],
        time.perf_counter() - t0,
        notes,
    )


def _cells_text(cells: int) -> str:
    # domains of 10^40 cells and more do not fit a float: print the exponent instead
    return f"{cells:,}" if cells < 10**15 else f"~1e{len(str(cells)) - 1}"


FULL_DOMAIN_BYTES = 8 * 6  # per cell of the full data vector: the counts, the strategy's answers, the estimate, copies


def kron_workload_mb(workload, copies: float) -> float:
    """MB of ``copies`` of a workload held as Kronecker terms: per view, n x n per attribute."""
    return copies * len(workload.views) * sum(8.0 * n * n for n in workload.schema.sizes) / 2**20


def full_domain_mb(workload) -> float:
    """MB of the full data vector and what is computed over it (domains up to ``MAX_DOMAIN_CELLS``)."""
    return FULL_DOMAIN_BYTES * min(workload.schema.domain_cells(), MAX_DOMAIN_CELLS) / 2**20


def check_domain(plan: HDMMPlan, max_domain_cells: int) -> int:
    """The domain's cell count, or the one-line InputError when the full data vector would exceed
    ``max_domain_cells``."""
    cells = plan.schema.domain_cells()
    if cells > max_domain_cells:
        raise InputError(
            "domain",
            f"{_cells_text(cells)} cells",
            "HDMM measures and reconstructs the full data vector, "
            f"which exceeds max_domain_cells={max_domain_cells:g}; "
            "its expected error is still available (plan.rmse)",
        )
    return cells


class HDMMPlanner:
    """Method ``hdmm``: a whole-workload planner (:mod:`querysmasher.methods`) over
    :func:`plan_hdmm`, whose keyword arguments (but ``all_numeric``) are its options (:data:`OPTIONS`)."""

    name = "hdmm"
    objectives = ("sum",)
    noises = ("gaussian", "laplace")
    # the strategies are normalised to unit cost under add-remove; under replace the same strategy
    # can cost up to 4x
    neighbours = ("add-remove",)
    plan_kind = "hdmm-plan"  # its own plan record and files (querysmasher.stages), answers without per-view tables

    option_specs = OPTIONS

    def __init__(self, **options):
        self.options = check_options(self.name, self.option_specs, options)

    @staticmethod
    def resources(workload, stage: str) -> dict:
        """What a job of ``stage`` holds beyond the workflow's own model
        (:mod:`querysmasher.pipeline.resources`): the workload as Kronecker terms (per view, an
        n x n matrix per attribute; allocate peaked at 3.1-3.2 x that above the process: Table 4's
        [50]^40 prefix:1,2 2.0 GB, Loans hybrid:1,2,3 0.43 GB) and, to measure and reconstruct, the
        full data vector (:func:`full_domain_mb`)."""
        if stage == "allocate":
            return {"mem_mb": kron_workload_mb(workload, 4), "seconds": 0.0}
        return {"mem_mb": full_domain_mb(workload) + kron_workload_mb(workload, 2), "seconds": 0.0}

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
