"""Per-view solvers behind one interface (:class:`ViewSolver`), and their registry.

The built-in solvers are ``rp``, ``wff``, ``qs`` and ``rpplus``. Other packages add solvers without
forking through the entry-point group ``querysmasher.solvers``: each entry point names a factory
(usually the solver class) called with the method's options as keywords, e.g. in the plugin's
``pyproject.toml``::

    [project.entry-points."querysmasher.solvers"]
    scaledid = "qs_plugin_example:ScaledIdentitySolver"

Registered names work everywhere a method name does (``querysmasher plan --method scaledid``, the
workflow's ``methods:``, :func:`querysmasher.make_plan`). Names are lower-case letters, digits and
single underscores (they become folder names); a plugin cannot replace a built-in name, ``hdmm`` or
``mm`` (whole-workload planners plug in through :mod:`querysmasher.methods`).
The contract a solver must meet is in ``docs/solvers.md`` and :mod:`querysmasher.solvers.base`;
:mod:`querysmasher.testing` checks it.

>>> {"qs", "rp", "rpplus", "wff"} <= set(SOLVERS)
True
>>> get_solver("rp").name
'rp'
"""

from __future__ import annotations

import logging

from ..registry import NAME_PATTERN, PluginRegistry, lazy_factory
from .base import ViewMechanism, ViewSolution, ViewSolver, mechanism_loss
from .closed_form import RPSolver, WFFSolver

__all__ = [
    "ViewMechanism",
    "ViewSolution",
    "ViewSolver",
    "mechanism_loss",
    "SOLVERS",
    "get_solver",
    "ENTRY_POINT_GROUP",
    "NAME_PATTERN",
    "plugin_origin",
]

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "querysmasher.solvers"


def _without_options(cls):
    def factory(**options):
        if options:
            raise TypeError(f"{cls.name} takes no options (given: {', '.join(sorted(options))})")
        return cls()

    factory.capabilities = lambda: cls
    return factory


SOLVERS = PluginRegistry(
    ENTRY_POINT_GROUP,
    {
        "rp": _without_options(RPSolver),
        "wff": _without_options(WFFSolver),
        "qs": lazy_factory("querysmasher.solvers.qs", "QSSolver"),
        "rpplus": lazy_factory("querysmasher.solvers.rpplus", "RPPlusSolver"),
    },
)
# The built-in whole-workload planners' names are reserved here by querysmasher.methods, which holds
# the method table (SOLVERS.reserve): derived from it, never listed by hand.


def plugin_origin(name: str) -> str:
    """Which package provides a method (``querysmasher`` or the plugin distribution and version)."""
    return SOLVERS.origin(name)


def get_solver(name: str, **options) -> ViewSolver:
    """A per-view solver by method name; unknown names raise a KeyError listing the known ones."""
    try:
        factory = SOLVERS[name]
    except KeyError:
        raise KeyError(f"unknown method {name!r} (known: {', '.join(sorted(SOLVERS))})") from None
    solver = factory(**options)
    if not callable(getattr(solver, "solve", None)):
        raise TypeError(
            f"method {name!r}: {SOLVERS.origin(name)} returned {type(solver).__name__}, which has no solve(gram, store)"
        )
    return solver
