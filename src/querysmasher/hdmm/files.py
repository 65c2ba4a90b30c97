"""HDMM plan files: the stored strategy and template search, checked and verified on load.

An HDMM plan file (format ``HDMM_PLAN_FORMAT``) stores the noise (``gaussian`` with its zCDP budget,
or ``laplace`` with its pure ε), the template search (the templates requested, the winner, every
candidate's total variance and planning time) and the winning strategy itself: per group, the
workload views it answers, its distinct per-attribute factors (Gram factors for Gaussian noise,
explicit rows for Laplace noise), block index and block weights. Loading never re-runs the (randomised) optimisers: it
rebuilds each strategy, checks that it is a valid strategy at privacy cost 1 (Gaussian: PSD factors
with max diagonal 1, unit diagonals and orthogonal blocks in a union; Laplace: non-negative factors
whose columns all have L1 norm 1 and block weights summing to 1, i.e. L1 sensitivity 1), recomputes every
group's expected error from the stored strategy and refuses the file
unless they equal the recorded ones (relative ``VERIFY_RTOL``: the recomputation runs eigen-
decompositions, whose rounding differs across BLAS builds far below that; a strategy accepted
within that tolerance above cost 1 is released with noise calibrated to its recomputed cost,
:func:`.plan.noise_cost`, never above the budget); the winner must be a known template whose
recorded candidate error is the plan's and no lower than any other candidate's. Every stored field is read through
:mod:`querysmasher.h5read`, its type, shape and range checked against the schema before it is
used. Files of earlier
formats (1: only the optimiser's seed; 2: the strategy under the old optimiser names, without the
template search) are refused in one line. Measuring and reconstructing live in
:mod:`querysmasher.hdmm.release`, so planning never depends on the release code.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from .. import h5read as r
from ..errors import InputError
from ..io import atomic_h5, new_group, open_h5, put, put_json
from ..planheader import put_plan_header, read_plan_header
from ..schema import Schema, check_attribute_sizes
from .implicit import ImplicitWorkload, KronStrategy
from .laplace import LaplaceStrategy
from .plan import TEMPLATE_TIE_RTOL, TEMPLATES, Candidate, HDMMGroup, HDMMPlan

__all__ = ["HDMM_PLAN_FORMAT", "save_hdmm_plan", "load_hdmm_plan"]

HDMM_PLAN_FORMAT = 3  # 1: seed only, re-optimised on load; 2: the strategy itself; 3: and the template search
VERIFY_RTOL = 1e-7
_PSD_RTOL = 1e-9


def _put_strategy(g: h5py.Group, s: KronStrategy | LaplaceStrategy) -> None:
    put(g, "sizes", np.asarray(s.sizes, dtype=np.int64))  # the schema's, or (cells,) for explicit OPT_0
    put(g, "index", s.index)
    put(g, "weights", s.weights)
    rows = isinstance(s, LaplaceStrategy)
    g.attrs["factors"] = "rows" if rows else "gram"
    mats = new_group(g, "mats")
    for i, fs in enumerate(s.factors if rows else s.mats):
        a = new_group(mats, str(i))
        for h, m in enumerate(fs):
            put(a, str(h), m)


def _get_strategy(g: h5py.Group, noise: str, schema: Schema) -> KronStrategy | LaplaceStrategy:
    """The stored strategy, every field checked against the schema before it is read: sizes (the
    schema's, or the full domain for explicit OPT_0), one factor list per attribute, factor shapes,
    finite entries, a block index into the factor lists, positive (Laplace: non-negative) weights."""
    laplace = noise == "laplace"
    r.text(g, "factors", choices=("rows",) if laplace else ("gram",))
    sizes = tuple(int(n) for n in r.array(g, "sizes", kind="i", ndim=1, lo=1))
    cells = schema.domain_cells()
    if sizes != schema.sizes and sizes != (cells,):
        raise r.bad(
            g, "sizes", list(sizes), f"must be the schema's sizes {list(schema.sizes)} or the full domain [{cells}]"
        )
    mats = r.child(g, "mats", group=True)
    if len(r.indexed_members(mats, "one factor list per attribute")) != len(sizes):
        raise r.bad(mats, "", len(r.members(mats)), f"must hold one factor list per attribute ({len(sizes)})")
    factors = []
    for i, n in enumerate(sizes):
        a = r.child(mats, str(i), group=True)
        factors.append(
            tuple(
                r.array(a, h, kind="f", shape=(None, n) if laplace else (n, n)) for h in r.indexed_members(a, "factors")
            )
        )
    index = r.array(g, "index", kind="i", shape=(None, len(sizes)), lo=0)
    for i, fs in enumerate(factors):
        if index.size and index[:, i].max() >= len(fs):
            raise r.bad(g, "index", int(index[:, i].max()), f"attribute {i} has {len(fs)} factors")
    weights = r.array(g, "weights", kind="f", shape=(index.shape[0],), lo=0.0, positive=not laplace)
    if not len(weights):
        raise r.bad(g, "weights", [], "a strategy has at least one block")
    try:
        return (
            LaplaceStrategy(sizes, tuple(factors), index, weights)
            if laplace
            else KronStrategy(sizes, tuple(factors), index, weights)
        )
    except ValueError as exc:
        raise r.bad(g, "mats", g.name, f"is not a valid strategy: {exc}") from None


def save_hdmm_plan(plan: HDMMPlan, path: str | Path) -> None:
    with atomic_h5(path, kind="hdmm-plan") as f:
        f.attrs["hdmm_plan_format"] = HDMM_PLAN_FORMAT
        put_plan_header(f, plan)
        f.attrs["noise"] = plan.noise
        f.attrs["seed"] = plan.seed
        f.attrs["restarts"] = plan.restarts
        f.attrs["template"] = plan.template
        f.attrs["seconds"] = plan.seconds
        put_json(f, "templates", list(plan.templates))
        put_json(
            f,
            "candidates",
            {k: {"total_variance": c.total_variance, "seconds": c.seconds} for k, c in plan.candidates.items()},
        )
        f.attrs["total_variance"] = plan.total_variance
        groups = new_group(f, "groups")
        for gi, grp in enumerate(plan.groups):
            g = new_group(groups, str(gi))
            g.attrs["error"] = grp.error
            put(g, "views", np.asarray(grp.views, dtype=np.int64))
            _put_strategy(new_group(g, "strategy"), grp.strategy)


def _refuse(path, reason: str) -> InputError:
    return InputError("hdmm plan file", str(path), reason)


def _verified_group(
    path,
    implicit: ImplicitWorkload,
    views: np.ndarray,
    strategy: KronStrategy | LaplaceStrategy,
    several: bool,
    recorded: float,
) -> HDMMGroup:
    """The group, after checking the stored strategy's privacy cost and recomputing its error."""
    laplace = isinstance(strategy, LaplaceStrategy)
    for i, fs in enumerate(() if laplace else strategy.mats):
        for m in fs:
            w = np.linalg.eigvalsh((m + m.T) / 2)
            if not np.allclose(m, m.T, rtol=0, atol=_PSD_RTOL) or w.min() < -_PSD_RTOL * max(w.max(), 1.0):
                raise _refuse(path, f"attribute {i} has a strategy factor that is not symmetric positive semidefinite")
            if several and not np.allclose(np.diag(m), 1.0, rtol=0, atol=_PSD_RTOL):
                raise _refuse(path, f"attribute {i} has a factor without unit diagonal in a plan of several groups")
    cost = strategy.sensitivity() if laplace else strategy.privacy_cost()
    if not np.isclose(cost, 1.0, rtol=VERIFY_RTOL, atol=0):
        raise _refuse(path, f"a stored strategy has {'L1 sensitivity' if laplace else 'privacy cost'} {cost!r}, not 1")
    if len(views) == 0 or views.min() < 0 or views.max() >= len(implicit):
        raise _refuse(path, "a group answers workload views that do not exist")
    if strategy.sizes == implicit.sizes:
        answered = implicit.subset(views)
    elif strategy.sizes == (implicit.cells,) and len(views) == len(implicit):  # explicit OPT_0 over the full domain
        answered = implicit.merged()
    else:
        raise _refuse(
            path, f"a stored strategy has attribute sizes {strategy.sizes}, not the schema's {implicit.sizes}"
        )
    error = float(strategy.term_variances(answered).sum())
    if not np.isclose(error, recorded, rtol=VERIFY_RTOL, atol=0):
        raise _refuse(path, f"a stored strategy's expected error {error!r} differs from the recorded {recorded!r}")
    return HDMMGroup(views, strategy, error)


def _read_run(f) -> dict:
    """The template search's record (templates, winner, candidates) and the run's seed, restarts,
    and seconds, every field checked."""
    templates = r.json_attr(f, "templates", list)
    if (
        not templates
        or any(not isinstance(t, str) or t not in TEMPLATES for t in templates)
        or len(set(templates)) != len(templates)
    ):
        raise r.bad(
            f,
            "templates",
            templates,
            f"must be a non-empty list of distinct templates from {', '.join(TEMPLATES)}",
            attr=True,
        )
    stored = r.json_attr(f, "candidates")
    candidates = {}
    for name in sorted(
        stored, key=lambda k: TEMPLATES.index(k) if k in TEMPLATES else len(TEMPLATES)
    ):  # the search's order
        if name not in templates:
            raise r.bad(
                f,
                "candidates",
                sorted(stored),
                f"has a candidate {name!r} that is not among the requested templates {templates}",
                attr=True,
            )
        c = stored[name]
        if not isinstance(c, dict):
            raise r.bad(
                f, "candidates", c, f"candidate {name!r} must be an object with total_variance and seconds", attr=True
            )
        candidates[name] = Candidate(
            float(r.json_number(f, "candidates", c, "total_variance", lo=0)),
            float(r.json_number(f, "candidates", c, "seconds", lo=0)),
        )
    return {
        "template": r.text(f, "template"),
        "candidates": candidates,
        "templates": tuple(templates),
        "seed": r.integer(f, "seed"),
        "restarts": r.integer(f, "restarts", lo=0),
        "seconds": r.number(f, "seconds", lo=0.0),
    }


def load_hdmm_plan(path: str | Path) -> HDMMPlan:
    """The stored strategy, every field checked (an InputError naming it otherwise), then verified
    (privacy cost 1 per group, expected errors recomputed); never re-optimised."""
    with open_h5(path, "hdmm-plan") as f, r.h5py_errors(path, "hdmm plan file"):
        version = r.integer(f, "hdmm_plan_format", default=1)
        if version != HDMM_PLAN_FORMAT:
            held = "does not store the strategy" if version == 1 else "does not record the template search"
            raise _refuse(
                path,
                f"has HDMM plan format {version}, which {held}; this querysmasher reads {HDMM_PLAN_FORMAT}: "
                "re-run 'querysmasher plan'",
            )
        noise = r.text(f, "noise", choices=("gaussian", "laplace"))
        head = read_plan_header(f, methods=("hdmm",), pure=noise == "laplace", neighbours=("add-remove",))
        schema, workload, budget = head.schema, head.workload, head.budget
        check_attribute_sizes(schema)  # every attribute gets n x n matrices below, used or not
        implicit = ImplicitWorkload.from_workload(workload)
        stored = r.child(f, "groups", group=True)
        names = r.indexed_members(stored, "one group per strategy")
        groups = []
        for gi in names:
            g = r.child(stored, gi, group=True)
            strategy = _get_strategy(r.child(g, "strategy", group=True), noise, schema)
            views = r.array(g, "views", kind="i", ndim=1, lo=0, hi=len(implicit) - 1)
            groups.append(
                _verified_group(path, implicit, views, strategy, len(names) > 1, r.number(g, "error", lo=0.0))
            )
        run = _read_run(f)
        plan = HDMMPlan(schema, workload, budget, run.pop("template"), tuple(groups), **run, notes=head.notes)
        recorded = r.number(f, "total_variance", lo=0.0)
    covered = np.sort(np.concatenate([g.views for g in plan.groups]))
    if not np.array_equal(covered, np.arange(len(workload.views))):
        raise _refuse(path, "its groups do not answer every workload view exactly once")
    if not np.isclose(plan.total_variance, recorded, rtol=VERIFY_RTOL, atol=0):
        raise _refuse(path, f"total variance {plan.total_variance!r} differs from the recorded {recorded!r}")
    _check_winner(path, plan)
    return plan


def _check_winner(path, plan: HDMMPlan) -> None:
    """The recorded winner is a candidate, its recorded error is the loaded strategy's, and no candidate is lower."""
    won = plan.candidates.get(plan.template)
    if won is None:
        raise _refuse(path, f"its template {plan.template!r} is not among its candidates {sorted(plan.candidates)}")
    if not np.isclose(won.total_variance, plan.total_variance, rtol=VERIFY_RTOL, atol=0):
        raise _refuse(
            path,
            f"template {plan.template!r} is recorded with total variance {won.total_variance!r}, "
            f"its strategy has {plan.total_variance!r}",
        )
    # either side of a tie to rounding is accepted (best_template breaks it by template order)
    lower = [k for k, c in plan.candidates.items() if c.total_variance < won.total_variance * (1 - TEMPLATE_TIE_RTOL)]
    if lower:
        raise _refuse(path, f"template {plan.template!r} is not the best candidate ({lower[0]!r} is lower)")
