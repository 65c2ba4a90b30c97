"""Name -> factory registries with plugins: built-ins, names set at run time, and entry points.

Both kinds of interchangeable algorithm -- per-view solvers (:mod:`querysmasher.solvers`, entry-point
group ``querysmasher.solvers``) and whole-workload planners (:mod:`querysmasher.methods`, group
``querysmasher.planners``) -- are found by name through one :class:`PluginRegistry`. A name is a
method name everywhere (CLI, API, release specs, the workflow's grid), so it is lower-case letters,
digits and single underscores (it becomes part of folder names), and a plugin cannot take a built-in
or reserved name.

>>> r = PluginRegistry("example.group", {"one": dict})
>>> "one" in r, r["one"](a=1), r.origin("one")
(True, {'a': 1}, 'querysmasher')
"""

from __future__ import annotations

import importlib
import logging
import re
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from importlib.metadata import entry_points

__all__ = ["PluginRegistry", "NAME_PATTERN", "lazy_factory"]

log = logging.getLogger(__name__)

NAME_PATTERN = r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)*$"  # no '-' or '__': method names are parts of folder names


def lazy_factory(module: str, cls: str) -> Callable:
    """A factory of a built-in class imported on first use (optimisers pull in scipy); its
    ``capabilities`` attribute loads the class, whose attributes say what the method supports."""

    def load():
        return getattr(importlib.import_module(module), cls)

    def factory(**options):
        return load()(**options)

    factory.capabilities = load
    return factory


def _dist_name(ep) -> str:
    return getattr(ep.dist, "name", None) or ep.value


class PluginRegistry(MutableMapping[str, Callable]):
    """Name -> factory: the built-ins, factories set in this process (``registry[name] = factory``:
    notebooks, tests), then the entry points of installed plugins (discovered on the first lookup of
    a name that is neither, then cached). ``reserved`` names (another registry's built-ins) are
    refused for plugins and run-time factories alike."""

    def __init__(self, group: str, builtins: dict[str, Callable], reserved: Iterable[str] = ()):
        self.group = group
        self._builtins = builtins
        self._reserved = frozenset(reserved)
        self._runtime: dict[str, Callable] = {}
        self._entry_points: dict | None = None
        self._loaded: dict[str, Callable] = {}

    def _taken(self, name: str) -> bool:
        return name in self._builtins or name in self._reserved

    def _plugins(self) -> dict:
        if self._entry_points is None:
            found = {}
            for ep in entry_points(group=self.group):
                where = f"entry point {ep.name!r} of {_dist_name(ep)}"
                if self._taken(ep.name):
                    log.warning("%s ignored: %r is a built-in method", where, ep.name)
                elif not re.match(NAME_PATTERN, ep.name):
                    log.warning("%s ignored: method names match %s", where, NAME_PATTERN)
                elif ep.name in found:
                    log.warning("%s ignored: %r is also registered by %s", where, ep.name, _dist_name(found[ep.name]))
                else:
                    found[ep.name] = ep
            self._entry_points = found
        return self._entry_points

    def __getitem__(self, name: str) -> Callable:
        if name in self._builtins:
            return self._builtins[name]
        if name in self._runtime:
            return self._runtime[name]
        if name not in self._loaded:
            ep = self._plugins()[name]  # KeyError for unknown names
            self._loaded[name] = ep.load()
        return self._loaded[name]

    def __setitem__(self, name: str, factory: Callable) -> None:
        if self._taken(name) or not re.match(NAME_PATTERN, str(name)):
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

    def reserve(self, names: Iterable[str]) -> None:
        """Add ``names`` (another registry's built-ins) to those refused here; a factory set in this
        process under one of them is dropped, with a warning (it would shadow a built-in method)."""
        self._reserved |= frozenset(names)
        for name in sorted(self._reserved & set(self._runtime)):
            log.warning("method %r registered at run time dropped: %r is a built-in method", name, name)
            del self._runtime[name]
        self._entry_points = None  # rediscovered without the names now reserved

    @property
    def builtin_names(self) -> frozenset[str]:
        return frozenset(self._builtins)

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
