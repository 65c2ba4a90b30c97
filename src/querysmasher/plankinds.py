"""The plan-kind table: for each kind of plan record, where its file format and release stages live.

Every planner returns a plan of one *kind*: a :class:`querysmasher.plan.Plan` (kind ``plan``:
every per-view method, ``mm`` and whole-workload plugins built on it) or a planner's own record
(kind ``hdmm-plan``: :class:`querysmasher.hdmm.plan.HDMMPlan`). A plan record says its kind in
its class attribute ``file_kind``. The faces (CLI, API, release, workflow) and the generic stages
(:func:`querysmasher.measure.measure_plan_to_file`,
:func:`querysmasher.reconstruct.reconstruct_plan_to_file`) look the kind up here and call its
operations; nothing else asks "is it HDMM?".

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
>>> k.per_view_tables, k.op("load").__name__
(False, 'load_hdmm_plan')
>>> kind_of(object())
Traceback (most recent call last):
...
querysmasher.errors.InputError: plan 'object': is not a plan of a known kind (plan, hdmm-plan, marginal-plan)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from .errors import InputError

__all__ = ["PlanKind", "PLAN_KINDS", "PLAN_KIND_GROUP", "register_plan_kind", "plan_kind", "kind_of", "OPERATIONS"]

PLAN_KIND_GROUP = "querysmasher.plan_kinds"

# What a kind provides, with the signature each operation must have:
OPERATIONS: dict[str, str] = {
    "save": "(plan, path) -> None: the plan file, written atomically",
    "load": "(path) -> plan: every field checked, one InputError otherwise",
    "check": "(plan) -> float: the privacy cost recomputed from the operators measure applies; an InputError above the budget or when it cannot be measured",
    "measure_to_file": "(plan, records, noise, path, *, plan_sha256) -> None: the measurements file",
    "reconstruct_to_file": "(plan, measurements_path, out, *, plan_sha256, csv_dir=None, max_answers=None) -> dict: the answers file",
    "released_answers": "(plan, answers_path) -> iterator of (view, answers, variances or None)",
    "release_tables": "(plan, records, noise) -> (tables, view_answers, total): a release's publishable tables (querysmasher.tablefiles.write_table_files); empty for kinds without per-view tables",
}


@dataclass(frozen=True)
class PlanKind:
    """One kind of plan record: its file kind (the ``kind`` attribute of its HDF5 files), the
    record's class (``"module:Class"``), whether its reconstruct stage writes per-view CSV tables
    (``--csv``), and its operations (see ``OPERATIONS``) as ``"module:attribute"`` names; a kind
    whose ``release_tables`` is empty cannot be released from a release spec."""

    file_kind: str
    plan_type: str
    per_view_tables: bool
    save: str
    load: str
    check: str
    measure_to_file: str
    reconstruct_to_file: str
    released_answers: str
    release_tables: str = ""

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
        from importlib.metadata import entry_points

        _DISCOVERED = {ep.name: ep for ep in entry_points(group=PLAN_KIND_GROUP)}
    ep = _DISCOVERED.get(file_kind)
    if ep is None:
        return None
    kind = ep.load()
    if not isinstance(kind, PlanKind) or kind.file_kind != file_kind:
        raise InputError("plan kind", file_kind, f"entry point {ep.value!r} is not a PlanKind with file_kind {file_kind!r}")
    return register_plan_kind(kind)


def kind_of(plan) -> PlanKind:
    """The kind of a plan object (its class's ``file_kind``); an InputError for anything else."""
    kind = plan_kind(getattr(type(plan), "file_kind", None))
    if kind is None or not isinstance(plan, kind.record_type()):
        raise InputError("plan", type(plan).__name__, f"is not a plan of a known kind ({', '.join(PLAN_KINDS)})")
    return kind


register_plan_kind(PlanKind(
    "plan", "querysmasher.plan:Plan", True,
    save="querysmasher.planfile:save_plan", load="querysmasher.planfile:load_plan",
    check="querysmasher.measure:check_residual_plan",
    measure_to_file="querysmasher.measure:measure_residual_to_file",
    reconstruct_to_file="querysmasher.reconstruct:reconstruct_residual_to_file",
    released_answers="querysmasher.reconstruct:residual_released_answers",
    release_tables="querysmasher.reconstruct:residual_release_tables",
))
register_plan_kind(PlanKind(
    "hdmm-plan", "querysmasher.hdmm.plan:HDMMPlan", False,
    save="querysmasher.hdmm.files:save_hdmm_plan", load="querysmasher.hdmm.files:load_hdmm_plan",
    check="querysmasher.hdmm.release:check_measurable",
    measure_to_file="querysmasher.hdmm.release:measure_hdmm_to_file",
    reconstruct_to_file="querysmasher.hdmm.release:reconstruct_hdmm_to_file",
    released_answers="querysmasher.hdmm.release:hdmm_released_answers",
))
register_plan_kind(PlanKind(
    "marginal-plan", "querysmasher.marginal_family.planner:MarginalPlan", True,
    save="querysmasher.marginal_family.files:save_marginal_plan", load="querysmasher.marginal_family.files:load_marginal_plan",
    check="querysmasher.marginal_family.release:check_marginal_plan",
    measure_to_file="querysmasher.marginal_family.release:measure_marginal_to_file",
    reconstruct_to_file="querysmasher.marginal_family.release:reconstruct_marginal_to_file",
    released_answers="querysmasher.marginal_family.release:marginal_released_answers",
    release_tables="querysmasher.marginal_family.release:marginal_release_tables",
))
