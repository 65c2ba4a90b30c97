"""Plan files of every kind: save and load a plan whatever planner made it (by the file's kind).

Planners return a :class:`querysmasher.plan.Plan` (file kind ``plan``: every per-view method,
``mm`` and whole-workload plugins) or an :class:`querysmasher.hdmm.plan.HDMMPlan` (file kind
``hdmm-plan``). :func:`save_any_plan` and :func:`load_any_plan` pick the format; nothing here
measures or reconstructs (:mod:`querysmasher.stages` does), so the planning stages do not depend
on that code.

>>> import tempfile, os
>>> from querysmasher.planning import make_plan
>>> path = os.path.join(tempfile.mkdtemp(), "plan.h5")
>>> save_any_plan(make_plan("cps", "prefix:1", "hdmm"), path)
>>> type(load_any_plan(path)).__name__, file_kind_of(path)
('HDMMPlan', 'hdmm-plan')
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .errors import InputError
from .hdmm.files import load_hdmm_plan, save_hdmm_plan
from .hdmm.plan import HDMMPlan
from .io import read_kind
from .plan import Plan, load_plan, save_plan

__all__ = ["PlanFormat", "PLAN_FORMATS", "format_of", "file_kind_of", "save_any_plan", "load_any_plan"]


@dataclass(frozen=True)
class PlanFormat:
    """How one kind of plan is stored."""

    file_kind: str
    plan_type: type
    save: Callable[..., None]  # (plan, path)
    load: Callable[..., object]  # (path) -> plan


PLAN_FORMATS: dict[str, PlanFormat] = {
    "plan": PlanFormat("plan", Plan, save_plan, load_plan),
    "hdmm-plan": PlanFormat("hdmm-plan", HDMMPlan, save_hdmm_plan, load_hdmm_plan),
}


def format_of(plan) -> PlanFormat:
    """The format of a plan object (an InputError for anything else)."""
    for fmt in PLAN_FORMATS.values():
        if isinstance(plan, fmt.plan_type):
            return fmt
    raise InputError("plan", type(plan).__name__, "is not a plan (a Plan or an HDMMPlan)")


def file_kind_of(path: str | Path) -> str:
    """The kind of the plan stored in ``path`` (an InputError for any other file)."""
    if not Path(path).is_file():
        raise InputError("plan file", str(path), "does not exist")
    kind = read_kind(path)
    if kind not in PLAN_FORMATS:
        raise InputError("plan file", str(path), f"holds a {kind!r}, not a plan")
    return kind


def save_any_plan(plan, path: str | Path) -> None:
    """Write a plan of any kind in its format."""
    format_of(plan).save(plan, path)


def load_any_plan(path: str | Path):
    """The plan stored in ``path``, of whichever kind."""
    return PLAN_FORMATS[file_kind_of(path)].load(path)
