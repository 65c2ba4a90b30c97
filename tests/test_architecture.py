"""The library's layers (docs/architecture.md), enforced: the import graph of ``src/querysmasher`` --
every import statement, inside functions and under TYPE_CHECKING included -- has no cycle, and no
module imports a module of a higher layer."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "src" / "querysmasher"

# Bottom to top; a module may import modules of its own layer or of lower ones (never a cycle).
# Patterns are module names relative to the package (fnmatch-like: a trailing ".*" covers a package).
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("records and math", (
        "errors", "logs", "threads", "atomic", "documents", "filenames", "registry", "linalg", "schema", "families", "workload",
        "options", "accounting", "allocation", "noise", "data", "io", "h5read", "workloadfile", "paper", "plankinds", "tablefiles",
    )),
    ("mechanisms and decomposition", ("mechanisms", "mechanisms.*", "decompose", "fulldomain", "svd_bound")),
    ("solvers", ("solvers", "solvers.*", "queryfactor")),
    ("method table", ("methods",)),
    ("predicted error", ("variances", "maxvar")),
    ("plan record", ("plan", "planfile")),
    ("planners", ("planners", "planners.*", "hdmm", "hdmm.*", "marginal_family", "marginal_family.*")),
    ("planning", ("planning", "planfiles")),
    ("stages", ("measure", "reconstruct", "tables")),
    ("faces", ("api", "cli", "release", "testing", "pipeline", "pipeline.*", "__main__")),
]


def _modules() -> dict[str, Path]:
    mods = {}
    for p in ROOT.rglob("*.py"):
        rel = p.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = p
    return mods


def _targets(mod: str, path: Path, node: ast.AST, mods: dict) -> list[str]:
    """Package-internal modules an import statement names (relative imports resolved)."""
    pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            base = pkg.split(".") if pkg else []
            base = base[: len(base) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            if not (node.module or "").startswith("querysmasher"):
                return []
            target = node.module[len("querysmasher"):].lstrip(".")
        names = [f"{target}.{a.name}".strip(".") for a in node.names]
        out = [n if n in mods else target for n in names]
    else:
        out = [a.name[len("querysmasher"):].lstrip(".") for a in node.names if a.name.split(".")[0] == "querysmasher"]
    resolved = []
    for t in out:
        while t and t not in mods:
            t = t.rpartition(".")[0]
        if t:  # the package root itself re-exports lazily and is no edge
            resolved.append(t)
    return resolved


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    graph = {m: set() for m in mods}
    for m, p in mods.items():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph[m].update(t for t in _targets(m, p, node, mods) if t != m and not m.startswith(t + "."))
    return graph


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
    graph = import_graph()
    upward = sorted(f"{m} ({LAYERS[_layer(m)][0]}) -> {t} ({LAYERS[_layer(t)][0]})"
                    for m, ts in graph.items() if m for t in ts if _layer(t) > _layer(m))
    assert upward == []


def test_no_module_imports_another_modules_private_names():
    mods = _modules()
    found = []
    for m, p in mods.items():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("querysmasher")):
                found += [f"{m}: {a.name}" for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    assert found == []


@pytest.mark.parametrize("graph, cycles", [({"a": {"b"}, "b": {"a"}, "c": set()}, [["a", "b"]]), ({"a": {"b"}, "b": set()}, [])])
def test_the_cycle_finder_finds_cycles(graph, cycles):
    assert _cycles(graph) == cycles


def test_the_readme_layout_map_lists_every_module():
    readme = (ROOT.parents[1] / "README.md").read_text()
    layout = readme[readme.index("## Layout"):]
    layout = layout[:layout.index("```", layout.index("```") + 3)]
    missing = [m for m in _modules() if m and not re.search(rf"\b{re.escape(m.split('.')[-1])}\b", layout)]
    assert not missing, f"README's layout map does not list {missing}"
