"""Plan kinds: how every face saves, loads, checks, measures and reconstructs a plan of any kind.

Planners return one of two kinds of plan: a :class:`querysmasher.plan.Plan` (per view a mechanism
and a noise scale: every per-view method, ``mm`` and whole-workload plugins; file kind ``plan``) or
an :class:`querysmasher.hdmm.plan.HDMMPlan` (HDMM's strategies over the full data vector; file kind
``hdmm-plan``). The CLI, the API, release specs and the workflow go through :func:`kind_of` /
:func:`kind_of_file` and the functions of the :class:`PlanKind` they get, so none of them asks what
kind of plan it holds, and both kinds get the same checks: the privacy cost of the operator that
will be applied is recomputed before any record is read, and measurements are checked against the
plan before anything is reconstructed.

>>> kind_of_file.__doc__.split(".")[0]
'The kind of the plan stored in ``path`` (an InputError for any other file)'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .errors import InputError
from .hdmm.files import check_measurable, load_hdmm_plan, measure_hdmm_to_file, reconstruct_hdmm_to_file, save_hdmm_plan
from .hdmm.plan import HDMMPlan
from .io import read_kind
from .measure import check_budget, load_measurements, measure_iter, save_measurements
from .plan import Plan, load_plan, save_plan
from .reconstruct import DEFAULT_MAX_ANSWERS, reconstruct, save_answers, write_csv_tables

__all__ = ["PlanKind", "PLAN_KINDS", "kind_of", "kind_of_file", "load_any_plan"]


def _check_residual(plan: Plan) -> float:
    return check_budget(plan)


def _check_hdmm(plan: HDMMPlan) -> float:
    check_measurable(plan)  # the full data vector must fit
    return plan.check_budget()


def _measure_residual(plan: Plan, records, noise, out, *, seeded: bool, plan_sha256: str) -> None:
    save_measurements(out, plan, measure_iter(plan, records, noise), seeded=seeded, plan_sha256=plan_sha256, sampler=noise.sampler)


def _measure_hdmm(plan: HDMMPlan, records, noise, out, *, seeded: bool, plan_sha256: str) -> None:
    measure_hdmm_to_file(plan, records, noise, out, seeded=seeded, plan_sha256=plan_sha256)


def _reconstruct_residual(plan: Plan, measurements, out, *, plan_sha256: str, csv_dir=None, max_answers: int | None = None) -> dict:
    with load_measurements(measurements, plan_sha256, plan) as meas:
        rec = reconstruct(plan, meas)
        info = save_answers(out, rec, max_answers=DEFAULT_MAX_ANSWERS if max_answers is None else int(max_answers))
        if csv_dir:
            info["csv_tables"] = len(write_csv_tables(csv_dir, rec))
    return info


def _reconstruct_hdmm(plan: HDMMPlan, measurements, out, *, plan_sha256: str, csv_dir=None, max_answers: int | None = None) -> dict:
    if csv_dir:
        raise InputError("--csv", str(csv_dir), "hdmm answers have no per-view tables to write as CSV")
    return reconstruct_hdmm_to_file(plan, measurements, out, plan_sha256)


def _released_residual(plan: Plan, answers_path):
    """(workload view, released answers, variances) per view, from the reconstructed tables."""
    from .io import open_h5
    from .reconstruct import view_answers_from_table
    from .variances import ViewVarianceMemo

    variances = ViewVarianceMemo(plan)  # views of one shape, mechanism and noise share their variances
    with open_h5(answers_path, "answers") as f:
        offs = f["views/table_offsets"][()]
        tables = f["views/tables"]
        for i, v in enumerate(plan.workload.views):  # one view at a time: bounded memory
            yield v, view_answers_from_table(plan, v, tables[int(offs[i]):int(offs[i + 1])]), variances(v)


def _released_hdmm(plan: HDMMPlan, answers_path):
    """(workload view, released answers, None) per view: HDMM's answers file holds the answers."""
    from .io import open_h5

    with open_h5(answers_path, "answers") as f:
        offs = f["views/answer_offsets"][()]
        answers = f["views/answers"]
        for i, v in enumerate(plan.workload.views):
            yield v, answers[int(offs[i]):int(offs[i + 1])], None


@dataclass(frozen=True)
class PlanKind:
    """What the faces do with one kind of plan."""

    file_kind: str
    plan_type: type
    save: Callable[..., None]  # (plan, path)
    load: Callable[..., object]  # (path) -> plan
    check: Callable[..., float]  # (plan) -> recomputed privacy cost; raises when it may not be measured
    measure_to_file: Callable[..., None]  # (plan, records, noise, out, *, seeded, plan_sha256)
    reconstruct_to_file: Callable[..., dict]  # (plan, measurements path, out, *, plan_sha256, csv_dir, max_answers)
    per_view_tables: bool  # whether reconstruct writes per-view tables (CSV)
    released_answers: Callable[..., object]  # (plan, answers path) -> iterator of (view, answers, variances or None)


PLAN_KINDS: dict[str, PlanKind] = {
    "plan": PlanKind("plan", Plan, save_plan, load_plan, _check_residual, _measure_residual, _reconstruct_residual, True, _released_residual),
    "hdmm-plan": PlanKind("hdmm-plan", HDMMPlan, save_hdmm_plan, load_hdmm_plan, _check_hdmm, _measure_hdmm, _reconstruct_hdmm, False, _released_hdmm),
}


def kind_of(plan) -> PlanKind:
    """The kind of a plan object (an InputError for anything else)."""
    for kind in PLAN_KINDS.values():
        if isinstance(plan, kind.plan_type):
            return kind
    raise InputError("plan", type(plan).__name__, "is not a plan (a Plan or an HDMMPlan)")


def kind_of_file(path: str | Path) -> PlanKind:
    """The kind of the plan stored in ``path`` (an InputError for any other file)."""
    kind = read_kind(path) if Path(path).is_file() else None
    if kind is None:
        raise InputError("plan file", str(path), "does not exist")
    if kind not in PLAN_KINDS:
        raise InputError("plan file", str(path), f"holds a {kind!r}, not a plan")
    return PLAN_KINDS[kind]


def load_any_plan(path: str | Path):
    """The plan stored in ``path``, of whichever kind."""
    return kind_of_file(path).load(path)
