"""The method table: every planning method, what it is and what it supports; every face reads it.

A method is either

* a **per-view solver** (``rp``, ``wff``, ``qs``, ``rpplus``, plugins of the entry-point group
  ``querysmasher.solvers``): the residual planner decomposes the workload and calls it once per
  distinct residual view (:mod:`querysmasher.solvers`); or
* a **whole-workload planner** (``hdmm``, ``mm``, plugins of the entry-point group
  ``querysmasher.planners``): an object with ``plan(schema, workload, budget, *, objective)``
  returning a plan (:class:`WholeWorkloadPlanner`).

Both declare what they support as class attributes -- ``objectives`` (``sum``, ``max``), ``noises``
(``gaussian``, ``laplace``), ``neighbours`` (``add-remove``, ``replace``) -- and a planner may also
say which workloads it cannot plan (``unsupported(workload)``) and on which schemas its plans can be
measured (``measurable(schema)``). :func:`get_method` gives the :class:`Method` record of a name;
the CLI, the API, release specs and the workflow ask it, and nothing else branches on method names.

A plugin planner is registered like a solver, in its package's ``pyproject.toml``::

    [project.entry-points."querysmasher.planners"]
    toyfull = "toy_planner:ToyPlanner"

and is then a method everywhere (``querysmasher plan --method toyfull``, ``qs.make_plan(...,
method="toyfull")``, release specs, the workflow grid's ``methods:``). Its ``plan`` returns a
:class:`querysmasher.plan.Plan` (any views and mechanisms of :mod:`querysmasher.mechanisms`; a
mechanism over every attribute with ``layout="full-domain"``), which every later stage handles.

>>> m = get_method("qs")
>>> m.kind, m.objectives, m.noises
('per-view', ('sum', 'max'), ('gaussian',))
>>> get_method("hdmm").kind, get_method("hdmm").noises, get_method("hdmm").neighbours
('whole-workload', ('gaussian', 'laplace'), ('add-remove',))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from .accounting import NEIGHBOURS
from .errors import InputError
from .options import check_options
from .registry import PluginRegistry, lazy_factory
from .solvers import SOLVERS

__all__ = [
    "Method",
    "WholeWorkloadPlanner",
    "PLANNERS",
    "PLANNER_GROUP",
    "get_method",
    "method_names",
    "builtin_method_names",
    "OBJECTIVES",
    "NOISES",
]

PLANNER_GROUP = "querysmasher.planners"
OBJECTIVES: tuple[str, ...] = ("sum", "max")
NOISES: tuple[str, ...] = ("gaussian", "laplace")


class WholeWorkloadPlanner(Protocol):
    """What a whole-workload planner is: a name and ``plan``. Optional class attributes
    ``objectives``, ``noises``, ``neighbours`` (defaults: sum, gaussian, both relations) and methods
    ``unsupported(workload) -> str`` (why it cannot plan it, "" when it can) and
    ``measurable(schema) -> bool``."""

    name: str

    def plan(self, schema, workload, budget, *, objective: str = "sum") -> Any: ...


# Whole-workload planners by name: the built-ins, then plugins; their names and the solvers' never overlap.
PLANNERS = PluginRegistry(
    PLANNER_GROUP,
    {
        "hdmm": lazy_factory("querysmasher.hdmm.plan", "HDMMPlanner"),
        "mm": lazy_factory("querysmasher.planners.mm", "MMPlanner"),
        "qsplus": lazy_factory("querysmasher.marginal_family.method", "QSPlusPlanner"),
    },
    reserved=SOLVERS.builtin_names,
)
SOLVERS.reserve(PLANNERS.builtin_names)  # a solver may not take a built-in planner's name (qsplus, hdmm, mm)


def builtin_method_names() -> list[str]:
    """The built-in methods of the table, per-view solvers then whole-workload planners (the CLI's
    help and the config schema's description list these; a test keeps the schema in step)."""
    return [*sorted(SOLVERS.builtin_names), *sorted(PLANNERS.builtin_names)]


@dataclass(frozen=True)
class Method:
    """One method: its kind, what it supports, and where it comes from."""

    name: str
    kind: str  # "per-view" or "whole-workload"
    objectives: tuple[str, ...]
    noises: tuple[str, ...]
    neighbours: tuple[str, ...]
    origin: str
    factory: Callable

    @property
    def whole_workload(self) -> bool:
        return self.kind == "whole-workload"

    def check(
        self, *, objective: str = "sum", noise: str = "gaussian", neighbours: str = "add-remove", prefix: str = ""
    ) -> None:
        """Refuse (InputError naming the field, ``prefix`` + its name: ``--`` on the command line) an
        objective, noise or neighbouring relation the method does not support."""
        if objective not in OBJECTIVES:
            raise InputError(prefix + "objective", objective, f"must be one of {', '.join(OBJECTIVES)}")
        if objective not in self.objectives:
            raise InputError(
                prefix + "objective", objective, f"{self.name} minimises {' or '.join(self.objectives)} only"
            )
        if noise not in self.noises:
            what = (
                "is a Gaussian mechanism (zCDP)"
                if self.noises == ("gaussian",)
                else f"supports {' and '.join(self.noises)} noise"
            )
            raise InputError(prefix + "noise", noise, f"method {self.name} {what}; it does not take {noise} noise")
        if neighbours not in self.neighbours:
            raise InputError(
                prefix + "neighbours",
                neighbours,
                f"{self.name} plans are accounted for {' and '.join(self.neighbours)} neighbours only",
            )

    def check_options(self, options: dict, prefix: str | None = None) -> dict:
        """``options`` checked against the ranges the method declares (``option_specs``,
        :mod:`querysmasher.options`), before any work; a method that declares none (a plugin's may
        not) gets them back unchecked, for its factory to check in :meth:`build`."""
        specs = self.declared("option_specs")
        return dict(options) if specs is None else check_options(self.name, specs, options, prefix)

    def build(self, **options):
        """The solver (per-view) or planner (whole-workload) with these options; options it does not
        take, or values it refuses, are one InputError naming them."""
        try:
            built = self.factory(**options)
        except (TypeError, ValueError) as exc:
            if isinstance(exc, InputError):
                raise
            shown = ",".join(f"{k}={v}" for k, v in sorted(options.items())) or "(none)"
            raise InputError("options", shown, f"rejected by method {self.name!r}: {exc}") from None
        needed = "plan" if self.whole_workload else "solve"
        if not callable(getattr(built, needed, None)):
            raise InputError(
                "method", self.name, f"{self.origin} returned {type(built).__name__}, which has no {needed}()"
            )
        return built

    def declared(self, name: str, default=None):
        """A capability the method's class declares (e.g. a solver's ``max_options``), else ``default``."""
        return getattr(self._capabilities(), name, default)

    def unsupported(self, workload) -> str:
        """Why the method cannot plan ``workload`` ("" when it can)."""
        fn = getattr(self._capabilities(), "unsupported", None)
        return fn(workload) if fn is not None else ""

    def measurable(self, schema) -> bool:
        """Whether its plans can be measured and reconstructed on ``schema``."""
        fn = getattr(self._capabilities(), "measurable", None)
        return bool(fn(schema)) if fn is not None else True

    def _capabilities(self):
        return _capabilities(self.factory)


def _capabilities(factory):
    """What declares a method's capabilities: the class behind a lazy factory, or the factory itself
    (a plugin's class)."""
    load = getattr(factory, "capabilities", None)
    return load() if load is not None else factory


def _declared(source, name: str, default: tuple[str, ...]) -> tuple[str, ...]:
    value = getattr(source, name, None)
    return tuple(value) if value else default


def method_names() -> list[str]:
    """Every method name: solvers and planners, built-ins and plugins."""
    return sorted({*SOLVERS, *PLANNERS})


def get_method(name: str) -> Method:
    """The :class:`Method` of a name; unknown names are one InputError listing the known ones."""
    if not isinstance(name, str) or (name not in SOLVERS and name not in PLANNERS):
        raise InputError("method", name, f"unknown method (known: {', '.join(method_names())})")
    if name in SOLVERS:
        factory, kind, origin = SOLVERS[name], "per-view", SOLVERS.origin(name)
    else:
        factory, kind, origin = PLANNERS[name], "whole-workload", PLANNERS.origin(name)
    source = _capabilities(factory)
    return Method(
        name,
        kind,
        _declared(source, "objectives", ("sum",)),
        _declared(source, "noises", ("gaussian",)),
        _declared(source, "neighbours", NEIGHBOURS),
        origin,
        factory,
    )
