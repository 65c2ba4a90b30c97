"""Plan files of every kind: save and load a plan whatever planner made it (by the file's kind).

Each kind of plan record has its file format in :mod:`querysmasher.plankinds`;
:func:`save_any_plan` and :func:`load_any_plan` pick it (from the plan's class, from the file's
``kind``). Nothing here measures or reconstructs, so the planning stages do not depend on that code.

>>> import tempfile, os
>>> from querysmasher.planning import make_plan
>>> path = os.path.join(tempfile.mkdtemp(), "plan.h5")
>>> save_any_plan(make_plan("synthetic:n=4,d=2", "prefix:1", "hdmm"), path)
>>> type(load_any_plan(path)).__name__, file_kind_of(path)
('HDMMPlan', 'hdmm-plan')
"""

from __future__ import annotations

from pathlib import Path

from .errors import InputError
from .io import atomic_h5, get_json, open_h5, put_json, read_kind
from .plankinds import kind_of, plan_kind

__all__ = [
    "file_kind_of",
    "is_plan",
    "save_any_plan",
    "load_any_plan",
    "SUMMARY_KIND",
    "save_plan_summary",
    "read_plan_summary",
]

# A plan's summary without its mechanisms: what a plan-only experiment keeps when its mechanisms
# would be too big to store twice (solve files and plan; Table 4's random:1,2 over [50]^40 holds
# 37 GB of dense mechanisms that no plan-only stage reads). It cannot be measured.
SUMMARY_KIND = "plan-summary"


def file_kind_of(path: str | Path) -> str:
    """The kind of the plan stored in ``path`` (an InputError for any other file)."""
    if not Path(path).is_file():
        raise InputError("plan file", str(path), "does not exist")
    kind = read_kind(path)
    if kind == SUMMARY_KIND:
        raise InputError(
            "plan file",
            str(path),
            "holds a plan's summary without its mechanisms (written by a plan-only "
            "experiment with allocate.store_mechanisms: false): it cannot be measured; plan again to measure",
        )
    if plan_kind(kind) is None:
        raise InputError(
            "plan file",
            str(path),
            f"holds a {kind!r}, not a plan of a known kind (a plugin's plan kind is found "
            "through its entry point, group querysmasher.plan_kinds)",
        )
    return kind


def save_plan_summary(plan, path: str | Path, summary: dict | None = None) -> None:
    """Write the summary of a plan of any kind (``plan.summary()``, or ``summary`` when the caller
    has it: predicted errors, certificate, privacy, notes) as a file of kind ``plan-summary``,
    without the mechanisms.

    >>> import tempfile, os
    >>> from querysmasher.planning import make_plan
    >>> path = os.path.join(tempfile.mkdtemp(), "plan.h5")
    >>> save_plan_summary(make_plan("synthetic:n=4,d=3", "prefix:1,2", "qs"), path)
    >>> round(read_plan_summary(path)["rmse"], 4) > 0
    True
    >>> load_any_plan(path)
    Traceback (most recent call last):
    ...
    querysmasher.errors.InputError: plan file '...plan.h5': holds a plan's summary without its mechanisms (written by a plan-only experiment with allocate.store_mechanisms: false): it cannot be measured; plan again to measure
    """  # noqa: E501  (a doctest's expected output is one line)
    kind_of(plan)  # a plan record, whichever kind
    with atomic_h5(path, kind=SUMMARY_KIND) as f:
        put_json(f, "summary", plan.summary() if summary is None else summary)
        f.attrs["method"] = plan.method


def read_plan_summary(path: str | Path) -> dict:
    """The summary stored at planning in a plan file of any kind, or in a plan-summary file."""
    if not Path(path).is_file():
        raise InputError("plan file", str(path), "does not exist")
    kind = read_kind(path)
    if kind != SUMMARY_KIND:
        kind = file_kind_of(path)
    with open_h5(path, kind) as f:
        return get_json(f, "summary")


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
    return plan_kind(file_kind_of(path)).op("load")(path)
