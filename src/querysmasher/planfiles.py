"""Plan files of every kind: save and load a plan whatever planner made it (by the file's kind).

Each kind of plan record has its file format in :mod:`querysmasher.plankinds`;
:func:`save_any_plan` and :func:`load_any_plan` pick it (from the plan's class, from the file's
``kind``). Nothing here measures or reconstructs, so the planning stages do not depend on that code.

>>> import tempfile, os
>>> from querysmasher.planning import make_plan
>>> path = os.path.join(tempfile.mkdtemp(), "plan.h5")
>>> save_any_plan(make_plan("cps", "prefix:1", "hdmm"), path)
>>> type(load_any_plan(path)).__name__, file_kind_of(path)
('HDMMPlan', 'hdmm-plan')
"""

from __future__ import annotations

from pathlib import Path

from .errors import InputError
from .io import read_kind
from .plankinds import PLAN_KINDS, kind_of

__all__ = ["file_kind_of", "is_plan", "save_any_plan", "load_any_plan"]


def file_kind_of(path: str | Path) -> str:
    """The kind of the plan stored in ``path`` (an InputError for any other file)."""
    if not Path(path).is_file():
        raise InputError("plan file", str(path), "does not exist")
    kind = read_kind(path)
    if kind not in PLAN_KINDS:
        raise InputError("plan file", str(path), f"holds a {kind!r}, not a plan")
    return kind


def is_plan(obj) -> bool:
    """Whether ``obj`` is a plan record of a registered kind."""
    try:
        kind_of(obj)
    except InputError:
        return False
    return True


def save_any_plan(plan, path: str | Path) -> None:
    """Write a plan of any kind in its format."""
    kind_of(plan).op("save")(plan, path)


def load_any_plan(path: str | Path):
    """The plan stored in ``path``, of whichever kind, every field checked."""
    return PLAN_KINDS[file_kind_of(path)].op("load")(path)
