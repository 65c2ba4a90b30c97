"""The package's import graph, read from its source: which module names which, by an import statement or by a string.

Two tools need the graph -- the layer test (``tests/test_architecture.py``: no module imports a higher
layer, no cycle) and the workflow's code fingerprints (:mod:`querysmasher.pipeline.fingerprint`: the
code each stage runs) -- and both must see every way one module reaches another. Sources are parsed
(``ast``), never imported, so a copy of the package can be examined as it is on disk. An edge is

* ``import``: an ``import`` or ``from ... import`` statement (relative or absolute);
* ``import_module``: ``importlib.import_module(name[, package])`` whose name the source gives: a
  string, or an f-string with one placeholder filled by one of the module's own string constants
  (the package root's ``import_module(f".{module}", __name__)`` over its table of exports);
* ``lazy_factory``: :func:`querysmasher.registry.lazy_factory` ``(module, class)``, imported on first use;
* ``string``: any other string constant (docstrings aside) that names a module of the package, as
  ``"module"`` or ``"module:attribute"`` (the plan-kind table's operations).

and two kinds are errors: ``root``, an import of the package root from inside it (``from
querysmasher import X``, ``import querysmasher``, or ``from .. import X`` of a name the root only
re-exports lazily), which hides the module that really defines ``X``; and ``missing``, a name of
the package's form (an import, a ``lazy_factory`` or ``module:attribute`` string) naming no
module. An edge is ``deferred`` when it sits in a function body (it runs when the function is
called, not when the module is imported). Edges to a module's own packages (which run before it
anyway) are left out.

>>> from pathlib import Path
>>> graph = ImportGraph(Path(__file__).parent)
>>> sorted({(e.target, e.kind) for e in graph.edges("querysmasher.plankinds") if "hdmm" in e.target})
[('querysmasher.hdmm.files', 'string'), ('querysmasher.hdmm.plan', 'string'), ('querysmasher.hdmm.release', 'string')]
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

__all__ = ["Edge", "EDGE_KINDS", "ERROR_KINDS", "ImportGraph"]

EDGE_KINDS = ("import", "import_module", "lazy_factory", "string")
ERROR_KINDS = ("root", "missing")

# "pkg.mod" or "pkg.mod:attr.attr": the form a string reference to a module takes
_REFERENCE = re.compile(r"^(?P<module>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)(?::(?P<attr>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*))?$")


@dataclass(frozen=True)
class Edge:
    """``source`` names ``target`` (dotted module names) on ``line``, by ``kind`` (see the module's
    docstring); ``deferred``: inside a function body."""

    source: str
    target: str
    kind: str
    line: int
    deferred: bool

    @property
    def is_error(self) -> bool:
        return self.kind in ERROR_KINDS

    def __str__(self) -> str:
        return f"{self.source}:{self.line} -> {self.target} ({self.kind}{', deferred' if self.deferred else ''})"


class ImportGraph:
    """The modules of the package in folder ``root`` (named after the folder) and the edges of each,
    parsed on first use; a parse is reused for any file of the same source text and module name (a
    copy of the package, as the layer test makes, parses only the files it changed)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.package = self.root.name
        self.modules: dict[str, Path] = {}
        for p in sorted(self.root.rglob("*.py")):
            parts = list(p.relative_to(self.root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            self.modules[".".join([self.package, *parts])] = p
        self._names = frozenset(self.modules)
        root_init = self.modules[self.package]
        self._root_names = _module_level_names(root_init.read_text())

    def edges(self, module: str) -> tuple[Edge, ...]:
        path = self.modules[module]
        return _edges(path.read_text(), module, path.name == "__init__.py", self._names, self._root_names)

    def all_edges(self) -> list[Edge]:
        return [e for m in self.modules for e in self.edges(m)]


@cache
def _module_level_names(source: str) -> frozenset[str]:
    """Names a module binds itself (the package root's own ``__version__``, not its lazy re-exports)."""
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return frozenset(names)


def _call_name(node: ast.Call) -> str:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def _resolve_relative(name: str, package: str | None) -> str | None:
    """``importlib``'s resolution of ``name`` against ``package`` (None when it cannot resolve)."""
    level = len(name) - len(name.lstrip("."))
    if not level:
        return name
    if not package:
        return None
    parts = package.split(".")
    if level > len(parts):  # above the top package
        return None
    base = parts[: len(parts) - level + 1]
    rest = name[level:]
    return ".".join(base + ([rest] if rest else []))


@cache
def _edges(
    source: str, mod: str, is_pkg: bool, modules: frozenset[str], root_names: frozenset[str]
) -> tuple[Edge, ...]:
    tree = ast.parse(source)
    top = mod.split(".")[0]
    package = mod if is_pkg else mod.rpartition(".")[0]
    docstrings = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    constants = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    consumed: set[int] = set()  # string constants read as an import_module or lazy_factory name
    out: list[Edge] = []

    def add(target: str, kind: str, node: ast.AST, deferred: bool) -> None:
        if kind not in ERROR_KINDS and (target == mod or mod.startswith(target + ".")):
            return  # the module itself, or one of its own packages (imported before it)
        out.append(Edge(mod, target, kind, node.lineno, deferred))

    def named(name: str | None, kind: str, node: ast.AST, deferred: bool, exact: bool = True) -> None:
        """An edge to module ``name`` of the package; ``exact``: a name given as a module's (an error
        when it names the root or no module), not a candidate that may name none."""
        if name is None or name.split(".")[0] != top:
            return
        if name != top and name in modules:
            add(name, kind, node, deferred)
        elif exact:
            add(name, "root" if name == top else "missing", node, deferred)

    def import_from(node: ast.ImportFrom, deferred: bool) -> None:
        if node.level:
            target = _resolve_relative("." * node.level + (node.module or ""), package)
        else:
            target = node.module or ""
        if target is None or target.split(".")[0] != top:
            return
        for a in node.names:
            sub = f"{target}.{a.name}"
            if target == top and (not node.level or (sub not in modules and a.name not in root_names)):
                # the root from inside: what it re-exports lazily hides the module defining it
                add(top, "root", node, deferred)
            elif sub in modules:
                add(sub, "import", node, deferred)
            elif target in modules:
                add(target, "import", node, deferred)
            else:
                add(target, "missing", node, deferred)

    def import_module(node: ast.Call, deferred: bool) -> None:
        if not node.args:
            return
        pkg_arg = (
            node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "package"), None)
        )
        if isinstance(pkg_arg, ast.Name) and pkg_arg.id == "__name__":
            pkg = mod
        elif isinstance(pkg_arg, ast.Name) and pkg_arg.id == "__package__":
            pkg = package
        elif isinstance(pkg_arg, ast.Constant) and isinstance(pkg_arg.value, str):
            pkg = pkg_arg.value
        else:
            pkg = None
        first = node.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            consumed.add(id(first))
            named(_resolve_relative(first.value, pkg), "import_module", node, deferred)
        elif isinstance(first, ast.JoinedStr):
            holes = [i for i, v in enumerate(first.values) if isinstance(v, ast.FormattedValue)]
            if len(holes) != 1:
                return  # not resolvable from the source: no edge
            before = "".join(v.value for v in first.values[: holes[0]])
            after = "".join(v.value for v in first.values[holes[0] + 1 :])
            for c in sorted(constants):  # the placeholder filled by the module's own constants
                named(_resolve_relative(before + c + after, pkg), "import_module", node, deferred, exact=False)

    def visit(node: ast.AST, deferred: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = deferred or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for a in child.names:  # "import pkg.mod.name" runs the longest prefix that is a module
                    target = a.name
                    while "." in target and target not in modules:
                        target = target.rpartition(".")[0]
                    named(a.name if target == top else target, "import", child, inner)
            elif isinstance(child, ast.ImportFrom):
                import_from(child, inner)
            elif isinstance(child, ast.Call) and _call_name(child) == "import_module":
                import_module(child, inner)
            elif isinstance(child, ast.Call) and _call_name(child) == "lazy_factory" and child.args:
                first = child.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    consumed.add(id(first))
                    named(first.value, "lazy_factory", child, inner)
            elif (
                isinstance(child, ast.Constant)
                and isinstance(child.value, str)
                and id(child) not in consumed
                and id(child) not in docstrings
            ):
                m = _REFERENCE.match(child.value)
                if m and m["module"] != top:
                    # a bare dotted string is a reference only when it names a module; "module:attr" must
                    named(m["module"], "string", child, inner, exact=bool(m["attr"]))
            visit(child, inner)

    visit(tree, False)
    return tuple(out)
