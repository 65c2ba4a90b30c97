"""QuerySmasher: divide-and-conquer matrix mechanisms for linear counting queries under
differential privacy (He et al., "Accurate and Scalable Matrix Mechanisms via Divide and Conquer").

The common path needs one import (names load on first use, so ``import querysmasher`` stays
fast):

>>> import querysmasher as qs
>>> plan = qs.make_plan("cps", "marginal:1", method="rp", beta=1.0)
>>> round(plan.rmse, 3), plan.summary()["distinct_solves"]
(1.744, 6)

``plan.measure(records)`` (or ``qs.measure(plan, records)``) gives the release (:class:`Release`),
``.reconstruct()`` (or ``qs.reconstruct(release)``) the answers with their variances
(:class:`Answers`), ``qs.save`` / ``qs.load`` the files, for a plan of any method; see
:mod:`querysmasher.api`. Solvers are listed in ``qs.SOLVERS`` (plugins included).

``querysmasher.measure`` and ``querysmasher.reconstruct`` are also the library's stage modules,
which its own code and tests import by those names: a package attribute is one object, so each
stays the module and is made callable as the API's function of its name when it is imported
(``_StepModule``).
"""

from __future__ import annotations

import importlib
import sys
import types

__version__ = "0.1.0"

# public name -> module that defines it (imported on first attribute access)
_EXPORTS = {
    "make_plan": "api",
    "budget": "api",
    "save": "api",
    "load": "api",
    "Answers": "api",
    "Release": "api",
    "Budget": "accounting",
    "Plan": "plan",
    "Measurements": "measure",
    "parse_schema": "schema",
    "parse_workload": "workload",
    "load_records": "data",
    "InputError": "errors",
    "SOLVERS": "solvers",
    "get_solver": "solvers",
    "ViewSolver": "solvers",
    "ViewSolution": "solvers",
    "ViewMechanism": "solvers",
}

# stage submodules that are also the API's functions of their names (module docstring)
_STEPS = ("measure", "reconstruct")

__all__ = ["__version__", *_EXPORTS, *_STEPS]


class _StepModule(types.ModuleType):
    """A stage submodule that, called, runs the function of its name in :mod:`querysmasher.api`."""

    def __call__(self, *args, **kwargs):
        api = importlib.import_module(".api", __name__)
        return getattr(api, self.__name__.rpartition(".")[2])(*args, **kwargs)


class _Package(types.ModuleType):
    """This package's module: the import system binds each loaded submodule here, and the steps
    become callable as they are bound (whoever imports them first)."""

    def __setattr__(self, name: str, value) -> None:
        if name in _STEPS and type(value) is types.ModuleType:
            value.__class__ = _StepModule
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str):
    if name in _STEPS:  # importing it binds it (callable) as this attribute
        return importlib.import_module(f".{name}", __name__)
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'querysmasher' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS) | set(_STEPS))
