"""The library-code fingerprint of each workflow stage: a hash of exactly the code a stage runs, so Snakemake
re-runs a rule when, and only when, that code changes.

A stage runs (a) library modules, hashed file by file with the package-internal modules they import
(:class:`querysmasher.importgraph.ImportGraph`: import statements and ``importlib.import_module``);
(b) functions of this package (``querysmasher.pipeline``), hashed by source together with every
module-level function, class or constant of the package they reference, followed across its modules
(so an edit to one step does not re-run the others), and the library modules those functions
import or reference; and (c) for a method, the code the method's name selects through the string
references of the method table and the plan-kind table (see :func:`library_fingerprint`), and no
other method's.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import inspect
import textwrap
from functools import cache
from pathlib import Path

from ..importgraph import ImportGraph

__all__ = ["STAGES", "METHOD_STAGES", "library_fingerprint"]

PACKAGE = __name__.rsplit(".", 1)[0]  # querysmasher.pipeline

# The notebook facade: ``Plan.measure`` and ``Measurements.reconstruct`` import it in their bodies
# for convenience, but no pipeline stage calls them, so following it would tie every stage to every
# module (an edit to reconstruct.py would re-run all solves).
FACADES = frozenset({"querysmasher.api"})

# stage -> (library modules it runs, pipeline functions it calls as "module.function")
STAGES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "decompose": (
        ("querysmasher.workloadfile", "querysmasher.decompose", "querysmasher.methods"),
        ("steps.write_workload_file", "steps.decompose_to_files"),
    ),
    "solve": (("querysmasher.io",), ("steps.solve_subproblem_files",)),
    "allocate": (("querysmasher.planfiles",), ("steps.allocate_to_files",)),
    "measure": (("querysmasher.measure", "querysmasher.data"), ("steps.measure_to_file",)),
    "reconstruct": (("querysmasher.reconstruct",), ("steps.reconstruct_to_file",)),
    "evaluate": (("querysmasher.reconstruct", "querysmasher.data"), ("evaluate.evaluate",)),
    "aggregate": ((), ("report.aggregate",)),
    "paper": (("querysmasher.paper",), ("paper_report.write_paper_outputs",)),
    "release": (("querysmasher.release",), ()),
}

# Stages that build the method's solver or planner and run it: solve, allocate (a whole-workload
# method or the max objective plans there) and release (plans a spec); decompose builds a per-view
# method's solver (its workload context, its cost estimates) but only reads a whole-workload
# method's entry in the method table.
METHOD_STAGES = frozenset({"decompose", "solve", "allocate", "release"})

# What the import closure follows: code that runs when a module is imported or its functions are
# called. String references ("lazy_factory", "string": the method table's and the plan-kind table's
# entries) name code loaded by a lookup of a method's or a plan kind's name: one entry is followed,
# the method's (library_fingerprint), never the whole table.
FOLLOWED = frozenset({"import", "import_module"})
PLANKINDS = "querysmasher.plankinds"


def _package_root() -> Path:
    return Path(__file__).resolve().parent.parent


def _module_closure(modules, graph: ImportGraph, leaves=()) -> dict[str, Path]:
    """Files of the modules and of every package-internal module they import (recursively); the
    imports of ``leaves`` are not followed (their own file is included). In a package ``__init__``
    only imports outside function bodies count (``hdmm`` loads its release code on demand)."""
    seen: dict[str, Path] = {}
    stack = [graph.package] + list(modules)
    while stack:
        mod = stack.pop()
        if mod in seen or mod not in graph.modules:
            continue
        path = seen[mod] = graph.modules[mod]
        parts = mod.split(".")
        stack.extend(".".join(parts[:i]) for i in range(1, len(parts)))  # parent packages run first
        if mod not in leaves:
            is_pkg = path.name == "__init__.py"
            stack.extend(
                e.target
                for e in graph.edges(mod)
                if e.kind in FOLLOWED and not (is_pkg and e.deferred) and e.target not in FACADES
            )
    return seen


@cache
def _operations_named(path: Path, mtime_ns: int, size: int) -> frozenset[str]:
    """Plan-kind operations a module calls by name: ``kind.op("measurements")``."""
    return frozenset(
        n.args[0].value
        for n in ast.walk(ast.parse(path.read_text()))
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "op"
        and n.args
        and isinstance(n.args[0], ast.Constant)
        and isinstance(n.args[0].value, str)
    )


def _kind_modules(method: str, files: dict[str, Path]) -> set[str]:
    """The modules of the method's plan kind that code reaching the plan-kind table runs: the record
    type (``kind_of`` checks it) and the operations that code names; none if it does not reach it."""
    from ..methods import get_method  # loads numpy only where it is used
    from ..plankinds import plan_kind  # in the body: the stage function's fingerprint follows it

    if PLANKINDS not in files:
        return set()
    kind = plan_kind(get_method(method).declared("plan_kind", "plan"))
    if kind is None:  # planning fails on it, with the message; nothing to hash
        return set()
    ops: set[str] = set()
    for path in files.values():
        st = path.stat()
        ops |= _operations_named(path, st.st_mtime_ns, st.st_size)
    refs = [kind.plan_type] + [getattr(kind, op) for op in sorted(ops) if getattr(kind, op, "")]
    return {ref.partition(":")[0] for ref in refs}


def _plugin_file(module: str) -> bytes:
    """The source of a module outside the package (a plugin's plan kind), found by its import spec."""
    spec = importlib.util.find_spec(module)
    return Path(spec.origin).read_bytes() if spec and spec.origin and Path(spec.origin).is_file() else b""


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
                where = owner[len(PACKAGE) + 1 :]
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
                            stack.extend((target[len(PACKAGE) + 1 :], a.name) for a in node.names)
                        elif target.split(".")[0] == top:
                            libraries.add(target)
                            libraries.update(f"{target}.{a.name}" for a in node.names)
            elif owner.split(".")[0] == top:
                libraries.add(owner)
        elif isinstance(obj, (bool, int, float, str, tuple, frozenset, dict)) and f"{mod}.{n}" not in out:
            out[f"{mod}.{n}"] = repr(obj)
    return out, libraries


def library_fingerprint(stage: str, method: str | None = None, *, root: str | Path | None = None) -> str:
    """``{version}+{hash}`` of exactly the library code a stage runs for ``method``: the import
    closure of its modules and of its pipeline functions' library modules, the source of those
    functions, and the code the method's name selects -- for the stages of ``METHOD_STAGES``, the
    module of the method's solver or planner class (decompose: a per-view method's only); for a stage
    whose code reaches the plan-kind table (measure, reconstruct, evaluate, release, allocate's plan
    file), the module of the kind's record type and of each operation the stage's code names
    (``kind.op("measurements")``) of the method's plan kind (``plan_kind`` in the method table) --
    with their import closures (a plugin's: the file of its class, the files of its kind's modules).
    Without ``method``, the code every method runs. Put in a rule's ``params:``, it makes Snakemake
    re-run the rule when that code changes (Snakemake does not see imported modules), and only then.

    ``root`` points at another copy of the package (tests); pipeline function sources are read from
    the imported package, the method and plan-kind tables too."""
    from .. import __version__  # in the body: the stage function's fingerprint follows it

    modules, functions = STAGES[stage]
    sources, libraries = _function_closure(functions)
    modules, leaves, plugin = set(modules) | libraries, (), b""
    if method:
        from ..methods import get_method  # loads numpy only where it is used

        m = get_method(method)
        if stage in METHOD_STAGES and not (stage == "decompose" and m.whole_workload):
            cls = type(m.build())  # the solver's or planner's class: its module runs in this stage
            modules.add(cls.__module__)
            if not cls.__module__.startswith("querysmasher."):  # a plugin: its version and its file
                plugin = m.origin.encode() + Path(inspect.getfile(cls)).read_bytes()
            if stage == "solve" and not hasattr(cls, "prepare"):
                # A context-free solve reads its Gram from a content-addressed file: the code that builds
                # Grams (families, workload, schema) cannot change its result without changing the key,
                # and of the plan file format it runs write_solution only. Their own files count, not their imports.
                leaves = ("querysmasher.decompose", "querysmasher.plan", "querysmasher.planfile")
    graph = ImportGraph(Path(root) if root else _package_root())
    files = _module_closure(modules, graph, leaves)
    outside: set[str] = set()  # a plugin's plan kind: its modules' files
    while method:  # the kind's modules may name further operations (to a fixed point)
        found = _kind_modules(method, files)
        outside |= {mod for mod in found if mod not in graph.modules}
        more = {mod for mod in found if mod in graph.modules} - set(files)
        if not more:
            break
        modules |= more
        files = _module_closure(modules, graph, leaves)
    plugin += b"".join(_plugin_file(m) for m in sorted(outside))
    h = hashlib.sha256()
    for mod, path in sorted(files.items()):
        h.update(mod.encode() + b"\0" + path.read_bytes() + b"\0")
    for name, src in sorted(sources.items()):
        h.update(name.encode() + b"\0" + src.encode() + b"\0")
    if method:
        h.update(method.encode() + plugin)
    return f"{__version__}+{h.hexdigest()[:16]}"
