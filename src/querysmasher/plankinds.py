"""The plan-kind table: for each kind of plan record, where its file format and release stages live.

Every planner returns a plan of one *kind*: a :class:`querysmasher.plan.Plan` (kind ``plan``:
every per-view method, ``mm`` and whole-workload plugins built on it) or a planner's own record
(kind ``hdmm-plan``: :class:`querysmasher.hdmm.plan.HDMMPlan`). A plan record says its kind in
its class attribute ``file_kind``. A kind says what its plans measure (a list of
:class:`querysmasher.measurement.LinearMeasurement`), what must hold before a record is read, and
how answers and their variances are estimated from the measurements; measuring, the privacy
re-check, the measurements and answers files and the publishable tables are written once against
that (:mod:`querysmasher.measure`, :mod:`querysmasher.reconstruct`), and nothing asks "is it HDMM?".

Operations are named as ``"module:attribute"`` and imported when first used, so this table sits at
the bottom of the library without importing what it names, and a stage that needs one operation
loads only that operation's code (planning never loads the release code). A new mechanism family
with its own plan record adds one :class:`PlanKind`: in this process with :func:`register_plan_kind`,
or -- so that a fresh ``querysmasher measure`` process can load its plan files -- as an entry point
of the group ``querysmasher.plan_kinds`` (:data:`PLAN_KIND_GROUP`) named after its ``file_kind``,
whose value is the :class:`PlanKind` (``"package.module:KIND"``); :func:`plan_kind` finds both.
The planner itself declares the kind of its plans as its class attribute ``plan_kind`` (default
``"plan"``). ``docs/solvers.md`` shows one, and ``examples/querysmasher-plugin-example`` has it:

>>> k = PLAN_KINDS["hdmm-plan"]
>>> k.per_view_tables, k.op("load").__name__, k.op("measurements").__name__
(False, 'load_hdmm_plan', 'hdmm_measurements')
>>> kind_of(object())
Traceback (most recent call last):
...
querysmasher.errors.InputError: plan 'object': is not a plan of a known kind (plan, hdmm-plan, marginal-plan)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points

from .errors import InputError

__all__ = ["PlanKind", "PLAN_KINDS", "PLAN_KIND_GROUP", "register_plan_kind", "plan_kind", "kind_of", "OPERATIONS"]

PLAN_KIND_GROUP = "querysmasher.plan_kinds"

# What a kind provides, with the signature each operation must have:
OPERATIONS: dict[str, str] = {
    "save": "(plan, path) -> None: the plan file, written atomically",
    "load": "(path) -> plan: every field checked, one InputError otherwise",
    "measurements": "(plan) -> list of querysmasher.measurement.LinearMeasurement: what measure applies, in order, "
    "each with its noise and its cost "
    "recomputed from the operator applied; an InputError when a field cannot be measured",
    "check": "(plan) -> None: what else must hold before any record is read (the answers must be estimable); "
    "an InputError otherwise",
    "estimates": "(plan, Measurements) -> estimates with view_answers(workload view) and, "
    "for kinds with per-view tables, table(attrs); where each measured vector has a trailing draws axis "
    "(rows x draws), every answer and table has it too (the simultaneous intervals' simulation; a kind "
    "without it gets Sidak's bound)",
    "variances": "(plan) -> variances with view(workload view) -> array or None "
    "and cells(attrs) -> (array or None, why not)",
    "file_form": "(plan) -> plan: the plan as its plan file holds it "
    "(optional: a kind whose files round-trip its operators exactly has none)",
}


@dataclass(frozen=True)
class PlanKind:
    """One kind of plan record: its file kind (the ``kind`` attribute of its HDF5 files), the
    record's class (``"module:Class"``), whether it estimates per-view tables (a release spec's
    tables, ``reconstruct --csv``), and its operations (see ``OPERATIONS``) as
    ``"module:attribute"`` names. Measuring, the measurements and answers files and the tables are
    the same code for every kind (:mod:`querysmasher.measure`, :mod:`querysmasher.reconstruct`)."""

    file_kind: str
    plan_type: str
    per_view_tables: bool
    save: str
    load: str
    measurements: str
    check: str
    estimates: str
    variances: str
    file_form: str = ""

    def op(self, name: str) -> Callable:
        """The operation ``name`` (imported on first use)."""
        if name not in OPERATIONS:
            raise KeyError(f"plan kinds have no operation {name!r} (they have {', '.join(OPERATIONS)})")
        if not getattr(self, name):
            raise KeyError(f"plans of kind {self.file_kind!r} have no operation {name!r}")
        return _resolve(getattr(self, name))

    def record_type(self) -> type:
        return _resolve(self.plan_type)


def _resolve(ref: str):
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


PLAN_KINDS: dict[str, PlanKind] = {}


def register_plan_kind(kind: PlanKind) -> PlanKind:
    """Add a kind of plan record (its ``file_kind`` must be new); returns it."""
    if kind.file_kind in PLAN_KINDS and PLAN_KINDS[kind.file_kind] != kind:
        raise ValueError(f"plan kind {kind.file_kind!r} is already registered")
    PLAN_KINDS[kind.file_kind] = kind
    return kind


_DISCOVERED: dict[str, object] | None = None  # the group's entry points by name, found once


def plan_kind(file_kind) -> PlanKind | None:
    """The kind registered under ``file_kind`` (a built-in, one registered in this process, or an
    installed plugin's entry point of :data:`PLAN_KIND_GROUP`, loaded on first use); None if none."""
    global _DISCOVERED
    if not isinstance(file_kind, str):
        return None
    if file_kind in PLAN_KINDS:
        return PLAN_KINDS[file_kind]
    if _DISCOVERED is None:
        _DISCOVERED = {ep.name: ep for ep in entry_points(group=PLAN_KIND_GROUP)}
    ep = _DISCOVERED.get(file_kind)
    if ep is None:
        return None
    kind = ep.load()
    if not isinstance(kind, PlanKind) or kind.file_kind != file_kind:
        raise InputError(
            "plan kind", file_kind, f"entry point {ep.value!r} is not a PlanKind with file_kind {file_kind!r}"
        )
    return register_plan_kind(kind)


def kind_of(plan) -> PlanKind:
    """The kind of a plan object (its class's ``file_kind``); an InputError for anything else."""
    kind = plan_kind(getattr(type(plan), "file_kind", None))
    if kind is None or not isinstance(plan, kind.record_type()):
        raise InputError("plan", type(plan).__name__, f"is not a plan of a known kind ({', '.join(PLAN_KINDS)})")
    return kind


register_plan_kind(
    PlanKind(
        "plan",
        "querysmasher.plan:Plan",
        True,
        save="querysmasher.planfile:save_plan",
        load="querysmasher.planfile:load_plan",
        measurements="querysmasher.residualkind:residual_measurements",
        check="querysmasher.residualkind:check_estimable",
        estimates="querysmasher.residualkind:Reconstruction",
        variances="querysmasher.residualkind:ResidualVariances",
        file_form="querysmasher.planfile:file_form",
    )
)
register_plan_kind(
    PlanKind(
        "hdmm-plan",
        "querysmasher.hdmm.plan:HDMMPlan",
        False,
        save="querysmasher.hdmm.files:save_hdmm_plan",
        load="querysmasher.hdmm.files:load_hdmm_plan",
        measurements="querysmasher.hdmm.release:hdmm_measurements",
        check="querysmasher.hdmm.release:check_measurable",
        estimates="querysmasher.hdmm.release:HDMMEstimates",
        variances="querysmasher.hdmm.release:HDMMVariances",
    )
)
register_plan_kind(
    PlanKind(
        "marginal-plan",
        "querysmasher.marginal_family.planner:MarginalPlan",
        True,
        save="querysmasher.marginal_family.files:save_marginal_plan",
        load="querysmasher.marginal_family.files:load_marginal_plan",
        measurements="querysmasher.marginal_family.release:marginal_measurements",
        check="querysmasher.marginal_family.gls:check_estimable",
        estimates="querysmasher.marginal_family.release:MarginalEstimates",
        variances="querysmasher.marginal_family.release:MarginalVariances",
    )
)
