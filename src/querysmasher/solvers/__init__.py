"""Per-view solvers behind one interface (:class:`ViewSolver`), and their registry.

The built-in solvers are ``rp``, ``wff``, ``qs`` and ``rpplus``. Other packages add solvers without
forking through the entry-point group ``querysmasher.solvers``: each entry point names a factory
(usually the solver class) called with the method's options as keywords, e.g. in the plugin's
``pyproject.toml``::

    [project.entry-points."querysmasher.solvers"]
    scaledid = "qs_plugin_example:ScaledIdentitySolver"

Registered names work everywhere a method name does (``querysmasher plan --method scaledid``, the
workflow's ``methods:``, :func:`querysmasher.make_plan`). Names are lower-case letters, digits and
single underscores (they become folder names); a plugin cannot replace a built-in name or ``hdmm``.
The contract a solver must meet is in ``docs/solvers.md`` and :mod:`querysmasher.solvers.base`;
:mod:`querysmasher.testing` checks it.

>>> {"qs", "rp", "rpplus", "wff"} <= set(SOLVERS)
True
>>> get_solver("rp").name
'rp'
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator, MutableMapping

from .base import ViewMechanism, ViewSolution, ViewSolver, mechanism_loss
from .closed_form import RPSolver, WFFSolver

__all__ = ["ViewMechanism", "ViewSolution", "ViewSolver", "mechanism_loss", "SOLVERS", "get_solver", "ENTRY_POINT_GROUP", "NAME_PATTERN", "plugin_origin"]

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "querysmasher.solvers"
NAME_PATTERN = r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)*$"  # no '-' or '__': method names are parts of folder names
RESERVED = frozenset({"hdmm"})  # whole-workload methods with their own code path


def _qs(**options):
    from .qs import QSSolver  # the optimal solver pulls in the SDP code; import on demand

    return QSSolver(**options)


def _rpplus(**options):
    from .rpplus import RPPlusSolver  # optimises 1-D strategies with the SDP code; import on demand

    return RPPlusSolver(**options)


class _Registry(MutableMapping[str, Callable[..., ViewSolver]]):
    """Method name -> solver factory: the built-ins, factories set in this process
    (``SOLVERS[name] = factory``: notebooks, tests), then the entry points of installed plugins
    (discovered on the first lookup of a name that is neither, then cached)."""

    def __init__(self, builtins: dict[str, Callable[..., ViewSolver]]):
        self._builtins = builtins
        self._runtime: dict[str, Callable[..., ViewSolver]] = {}
        self._entry_points: dict | None = None
        self._loaded: dict[str, Callable[..., ViewSolver]] = {}

    def _plugins(self) -> dict:
        if self._entry_points is None:
            from importlib.metadata import entry_points

            found = {}
            for ep in entry_points(group=ENTRY_POINT_GROUP):
                where = f"entry point {ep.name!r} of {_dist_name(ep)}"
                if ep.name in self._builtins or ep.name in RESERVED:
                    log.warning("%s ignored: %r is a built-in method", where, ep.name)
                elif not re.match(NAME_PATTERN, ep.name):
                    log.warning("%s ignored: method names match %s", where, NAME_PATTERN)
                elif ep.name in found:
                    log.warning("%s ignored: %r is also registered by %s", where, ep.name, _dist_name(found[ep.name]))
                else:
                    found[ep.name] = ep
            self._entry_points = found
        return self._entry_points

    def __getitem__(self, name: str) -> Callable[..., ViewSolver]:
        if name in self._builtins:
            return self._builtins[name]
        if name in self._runtime:
            return self._runtime[name]
        if name not in self._loaded:
            ep = self._plugins()[name]  # KeyError for unknown names
            self._loaded[name] = ep.load()
        return self._loaded[name]

    def __setitem__(self, name: str, factory: Callable[..., ViewSolver]) -> None:
        if name in self._builtins or name in RESERVED or not re.match(NAME_PATTERN, str(name)):
            raise KeyError(f"cannot register method {name!r}: built-in, reserved, or not matching {NAME_PATTERN}")
        self._runtime[name] = factory

    def __delitem__(self, name: str) -> None:
        del self._runtime[name]  # only factories set in this process can be removed

    def __contains__(self, name: object) -> bool:
        return name in self._builtins or name in self._runtime or name in self._plugins()

    def __iter__(self) -> Iterator[str]:
        yield from self._builtins
        yield from self._runtime
        yield from (n for n in self._plugins() if n not in self._runtime)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def origin(self, name: str) -> str:
        """``querysmasher`` for built-ins, else ``{distribution} {version}`` of the plugin."""
        if name in self._builtins:
            return "querysmasher"
        if name in self._runtime:
            return f"{getattr(self._runtime[name], '__module__', '?')} (registered at run time)"
        ep = self._plugins()[name]
        return f"{_dist_name(ep)} {getattr(ep.dist, 'version', '?')}"

    def refresh(self) -> None:
        """Forget discovered plugins (after installing one into a running interpreter)."""
        self._entry_points, self._loaded = None, {}


def _dist_name(ep) -> str:
    return getattr(ep.dist, "name", None) or ep.value


def _without_options(cls):
    def factory(**options):
        if options:
            raise TypeError(f"{cls.name} takes no options (given: {', '.join(sorted(options))})")
        return cls()

    return factory


SOLVERS = _Registry({"rp": _without_options(RPSolver), "wff": _without_options(WFFSolver), "qs": _qs, "rpplus": _rpplus})


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
        raise TypeError(f"method {name!r}: {SOLVERS.origin(name)} returned {type(solver).__name__}, which has no solve(gram, store)")
    return solver
