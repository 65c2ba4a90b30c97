"""The library-code fingerprint of each workflow stage: a hash of exactly the code a stage runs, so Snakemake re-runs a rule when, and only when, that code changes.

A stage runs (a) library modules, hashed file by file with their package-internal import closure,
and (b) functions of this package (``querysmasher.pipeline``), hashed by source together with every
module-level function, class or constant of the package they reference, followed across its modules
(so an edit to one step does not re-run the others), and the library modules those functions
import or reference.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import inspect
import textwrap
from functools import lru_cache
from pathlib import Path

__all__ = ["STAGES", "library_fingerprint"]

PACKAGE = __name__.rsplit(".", 1)[0]  # querysmasher.pipeline

# The notebook facade: ``Plan.measure`` and ``Measurements.reconstruct`` import it in their bodies
# for convenience, but no pipeline stage calls them, so following it would tie every stage to every
# module (an edit to reconstruct.py would re-run all solves).
FACADES = frozenset({"querysmasher.api"})

# stage -> (library modules it runs, pipeline functions it calls as "module.function")
STAGES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "decompose": (("querysmasher.workloadfile", "querysmasher.decompose", "querysmasher.methods"), ("steps.write_workload_file", "steps.decompose_to_files")),
    "solve": (("querysmasher.io",), ("steps.solve_subproblem_files",)),
    "allocate": (("querysmasher.planfiles",), ("steps.allocate_to_files",)),
    "measure": (("querysmasher.measure", "querysmasher.data"), ("steps.measure_to_file",)),
    "reconstruct": (("querysmasher.reconstruct",), ("steps.reconstruct_to_file",)),
    "evaluate": (("querysmasher.reconstruct", "querysmasher.data"), ("evaluate.evaluate",)),
    "aggregate": ((), ("report.aggregate",)),
    "paper": (("querysmasher.paper",), ("paper_report.write_paper_outputs",)),
    "release": (("querysmasher.release",), ()),
}


def _package_root() -> Path:
    return Path(__file__).resolve().parent.parent


def _module_file(root: Path, mod: str) -> tuple[Path, bool] | None:
    parts = mod.split(".")[1:]
    p = root.joinpath(*parts) if parts else root
    if (p / "__init__.py").is_file():
        return p / "__init__.py", True
    if p.with_suffix(".py").is_file():
        return p.with_suffix(".py"), False
    return None


def _imports_of(path: Path, mod: str, is_pkg: bool) -> frozenset[str]:
    """Package-internal modules imported by a module. In a package ``__init__`` only imports outside
    function bodies count (registries import optional solvers lazily, on demand). Cached by the
    file's mtime and size: one Snakefile parse asks for a dozen stages' closures over the same modules."""
    st = path.stat()
    return _parsed_imports(path, mod, is_pkg, st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=None)
def _parsed_imports(path: Path, mod: str, is_pkg: bool, mtime_ns: int, size: int) -> frozenset[str]:
    tree = ast.parse(path.read_text())
    top = mod.split(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if is_pkg and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(child, ast.Import):
                found.update(a.name for a in child.names if a.name.split(".")[0] == top)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = base[: len(base) - (child.level - 1)]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                if target.split(".")[0] == top:
                    found.add(target)
                    found.update(f"{target}.{a.name}" for a in child.names)
            visit(child)

    visit(tree)
    return frozenset(found)


def _module_closure(modules, root: Path, leaves=()) -> dict[str, Path]:
    """Files of the modules and of every package-internal module they import (recursively); the
    imports of ``leaves`` are not followed (their own file is included)."""
    top = "querysmasher"
    seen: dict[str, Path] = {}
    stack = [top] + list(modules)
    while stack:
        mod = stack.pop()
        if mod in seen:
            continue
        hit = _module_file(root, mod)
        if hit is None:
            continue
        path, is_pkg = hit
        seen[mod] = path
        parts = mod.split(".")
        stack.extend(".".join(parts[:i]) for i in range(1, len(parts)))  # parent packages run first
        if mod not in leaves:
            stack.extend(m for m in _imports_of(path, mod, is_pkg) if m not in FACADES)
    return seen


def _function_closure(names) -> tuple[dict[str, str], set[str]]:
    """Source of the named pipeline functions (``module.function``) and of every function, class or
    plain constant of this package they reference, by name or by an import in their body
    (recursively, across its modules: a name is looked up in the globals of the module that uses
    it); and the library modules they reference (hashed as files, with their import closure)."""
    out: dict[str, str] = {}
    libraries: set[str] = set()
    top = PACKAGE.split(".")[0]
    stack = [tuple(n.rsplit(".", 1)) for n in names]
    while stack:
        mod, n = stack.pop()
        g = vars(importlib.import_module(f"{PACKAGE}.{mod}"))
        if n not in g:
            continue
        obj = g[n]
        owner = getattr(obj, "__module__", "") or ""
        if inspect.isfunction(obj) or inspect.isclass(obj):
            if owner.startswith(PACKAGE + "."):
                where = owner[len(PACKAGE) + 1:]
                qual = f"{where}.{obj.__name__}"
                if qual in out:
                    continue
                src = inspect.getsource(obj)
                out[qual] = src
                for node in ast.walk(ast.parse(textwrap.dedent(src))):
                    if isinstance(node, ast.Name):
                        stack.append((where, node.id))
                    elif isinstance(node, ast.ImportFrom):
                        base = f"{PACKAGE}.{where}".split(".")[: -node.level] if node.level else []
                        target = ".".join(base + ([node.module] if node.module else []))
                        if target.startswith(PACKAGE + "."):
                            stack.extend((target[len(PACKAGE) + 1:], a.name) for a in node.names)
                        elif target.split(".")[0] == top:
                            libraries.add(target)
                            libraries.update(f"{target}.{a.name}" for a in node.names)
            elif owner.split(".")[0] == top:
                libraries.add(owner)
        elif isinstance(obj, (bool, int, float, str, tuple, frozenset, dict)) and f"{mod}.{n}" not in out:
            out[f"{mod}.{n}"] = repr(obj)
    return out, libraries


def library_fingerprint(stage: str, method: str | None = None, *, root: str | Path | None = None) -> str:
    """``{version}+{hash}`` of exactly the library code a stage runs: the package-internal import
    closure of its modules (plus, for ``solve`` and ``allocate``, the method's solver or planner
    module) and the source of its
    pipeline functions. Put in a rule's ``params:``, it makes Snakemake re-run the rule when that
    code changes (Snakemake does not see imported modules), and only then.

    ``root`` points at another copy of the package (tests); pipeline function sources are read from
    the imported package."""
    from .. import __version__

    modules, functions = STAGES[stage]
    sources, libraries = _function_closure(functions)
    modules, leaves, plugin = sorted(set(modules) | libraries), (), b""
    if stage in ("solve", "allocate") and method:
        from ..methods import get_method

        m = get_method(method)
        cls = type(m.build())  # the solver's or planner's class: its module runs in this stage
        modules.append(cls.__module__)
        if not cls.__module__.startswith("querysmasher."):  # a plugin: its version and its file
            plugin = m.origin.encode() + Path(inspect.getfile(cls)).read_bytes()
    if stage == "solve" and method:
        if not hasattr(cls, "prepare"):
            # A context-free solve reads its Gram from a content-addressed file: the code that builds
            # Grams (families, workload, schema) cannot change its result without changing the key,
            # and of the plan file format it runs write_solution only. Their own files count, not their imports.
            leaves = ("querysmasher.decompose", "querysmasher.plan", "querysmasher.planfile")
    base = Path(root) if root else _package_root()
    h = hashlib.sha256()
    for mod, path in sorted(_module_closure(modules, base, leaves).items()):
        h.update(mod.encode() + b"\0" + path.read_bytes() + b"\0")
    for name, src in sorted(sources.items()):
        h.update(name.encode() + b"\0" + src.encode() + b"\0")
    if method:
        h.update(method.encode() + plugin)
    return f"{__version__}+{h.hexdigest()[:16]}"
