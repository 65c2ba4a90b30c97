"""The library's layers (docs/architecture.md), enforced on the import graph of ``src/querysmasher``
(:class:`querysmasher.importgraph.ImportGraph`: every import statement, inside functions and under
TYPE_CHECKING included, ``importlib.import_module`` and ``lazy_factory`` names, and strings naming a
module): it has no cycle, no module imports a module of a higher layer, and nothing imports the
package root from inside (which hides the module that defines a name)."""

import ast
import re
import shutil
from pathlib import Path

import pytest

from querysmasher.importgraph import ImportGraph

ROOT = Path(__file__).resolve().parents[1] / "src" / "querysmasher"

# Bottom to top; a module may import modules of its own layer or of lower ones (never a cycle).
# Patterns are module names relative to the package (fnmatch-like: a trailing ".*" covers a package).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "records and math",
        (
            "errors",
            "logs",
            "threads",
            "atomic",
            "documents",
            "filenames",
            "registry",
            "linalg",
            "schema",
            "families",
            "workload",
            "options",
            "accounting",
            "allocation",
            "discrete_gaussian",
            "noise",
            "intervals",
            "data",
            "io",
            "h5read",
            "planheader",
            "workloadfile",
            "paper",
            "plankinds",
            "importgraph",
            "measurement",
        ),
    ),
    ("mechanisms and decomposition", ("mechanisms", "mechanisms.*", "decompose", "fulldomain", "svd_bound")),
    ("solvers", ("solvers", "solvers.*", "queryfactor")),
    ("method table", ("methods",)),
    ("predicted error", ("variances", "maxvar")),
    ("plan record", ("plan", "planfile", "residualkind")),
    ("planners", ("planners", "planners.*", "hdmm", "hdmm.*", "marginal_family", "marginal_family.*")),
    ("planning", ("planning", "planfiles")),
    ("stages", ("measure", "simultaneous", "tablefiles", "reconstruct", "consistent", "mbi_export")),
    ("faces", ("api", "cli", "release", "testing", "pipeline", "pipeline.*", "__main__")),
]

# The tables that name what implements them by string (docs/architecture.md): the plan-kind table
# (each kind's record and operations) and the method table (the built-in planners). Code above them
# looks a name up and the table's loader imports the entry, so these registrations point up by
# design: they are left out of the order and of the cycle check (every import elsewhere counts).
REGISTRIES = ("plankinds", "methods")
STRING_KINDS = ("lazy_factory", "string")


def _relative(mod: str, package: str) -> str:
    return mod[len(package) + 1 :] if mod != package else ""


def _modules(root: Path = ROOT) -> dict[str, Path]:
    g = ImportGraph(root)
    return {_relative(m, g.package): p for m, p in g.modules.items()}


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules it imports (relative names; the package root re-exports lazily and is no
    edge), registrations of the registries aside."""
    g = ImportGraph(root)
    graph = {_relative(m, g.package): set() for m in g.modules}
    for e in g.all_edges():
        source, target = _relative(e.source, g.package), _relative(e.target, g.package)
        if e.is_error or not target or (source in REGISTRIES and e.kind in STRING_KINDS):
            continue
        graph[source].add(target)
    return graph


def hidden_imports(root: Path = ROOT) -> list[str]:
    """Imports of the package root from inside it and names of modules that do not exist."""
    return sorted(str(e) for e in ImportGraph(root).all_edges() if e.is_error)


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{m} ({LAYERS[_layer(m)][0]}) -> {t} ({LAYERS[_layer(t)][0]})"
        for m, ts in graph.items()
        if m
        for t in ts
        if _layer(t) > _layer(m)
    )


def _layer(mod: str) -> int:
    for i, (_, patterns) in enumerate(LAYERS):
        for pat in patterns:
            if mod == pat or (pat.endswith(".*") and mod.startswith(pat[:-1])):
                return i
    raise AssertionError(f"module {mod!r} is in no layer of docs/architecture.md (tests/test_architecture.py LAYERS)")


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_every_module_has_a_layer_and_the_doc_lists_it():
    doc = (Path(__file__).resolve().parents[1] / "docs" / "architecture.md").read_text()
    for mod in _modules():
        if mod:
            _layer(mod)
            leaf = mod.split(".")[-1]
            assert re.search(rf"\b{re.escape(leaf)}\b", doc), f"docs/architecture.md does not mention {mod}"


def test_the_import_graph_has_no_cycle():
    assert _cycles(import_graph()) == []


def test_no_module_imports_a_higher_layer():
    assert upward_imports(import_graph()) == []


def test_no_module_imports_the_package_root_or_a_missing_module():
    assert hidden_imports() == []


def _copy_with(tmp_path: Path, module: str, code: str) -> Path:
    """A copy of the package with ``code`` appended to ``module`` (a path relative to the package)."""
    root = tmp_path / "querysmasher"
    shutil.copytree(ROOT, root, ignore=shutil.ignore_patterns("__pycache__"))
    (root / module).write_text((root / module).read_text() + "\n" + code)
    return root


def _in_function(*lines: str) -> str:
    return "def _later():\n" + "".join(f"    {line}\n" for line in lines)


@pytest.mark.parametrize(
    "module, code, edge",
    [
        (
            "errors.py",
            _in_function("import importlib", "return importlib.import_module('querysmasher.api')"),
            "errors (records and math) -> api (faces)",
        ),
        (
            "linalg.py",
            _in_function("from importlib import import_module", "return import_module('..planning', __name__)"),
            "linalg (records and math) -> planning (planning)",
        ),
        (
            "schema.py",
            "from .registry import lazy_factory\n_LATER = lazy_factory('querysmasher.planning', 'make_plan')\n",
            "schema (records and math) -> planning (planning)",
        ),
        (
            "solvers/qs.py",
            "from ..registry import lazy_factory\n_LATER = lazy_factory('querysmasher.hdmm.plan', 'X')\n",
            "solvers.qs (solvers) -> hdmm.plan (planners)",
        ),
        (
            "noise.py",
            "_OPERATION = 'querysmasher.measure:measure_plan_to_file'\n",
            "noise (records and math) -> measure (stages)",
        ),
    ],
)
def test_an_upward_import_made_by_a_string_is_refused(tmp_path, module, code, edge):
    """importlib.import_module, lazy_factory and "module:attribute" names count as imports."""
    assert edge in upward_imports(import_graph(_copy_with(tmp_path, module, code)))


@pytest.mark.parametrize(
    "module, code",
    [
        ("decompose.py", "from querysmasher import errors\n"),
        ("planning.py", _in_function("from querysmasher import make_plan", "return make_plan")),
        ("hdmm/plan.py", "from .. import make_plan\n"),  # a lazy re-export of the root, relatively
        ("measure.py", "import querysmasher\n"),
        ("plankinds.py", "_TYPO = 'querysmasher.hdmm.relase:measure_hdmm_to_file'\n"),  # names no module
    ],
)
def test_an_import_of_the_package_root_or_of_no_module_is_refused(tmp_path, module, code):
    found = hidden_imports(_copy_with(tmp_path, module, code))
    where = f"querysmasher.{module[:-3].replace('/', '.')}:"
    assert len(found) == 1 and found[0].startswith(where), found


def test_an_import_cycle_made_by_import_module_is_refused(tmp_path):
    late = _in_function("import importlib", "return importlib.import_module('.logs', __package__)")
    root = _copy_with(tmp_path, "errors.py", late)
    (root / "logs.py").write_text((root / "logs.py").read_text() + "\nfrom .errors import InputError\n")
    assert ["errors", "logs"] in _cycles(import_graph(root))


def test_the_real_package_root_reaches_its_exports_by_import_module():
    """The root's ``import_module(f".{module}", __name__)`` resolves over its own table of exports."""
    targets = {_relative(e.target, "querysmasher") for e in ImportGraph(ROOT).edges("querysmasher")}
    assert {"api", "plan", "solvers"} <= targets


def test_no_module_imports_another_modules_private_names():
    mods = _modules()
    found = []
    for m, p in mods.items():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("querysmasher")):
                found += [
                    f"{m}: {a.name}" for a in node.names if a.name.startswith("_") and not a.name.startswith("__")
                ]
    assert found == []


@pytest.mark.parametrize(
    "graph, cycles", [({"a": {"b"}, "b": {"a"}, "c": set()}, [["a", "b"]]), ({"a": {"b"}, "b": set()}, [])]
)
def test_the_cycle_finder_finds_cycles(graph, cycles):
    assert _cycles(graph) == cycles


def test_the_module_map_lists_every_module():
    doc = (ROOT.parents[1] / "docs" / "architecture.md").read_text()
    layout = doc[doc.index("## Module map") :]
    layout = layout[: layout.index("```", layout.index("```") + 3)]
    missing = [m for m in _modules() if m and not re.search(rf"\b{re.escape(m.split('.')[-1])}\b", layout)]
    assert not missing, f"docs/architecture.md's module map does not list {missing}"
