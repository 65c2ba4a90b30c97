"""The workflow's code fingerprints follow the edges made by strings: a stage's hash covers the
plan-kind operations and the solver or planner its job's method selects (by the plan-kind table's
``"module:attribute"`` names and the method table's ``lazy_factory`` names), and no other method's.
Checked on the fingerprint function over an edited copy of the package (fast), and once with
``snakemake -n`` (slow)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from querysmasher.importgraph import ImportGraph
from querysmasher.pipeline import fingerprint

SRC = Path(fingerprint.__file__).resolve().parents[1]
REPO = SRC.parents[1]
PLANNING = ("decompose", "solve", "allocate")
RELEASE = ("measure", "reconstruct", "evaluate")
METHODS = ("rp", "qs", "rpplus", "mm", "hdmm", "qsplus")
PER_VIEW = ("rp", "qs", "rpplus")


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "querysmasher"
    shutil.copytree(SRC, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


@contextlib.contextmanager
def _edited(root: Path, *modules: str):
    """The copy with a line added to each module, restored on exit."""
    texts = {m: (root / m).read_text() for m in modules}
    try:
        for m, text in texts.items():
            (root / m).write_text(text + "\n# edited\n")
        yield
    finally:
        for m, text in texts.items():
            (root / m).write_text(text)


def _prints(root: Path) -> dict[tuple[str, str], str]:
    return {
        (s, m): fingerprint.library_fingerprint(s, m, root=root)
        for s in PLANNING + RELEASE
        for m in METHODS
        if s != "solve" or m in PER_VIEW
    }


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """One copy of the package (edits are undone after each test) and its fingerprints."""
    root = _copy(tmp_path_factory.mktemp("package"))
    return root, _prints(root)


def _changed(package, module: str) -> set[tuple[str, str]]:
    root, before = package
    with _edited(root, module):
        after = _prints(root)
    return {k for k in before if before[k] != after[k]}


@pytest.mark.parametrize(
    "method, module",
    [("hdmm", "hdmm/release.py"), ("qsplus", "marginal_family/release.py"), ("qsplus", "marginal_family/gls.py")],
)
def test_a_plan_kinds_release_module_reruns_its_methods_release_stages_only(package, method, module):
    """The module of a kind's check, measure, reconstruct and released-answers operations (named by
    string in the plan-kind table, reached by no import of the stages) is part of that method's
    measure, reconstruct and evaluate hashes, and of no planning hash, and of no other method's."""
    assert _changed(package, module) == {(s, method) for s in RELEASE}


def test_the_residual_kinds_release_modules_rerun_no_planning_stage(package):
    """The residual kind's operations live in the stages' own modules (measure.py, reconstruct.py),
    which every kind's jobs run: an edit re-runs release stages, never a planning one."""
    changed = _changed(package, "measure.py")
    assert {(s, "qs") for s in RELEASE} <= changed and not {k for k in changed if k[0] in PLANNING}
    changed = _changed(package, "reconstruct.py")
    assert {("reconstruct", "qs"), ("evaluate", "qs")} <= changed
    assert not {k for k in changed if k[0] in PLANNING or k[0] == "measure"}


def test_the_residual_kinds_own_module_reruns_the_residual_methods_release_stages_only(package):
    """residualkind.py (the residual kind's measurements, check, estimates and variances, named by
    string in the plan-kind table) is part of the release stages of every method whose plans are of
    kind ``plan``, and of no planning stage and no other kind's method."""
    assert _changed(package, "residualkind.py") == {(s, m) for s in RELEASE for m in ("rp", "qs", "rpplus", "mm")}
    # the measurement record is what every kind's release stages are written against, and no plan
    assert _changed(package, "measurement.py") == {(s, m) for s in RELEASE for m in METHODS}


@pytest.mark.parametrize(
    "method, module, others",
    [
        ("hdmm", "hdmm/plan.py", ("rp", "qs", "rpplus", "mm", "qsplus")),
        ("qsplus", "marginal_family/method.py", ("rp", "qs", "rpplus", "mm", "hdmm")),
        ("qsplus", "marginal_family/planner.py", ("rp", "qs", "rpplus", "mm", "hdmm")),
        # mm's planner and qsplus's reference plan build QSSolver: their allocate runs it too
        ("qs", "solvers/qs.py", ("rp", "rpplus", "hdmm")),
        ("mm", "planners/mm.py", ("rp", "qs", "rpplus", "hdmm", "qsplus")),
    ],
)
def test_a_methods_planner_module_reruns_its_allocate_and_no_other_methods(package, method, module, others):
    """The solver or planner class a method's name selects (a ``lazy_factory`` name in the method
    table) is part of that method's allocate hash (and solve's, for a solver) and of no other's."""
    changed = _changed(package, module)
    assert ("allocate", method) in changed and (method not in PER_VIEW or ("solve", method) in changed)
    assert not {k for k in changed if k[1] in others}


def test_decompose_runs_a_per_view_methods_solver_not_a_planner(package):
    """decompose builds a per-view method's solver (its cost estimates, its workload context) and
    only reads a whole-workload method's entry in the method table."""
    changed = _changed(package, "solvers/rpplus.py")
    assert ("decompose", "rpplus") in changed and ("decompose", "qs") not in changed
    assert not {k for k in _changed(package, "hdmm/plan.py") if k[0] == "decompose"}


def test_without_a_method_a_stage_hashes_no_methods_code(package):
    root = package[0]
    before = {s: fingerprint.library_fingerprint(s, root=root) for s in ("decompose", "allocate", "measure")}
    with _edited(root, "hdmm/release.py", "hdmm/plan.py", "marginal_family/release.py", "solvers/qs.py"):
        assert {s: fingerprint.library_fingerprint(s, root=root) for s in before} == before


def test_string_references_are_in_the_tables_the_fingerprint_resolves_per_method():
    """The fingerprint follows imports and resolves the method table, the solver registry and the
    plan-kind table by the job's method; a module naming modules by string elsewhere would escape
    it (its own stage table aside, whose names are what it hashes)."""
    graph = ImportGraph(SRC)
    registries = {"querysmasher.plankinds", "querysmasher.methods", "querysmasher.solvers"}
    found = {e.source for e in graph.all_edges() if e.kind in ("lazy_factory", "string")}
    assert registries <= found <= registries | {"querysmasher.pipeline.fingerprint"}, sorted(found)


def test_a_plugin_plan_kinds_modules_are_hashed_for_its_method(tmp_path, monkeypatch):
    """A planner plugin with a plan record of its own: its kind's operations live outside the
    package, and their files are part of its release stages' hashes (not of another method's)."""
    from querysmasher.methods import PLANNERS
    from querysmasher.plankinds import PLAN_KINDS, PlanKind

    (tmp_path / "toy_kind.py").write_text(
        "class ToyPlan:\n    file_kind = 'toy-plan'\n\n\ndef operation(*args, **kw):\n    pass\n"
    )
    (tmp_path / "toy_planner.py").write_text(
        "class ToyPlanner:\n    name = 'toykind'\n    plan_kind = 'toy-plan'\n\n"
        "    def plan(self, schema, workload, budget, *, objective='sum'):\n        pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from toy_planner import ToyPlanner

    op = "toy_kind:operation"
    kind = PlanKind(
        "toy-plan", "toy_kind:ToyPlan", False, save=op, load=op, measurements=op, check=op, estimates=op, variances=op
    )
    monkeypatch.setitem(PLAN_KINDS, "toy-plan", kind)
    monkeypatch.setitem(PLANNERS, "toykind", ToyPlanner)
    keys = [("measure", "toykind"), ("allocate", "toykind"), ("measure", "hdmm")]
    before = {k: fingerprint.library_fingerprint(*k) for k in keys}
    with _edited(tmp_path, "toy_kind.py"):
        after = {k: fingerprint.library_fingerprint(*k) for k in keys}
    # allocate saves the plan through the kind's save operation: its file too
    assert {k for k in keys if after[k] != before[k]} == {("measure", "toykind"), ("allocate", "toykind")}


# ----------------------------------------------------------------------------- snakemake (slow)


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("snakemake") is None, reason="snakemake is not installed (pip install -e '.[workflow]')"
)
def test_snakemake_reruns_only_the_edited_kinds_release_jobs(tmp_path):
    """A tiny grid of qs, hdmm and qsplus run once on a copy of the library (PYTHONPATH); after a
    line added to a kind's release module, ``snakemake -n`` lists that method's measure, reconstruct
    and evaluate jobs and nothing else (but the aggregate)."""
    lib = tmp_path / "src"
    root = _copy(lib)
    wd = tmp_path / "wd"
    wd.mkdir()
    (wd / "config.yaml").write_text(
        "schemas:\n  tiny: {spec: 'synthetic:n=4,d=3', data: {synthetic: {records: 300, seed: 1}}}\n"
        "grid:\n  - {schemas: [tiny], workloads: ['prefix:1+prefix:2'], methods: [qs, hdmm, qsplus], budgets: [1.0],"
        " seeds: [0]}\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(lib), os.environ.get("PYTHONPATH")]))}
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(REPO / "workflow" / "Snakefile"),
        "-d",
        str(wd),
        "--configfile",
        str(wd / "config.yaml"),
        "--cores",
        "2",
    ]

    def jobs(*args: str) -> set[tuple[str, str]]:
        proc = subprocess.run(cmd + list(args), capture_output=True, text=True, env=env, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        found, rule = set(), None
        for line in (proc.stdout + proc.stderr).splitlines():
            if m := re.match(r"\s*(?:local)?(?:rule|checkpoint) (\w+):$", line):
                rule = m[1]
            elif m := re.match(r"\s*wildcards: (?:experiment|problem)=([^,\s]+)", line):
                found.add((rule, m[1].split("__")[2]))  # schema__workload__method[__budget__seed]
        return found

    jobs()
    assert jobs("-n") == set()
    for method, module in (("hdmm", "hdmm/release.py"), ("qsplus", "marginal_family/release.py")):
        with _edited(root, module):
            assert jobs("-n") == {(s, method) for s in RELEASE}, module
