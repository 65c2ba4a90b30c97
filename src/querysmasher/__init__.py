"""QuerySmasher: divide-and-conquer matrix mechanisms for linear counting queries under
differential privacy (He et al., "Accurate and Scalable Matrix Mechanisms via Divide and Conquer").

The common path needs one import (names load on first use, so ``import querysmasher`` stays
fast; ``plan``, ``measure`` and ``reconstruct`` are submodules, so those steps are methods):

>>> import querysmasher as qs
>>> plan = qs.make_plan("cps", "marginal:1", method="rp", beta=1.0)
>>> round(plan.rmse, 3), plan.summary()["distinct_solves"]
(1.744, 6)

``plan.measure(records)`` gives the release (:class:`Release`), ``.reconstruct()`` the
answers with their variances (:class:`Answers`), ``qs.save`` / ``qs.load`` the files; see
:mod:`querysmasher.api`. Solvers are listed in ``qs.SOLVERS`` (plugins included).
"""

from __future__ import annotations

import importlib

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

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'querysmasher' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
