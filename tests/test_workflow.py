"""The Snakemake workflow (workflow/Snakefile) and its library side (querysmasher.pipeline).

Workflow tests run the snakemake CLI on tiny configs in a temporary working directory
(``-s workflow/Snakefile -d TMP --configfile TMP/config.yaml``); they skip when snakemake is not
installed (``pip install -e '.[workflow]'``).
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from querysmasher import accounting
from querysmasher.accounting import Budget
from querysmasher.errors import InputError
from querysmasher.io import read_kind
from querysmasher.pipeline import cache, config, datasets, fingerprint, layout, steps
from querysmasher.planning import make_plan

REPO = Path(__file__).resolve().parents[1]
SNAKEFILE = REPO / "workflow" / "Snakefile"
HAVE_SNAKEMAKE = (
    shutil.which("snakemake") is not None
    or subprocess.run([sys.executable, "-c", "import snakemake"], capture_output=True).returncode == 0
)
needs_snakemake = pytest.mark.skipif(
    not HAVE_SNAKEMAKE, reason="snakemake is not installed (pip install -e '.[workflow]')"
)
JOB_LINE = re.compile(r"^\s*(?:local)?(?:rule|checkpoint) (\w+):$", re.M)  # dry runs indent the jobs of a group

TINY = {
    "schemas": {"tiny": {"spec": "synthetic:n=4,d=3", "data": {"synthetic": {"records": 300, "seed": 1}}}},
    "grid": [
        {
            "schemas": ["tiny"],
            "workloads": ["prefix:1+abs:2"],
            "methods": ["rp", "wff", "rpplus"],
            "budgets": [1.0],
            "seeds": [0],
        }
    ],
    # the 2-way abs subproblem (16 cells, one dense term) gets its own solve job; the rest is batched
    "solve": {"batch_max_cells": 8, "batch_max_seconds": 0.0, "batch_size": 10},
}


def snakemake(
    workdir: Path, *args: str, config: dict | None = None, timeout: float = 300, check: bool = True
) -> subprocess.CompletedProcess:
    """Run the workflow in ``workdir`` (config written to workdir/config.yaml when given)."""
    if config is not None:
        (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(SNAKEFILE),
        "-d",
        str(workdir),
        "--configfile",
        str(workdir / "config.yaml"),
        "--cores",
        "2",
        *args,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc


def jobs_run(proc: subprocess.CompletedProcess) -> dict[str, int]:
    """Rule -> number of jobs, from the job list snakemake prints."""
    out: dict[str, int] = {}
    for rule in JOB_LINE.findall(proc.stdout + proc.stderr):
        out[rule] = out.get(rule, 0) + 1
    return out


def h5_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.h5") if not p.name.startswith("."))


# ----------------------------------------------------------------------------- library side (fast)


def test_experiment_names_are_safe_and_distinct():
    specs = ["hybrid:1,2,3", "prefix:1+affine:2", "random[seed=3]:1,2@0.5", "range:1@2+abs:2", "custom:data/q.json"]
    names = {layout.experiment_name("synthetic:n=10,d=40", w, "qs", 1.0, 0) for w in specs}
    assert len(names) == len(specs)
    for n in names:
        assert re.fullmatch(r"[A-Za-z0-9._-]+", n) and n.count("__") == 4
    assert layout.experiment_name("cps", "hybrid:1,2", "rp", "rho=0.5", 7) == "cps__hybrid-1-2__rp__rho0.5__seed7"
    long = layout.slugify("+".join(f"prefix:{k}" for k in range(1, 40)))
    assert len(long) <= 80


def test_budgets_in_every_form():
    assert accounting.parse_budget(2.0).beta == 2.0
    assert accounting.parse_budget("rho=0.5").beta == pytest.approx(1.0)
    assert accounting.parse_budget("mu=2").beta == pytest.approx(4.0)
    assert accounting.parse_budget("eps=1,delta=1e-6").beta == pytest.approx(0.056029, abs=1e-6)
    with pytest.raises(InputError, match="budget"):
        accounting.parse_budget("rh=1")


def test_batches_are_deterministic_bounded_and_mostly_stable():
    rng = np.random.default_rng(0)
    keys = [f"{x:020x}" for x in rng.integers(0, 2**62, size=300)]
    batches = cache.plan_batches(keys, 20)
    assert batches == cache.plan_batches(list(reversed(keys)), 20)
    assert sorted(k for b in batches for k in b) == sorted(keys) and max(map(len, batches)) <= 20
    # adding one subproblem changes few batches (content-defined boundaries): the rest stay shared
    more = cache.plan_batches(keys + [f"{12345:020x}"], 20)
    assert len({cache.batch_id(b) for b in batches} - {cache.batch_id(b) for b in more}) <= 3


def test_subproblem_files_are_written_once_and_read_back(tmp_path):
    from querysmasher.decompose import decompose
    from querysmasher.schema import parse_schema
    from querysmasher.workload import parse_workload

    d = decompose(parse_workload("prefix:1+abs:2", parse_schema("synthetic:n=4,d=3")))
    for key, g in d.distinct().items():
        path = tmp_path / f"{key}.h5"
        assert cache.write_subproblem(key, g, d.store, path)
        before = path.stat().st_mtime_ns
        time.sleep(0.01)
        assert not cache.write_subproblem(key, g, d.store, path)  # present: never touched
        assert path.stat().st_mtime_ns == before
        k2, g2, store2 = cache.read_subproblem(path)
        assert k2 == key and g2.canonical(store2)[0] == key
        np.testing.assert_allclose(g2.dense(store2), g.dense(d.store))
    assert not list(tmp_path.glob(".*"))  # no temporary files left


def test_library_fingerprint_follows_exactly_the_code_a_stage_runs(tmp_path):
    pkg = tmp_path / "querysmasher"
    shutil.copytree(Path(fingerprint.__file__).parents[1], pkg, ignore=shutil.ignore_patterns("__pycache__"))

    def prints():
        return {
            (s, m): fingerprint.library_fingerprint(s, m, root=pkg)
            for s, m in [
                ("solve", "rp"),
                ("solve", "qs"),
                ("reconstruct", None),
                ("measure", None),
                ("decompose", None),
            ]
        }

    base = prints()
    assert all(v.startswith(__import__("querysmasher").__version__ + "+") for v in base.values())
    (pkg / "reconstruct.py").write_text((pkg / "reconstruct.py").read_text() + "\n# edited\n")
    after = prints()
    assert after[("reconstruct", None)] != base[("reconstruct", None)]
    assert all(after[k] == base[k] for k in base if k != ("reconstruct", None))
    (pkg / "solvers" / "qs.py").write_text((pkg / "solvers" / "qs.py").read_text() + "\n# edited\n")
    again = prints()
    assert again[("solve", "qs")] != after[("solve", "qs")] and again[("solve", "rp")] == after[("solve", "rp")]
    (pkg / "decompose.py").write_text((pkg / "decompose.py").read_text() + "\n# edited\n")
    last = prints()
    assert last[("solve", "rp")] != again[("solve", "rp")] and last[("decompose", None)] != again[("decompose", None)]
    (pkg / "workload.py").write_text(
        (pkg / "workload.py").read_text() + "\n# edited\n"
    )  # decompose writes the workload file
    assert prints()[("decompose", None)] != last[("decompose", None)]


def test_planning_fingerprints_exclude_the_release_code(tmp_path):
    """Editing the release code (noise, records, measure, reconstruct, HDMM's release) re-runs no
    planning job: every allocate and solve fingerprint stays; measure's changes (issue 20: the grid
    re-ran every allocate and rpplus solve on such edits). A solver's edit changes only its solves."""
    pkg = tmp_path / "querysmasher"
    shutil.copytree(Path(fingerprint.__file__).parents[1], pkg, ignore=shutil.ignore_patterns("__pycache__"))
    keys = (
        [("allocate", m) for m in ("qs", "rpplus", "hdmm", "mm")]
        + [("solve", m) for m in ("qs", "rpplus")]
        + [("measure", None)]
    )

    def prints():
        return {k: fingerprint.library_fingerprint(*k, root=pkg) for k in keys}

    base = prints()
    for f in ("noise.py", "data.py", "measure.py", "reconstruct.py", "hdmm/release.py"):
        (pkg / f).write_text((pkg / f).read_text() + "\n# edited\n")
    after = prints()
    assert after[("measure", None)] != base[("measure", None)]
    assert {k: v for k, v in after.items() if k[0] != "measure"} == {k: v for k, v in base.items() if k[0] != "measure"}
    (pkg / "solvers" / "rpplus.py").write_text((pkg / "solvers" / "rpplus.py").read_text() + "\n# edited\n")
    last = prints()
    assert last[("solve", "rpplus")] != after[("solve", "rpplus")]
    assert all(last[k] == after[k] for k in keys if k != ("solve", "rpplus") and k[0] != "allocate")


@pytest.mark.parametrize(
    "stage, functions, libraries, not_functions",
    [
        (
            "measure",
            {"steps.measure_to_file", "datasets.load_dataset", "datasets.synthetic_records"},
            {"querysmasher.measure", "querysmasher.data"},
            {"steps.decompose_to_files"},
        ),
        (
            "solve",
            {"steps.solve_subproblem_files", "cache.read_subproblem", "cache.write_solutions"},
            {"querysmasher.io", "querysmasher.planfile", "querysmasher.decompose", "querysmasher.workloadfile"},
            {"cache.write_subproblem"},
        ),
        (
            "decompose",
            {
                "steps.decompose_to_files",
                "cache.plan_batches",
                "cache.write_batch",
                "cache.estimate_cost",
                "cache.BASE_MEM_MB",
                "layout.solver_namespace",
                "layout.RESULTS",
            },
            {"querysmasher.atomic", "querysmasher.linalg"},
            {"steps.solve_subproblem_files"},
        ),
        (
            "evaluate",
            {"evaluate.evaluate", "evaluate.read_benchmark", "layout.solve_benchmark_path"},
            {"querysmasher.reconstruct", "querysmasher.atomic"},
            {"report.aggregate"},
        ),
        (
            "aggregate",
            {"report.aggregate", "report._figures", "layout.budget_slug"},
            {"querysmasher.atomic"},
            {"evaluate.evaluate"},
        ),
    ],
)
def test_library_fingerprint_follows_the_pipeline_functions_across_modules(stage, functions, libraries, not_functions):
    """The source a stage's fingerprint hashes: its pipeline functions and those they use in other
    pipeline modules (by name or by an import in their body), not the other stages' functions; and
    the library modules they import."""
    sources, libs = fingerprint._function_closure(fingerprint.STAGES[stage][1])
    assert functions <= set(sources) and not (not_functions & set(sources))
    assert libraries <= libs


def test_check_config_reports_the_library_error():
    cfg = {"grid": [{"schemas": ["synthetic:n=4,d=3"], "workloads": ["prefix:4"], "methods": ["rp"]}]}
    with pytest.raises(InputError, match="K = 4 must be between 1"):
        config.check_config(cfg)
    cfg = {
        "schemas": {"s": {"spec": "cps", "data": {"csv": "no/such.csv"}}},
        "grid": [{"schemas": ["s"], "workloads": ["prefix:1"], "methods": ["rp"]}],
    }
    with pytest.raises(InputError, match="no/such.csv"):
        config.check_config(cfg)
    cfg["schemas"]["s"]["data"]["synthetic"] = {"records": 10, "seed": 0}
    assert datasets.resolve_data_source(cfg["schemas"]["s"]["data"]) == {"kind": "synthetic", "records": 10, "seed": 0}


def test_synthetic_records_are_seeded_and_in_the_domain():
    from querysmasher.schema import parse_schema

    s = parse_schema("adult")
    a, b = datasets.synthetic_records(s, 2000, 3), datasets.synthetic_records(s, 2000, 3)
    assert np.array_equal(a.codes, b.codes) and not np.array_equal(
        a.codes, datasets.synthetic_records(s, 2000, 4).codes
    )
    assert (a.codes >= 0).all() and (a.codes < np.array(s.sizes)).all()


def test_solvers_with_workload_context_get_their_own_namespace(tmp_path, monkeypatch):
    """A solver with prepare() sees the decomposition of the experiment's workload, and its
    solutions live in a folder keyed by that workload (never shared with another workload)."""
    from querysmasher import solvers
    from querysmasher.solvers.closed_form import RPSolver

    seen = []

    class ContextSolver(RPSolver):
        name = "ctx"

        def prepare(self, decomposition):
            seen.append(decomposition.workload.spec)

    monkeypatch.setitem(solvers.SOLVERS, "ctx", lambda **o: ContextSolver())
    monkeypatch.chdir(tmp_path)
    wpath = tmp_path / "w.h5"
    steps.write_workload_file(wpath, "synthetic:n=4,d=2", "prefix:1,2")
    steps.decompose_to_files(wpath, tmp_path / "d.json", tmp_path / "m.json", method="ctx")
    man = json.loads((tmp_path / "m.json").read_text())
    assert re.fullmatch(layout.NS_PATTERN, man["namespace"]) and man["namespace"].startswith("ctx-c")
    subs = [layout.subproblem_path(s["key"]) for s in man["subproblems"]]
    steps.solve_subproblem_files(subs, tmp_path / "s.h5", method="ctx", workload_path=wpath)
    assert seen == ["prefix:1,2", "prefix:1,2"]  # decompose (early check), then the solve
    sols, _ = cache.read_solutions([tmp_path / "s.h5"])
    assert set(sols) == {s["key"] for s in man["subproblems"]}


def test_context_solver_subproblems_share_one_solve_job(tmp_path, monkeypatch):
    """Every solve job of a context solver re-runs the decomposition first, so its subproblems go
    into as few batches as the time budget allows (with batch_size 2, a context-free solver of the
    same workload gets several)."""
    monkeypatch.chdir(tmp_path)
    wpath = tmp_path / "w.h5"
    steps.write_workload_file(wpath, "synthetic:n=5,d=4", "random:2")
    jobs = {}
    for method in ("rp", "rpplus"):
        steps.decompose_to_files(wpath, tmp_path / "d.json", tmp_path / f"m-{method}.json", method=method, batch_size=2)
        man = json.loads((tmp_path / f"m-{method}.json").read_text())
        assert all(s["batched"] for s in man["subproblems"] if s["cells"] > 1)
        jobs[method] = len(man["solve_files"])
    assert jobs["rpplus"] == 1 and jobs["rp"] > 1


def test_step_functions_write_the_library_plan_file_for_compact_lowrank_views(tmp_path, monkeypatch):
    """decompose -> solve files -> allocate, as the rules run them, for qs with factored views:
    the solve files keep L beside V, and the plan file (L only for those views) is byte for byte
    the one make_plan + save_plan writes."""
    from querysmasher.planfile import save_plan

    monkeypatch.chdir(tmp_path)
    wpath = tmp_path / "w.h5"
    steps.write_workload_file(wpath, "synthetic:n=6,d=3", "prefix:1+affine:2")
    opts = {"lowrank": "always"}
    steps.decompose_to_files(wpath, tmp_path / "d.json", tmp_path / "m.json", method="qs", options=opts)
    man = json.loads((tmp_path / "m.json").read_text())
    steps.solve_subproblem_files(
        [layout.subproblem_path(s["key"]) for s in man["subproblems"]], tmp_path / "s.h5", method="qs", options=opts
    )
    sols, _ = cache.read_solutions([tmp_path / "s.h5"])
    assert any(s.query_factor is not None for s in sols.values())
    steps.allocate_to_files(
        wpath,
        tmp_path / "d.json",
        [tmp_path / "s.h5"],
        tmp_path / "plan.h5",
        tmp_path / "plan.json",
        method="qs",
        budget=1.0,
    )
    save_plan(
        make_plan("synthetic:n=6,d=3", "prefix:1+affine:2", "qs", Budget.from_beta(1.0), solver_options=opts),
        tmp_path / "ref.h5",
    )
    ours, ref = plan_file_content(tmp_path / "plan.h5"), plan_file_content(tmp_path / "ref.h5")
    assert any(k.endswith("@storage") for k in ref)
    assert sorted(k for k in set(ours) | set(ref) if ours.get(k) != ref.get(k)) == []


# ----------------------------------------------------------------------------- snakemake CLI


BAD_CONFIGS = [
    ({"solve": {"bath_size": 3}}, "config key 'solve.bath_size': unknown key"),
    ({"relase": False}, "config key 'relase': unknown key"),
    (
        {"grid": [{"schemas": ["tiny"], "workloads": ["prefix:1"], "methods": ["rpp"]}]},
        "config grid method 'rpp': unknown method",
    ),
    ({"grid": [{"schemas": ["tiny"], "workloads": ["prefx:1"], "methods": ["rp"]}]}, "unknown family 'prefx'"),
    (
        {"grid": [{"schemas": ["tiny"], "workloads": ["prefix:1"], "methods": ["rp"], "budgets": ["rh=1"]}]},
        "config key 'grid.0.budgets.0'",
    ),
    (
        {"schemas": {"tiny": {"spec": "synthetic:n=4,d=3", "data": {"csv": "missing.csv"}}}},
        "config data csv 'missing.csv': does not exist",
    ),
]


@needs_snakemake
@pytest.mark.parametrize(
    "change, message",
    [
        # one case per stage of the check runs by default (the strict reader and JSON schema: 1; the
        # library's check_config: 2; a data source: 5), the rest with the slow tests: 2.5 s a process
        pytest.param(*case, marks=() if i in (1, 2, 5) else pytest.mark.slow)
        for i, case in enumerate(BAD_CONFIGS)
    ],
    ids=[m.split(":")[0].replace(" ", "-")[:30] + str(i) for i, (_, m) in enumerate(BAD_CONFIGS)],
)
def test_bad_config_fails_before_any_job(tmp_path, change, message):
    cfg = {**TINY, **change}
    proc = snakemake(tmp_path, config=cfg, check=False)
    assert proc.returncode != 0
    assert message in proc.stderr + proc.stdout
    assert not jobs_run(proc) and not (tmp_path / "results").exists()


@needs_snakemake
def test_default_configs_parse_and_plan_their_grids(tmp_path):
    """config/config.yaml (adult's CSV is absent from this working directory: synthetic
    fallback) and paper-table4.yaml merged over it, as from the repo root."""
    shutil.copy(REPO / "config" / "config.yaml", tmp_path / "config.yaml")
    proc = snakemake(tmp_path, "-n")
    assert jobs_run(proc)["decompose"] == 6 and "workload" not in jobs_run(proc)  # decompose writes the workload file
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(SNAKEFILE),
        "-d",
        str(tmp_path),
        "-n",
        "--cores",
        "2",
        "--configfile",
        str(REPO / "config" / "config.yaml"),
        str(REPO / "config" / "paper-table4.yaml"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = jobs_run(proc)
    assert jobs["decompose"] == 42 and "measure" not in jobs  # 2 schemas x 7 workloads x 3 methods, plan only


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One complete run of the tiny grid (2 experiments); tests copy it before changing it."""
    if not HAVE_SNAKEMAKE:
        pytest.skip("snakemake is not installed")
    wd = tmp_path_factory.mktemp("tiny")
    proc = snakemake(wd, config=TINY)
    return wd, proc


def _copy_run(tiny_run, tmp_path) -> Path:
    wd = tmp_path / "wd"
    shutil.copytree(tiny_run[0], wd, symlinks=True)  # copy2 keeps mtimes; .snakemake metadata too
    return wd


@needs_snakemake
def test_tiny_grid_runs_end_to_end(tiny_run):
    wd, proc = tiny_run
    jobs = jobs_run(proc)
    assert jobs["solve"] == 3 and jobs["solve_batch"] == 3  # per method: the 16-cell view alone, the rest batched
    for rule in ("decompose", "allocate", "measure", "reconstruct", "evaluate"):
        assert jobs[rule] == 3, rule
    # rpplus reads workload context: its solutions are in a folder of their own (-c{workload id})
    assert sorted(p.name.split("-c")[0] for p in (wd / "results" / "solves").iterdir()) == ["rp", "rpplus", "wff"]
    for method in ("rp", "wff", "rpplus"):
        name = f"tiny__prefix-1_abs-2__{method}__beta1__seed0"
        m = json.loads((wd / "results" / name / "metrics.json").read_text())
        # the plan assembled from shared files is the plan of the one-process pipeline
        assert m["predicted_rmse"] == pytest.approx(
            make_plan("synthetic:n=4,d=3", "prefix:1+abs:2", method, Budget.from_beta(1.0)).rmse, rel=1e-9
        )
        assert m["empirical_rmse"] > 0 and m["predicted_rmse"] > 0 and m["records"] == 300
        assert set(m["phases"]) >= {"decompose", "solve", "allocate", "measure", "reconstruct"}
        assert m["peak_memory_mb"] > 0 and m["privacy"]["rho"] == 0.5
        p = json.loads((wd / "results" / name / "plan.json").read_text())
        assert p["predicted_rmse"] == pytest.approx(m["predicted_rmse"]) and {"beta", "rho", "mu", "epsilon"} <= set(
            p["privacy"]
        )
    table = (wd / "results" / "tables" / "rmse.csv").read_text()
    assert "predicted_rmse_rp" in table and "empirical_rmse_wff" in table and "predicted_rmse_rpplus" in table
    for fig in ("rmse.png", "time_vs_views.png", "memory_vs_views.png"):
        assert (wd / "results" / "figures" / fig).read_bytes()[:4] == b"\x89PNG"
    again = snakemake(wd, "-n")
    assert "Nothing to be done" in again.stdout + again.stderr


def plan_file_content(path: Path) -> dict:
    """Every attribute and dataset of a plan file, as bytes, except the phase timings of its
    summary (wall-clock seconds: two runs of the same code differ there and nowhere else)."""
    import h5py

    out: dict = {}

    def attrs(name, obj):
        for k in sorted(obj.attrs):
            v = obj.attrs[k]
            if k == "summary":
                d = json.loads(v)
                del d["seconds"], d["phase_seconds"]
                v = json.dumps(d, sort_keys=True)
            out[f"{name}@{k}"] = repr(v)

    def visit(name, obj):
        attrs(name, obj)
        if isinstance(obj, h5py.Dataset):
            a = obj[()]
            out[name] = (str(a.dtype), a.shape, repr(a.tolist()) if a.dtype.kind == "O" else a.tobytes())

    with h5py.File(path, "r") as f:
        attrs("/", f)
        f.visititems(visit)
    return out


@needs_snakemake
@pytest.mark.slow  # its own snakemake run (14 s): qsplus's plan path is tested in-process by tests/test_qsplus*.py
def test_qsplus_runs_through_the_workflow(tmp_path):
    """qsplus, a whole-workload planner (it plans in allocate: no solve job), is measured,
    reconstructed and evaluated like every method; its predicted RMSE is the library's plan's
    (to its certified gap) and below qs's."""
    cfg = {
        "schemas": TINY["schemas"],
        "grid": [
            {
                "schemas": ["tiny"],
                "workloads": ["prefix:1+abs:2"],
                "methods": ["qsplus"],
                "budgets": [1.0],
                "seeds": [0],
            }
        ],
    }
    jobs = jobs_run(snakemake(tmp_path, config=cfg))
    assert "solve" not in jobs and "solve_batch" not in jobs
    for rule in ("decompose", "allocate", "measure", "reconstruct", "evaluate"):
        assert jobs[rule] == 1, rule
    m = json.loads((tmp_path / "results" / "tiny__prefix-1_abs-2__qsplus__beta1__seed0" / "metrics.json").read_text())
    lib = make_plan("synthetic:n=4,d=3", "prefix:1+abs:2", "qsplus", Budget.from_beta(1.0))
    qs = make_plan("synthetic:n=4,d=3", "prefix:1+abs:2", "qs", Budget.from_beta(1.0))
    assert m["method"] == "qsplus" and m["records"] == 300 and m["empirical_rmse"] > 0
    assert m["predicted_rmse"] == pytest.approx(lib.rmse, rel=1e-4) and m["predicted_rmse"] < qs.rmse * (1 - 1e-3)


@needs_snakemake
@pytest.mark.parametrize("method", ["rp", "wff", "rpplus"])
def test_workflow_plan_files_are_the_library_plan_files(tiny_run, tmp_path, method):
    """plan.h5 assembled from the shared subproblem and solve files holds, byte for byte, what
    the one-process library path (make_plan + save_plan) writes: same views, keys, mechanisms,
    losses, noise scales, summary (phase timings aside)."""
    from querysmasher.planfile import save_plan

    wd, _ = tiny_run
    name = f"tiny__prefix-1_abs-2__{method}__beta1__seed0"
    save_plan(make_plan("synthetic:n=4,d=3", "prefix:1+abs:2", method, Budget.from_beta(1.0)), tmp_path / "plan.h5")
    ours, ref = plan_file_content(wd / "results" / name / "plan.h5"), plan_file_content(tmp_path / "plan.h5")
    assert any(k.startswith("solutions/") for k in ref) and "views/sigma2" in ref
    assert sorted(k for k in set(ours) | set(ref) if ours.get(k) != ref.get(k)) == []


@needs_snakemake
@pytest.mark.slow  # a second run over a copy of the tiny grid (11 s)
def test_adding_an_experiment_with_solved_subproblems_runs_no_solve(tiny_run, tmp_path):
    wd = _copy_run(tiny_run, tmp_path)
    solves = {p: p.stat().st_mtime_ns for p in (wd / "results" / "solves").rglob("*.h5")}
    subs = {p: p.stat().st_mtime_ns for p in (wd / "results" / "subproblems").rglob("*.h5")}
    cfg = json.loads(json.dumps(TINY))
    cfg["grid"][0]["seeds"] = [0, 1]  # two new experiments, same subproblems
    proc = snakemake(wd, config=cfg)
    jobs = jobs_run(proc)
    assert "solve" not in jobs and "solve_batch" not in jobs
    assert jobs["measure"] == 3 and jobs["allocate"] == 3  # only the new experiments
    assert "decompose" not in jobs  # their problems' files (workload, decomposition) are shared
    assert {p: p.stat().st_mtime_ns for p in solves} == solves
    assert {p: p.stat().st_mtime_ns for p in subs} == subs


@needs_snakemake
def test_changing_one_value_reruns_only_what_it_affects(tiny_run, tmp_path):
    wd = _copy_run(tiny_run, tmp_path)  # nothing is due there (test_tiny_grid_runs_end_to_end)

    def changed(cfg) -> dict:
        return jobs_run(snakemake(wd, "-n", config=cfg))

    cfg = json.loads(json.dumps(TINY))
    cfg["schemas"]["tiny"]["data"]["synthetic"]["seed"] = 2  # other records: release and evaluation only
    assert changed(cfg) == {"measure": 3, "reconstruct": 3, "evaluate": 3, "aggregate": 1, "all": 1}
    cfg = json.loads(json.dumps(TINY))
    cfg["reconstruct"] = {"csv": True}  # an extra output of reconstruct
    assert changed(cfg) == {"reconstruct": 3, "evaluate": 3, "aggregate": 1, "all": 1}
    cfg = json.loads(json.dumps(TINY))
    cfg["grid"][0]["budgets"] = ["rho=0.25"]  # another budget: allocation and later stages only
    assert changed(cfg) == {"allocate": 3, "measure": 3, "reconstruct": 3, "evaluate": 3, "aggregate": 1, "all": 1}
    cfg = json.loads(json.dumps(TINY))
    cfg["grid"][0]["methods"] = ["rp"]  # fewer experiments: nothing to recompute but the aggregate
    assert changed(cfg) == {"aggregate": 1, "all": 1}


@needs_snakemake
def test_report(tiny_run, tmp_path):
    wd, _ = tiny_run
    out = tmp_path / "report.html"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-s",
            str(SNAKEFILE),
            "-d",
            str(wd),
            "--configfile",
            str(wd / "config.yaml"),
            "--report",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert out.stat().st_size > 10_000


@needs_snakemake
@pytest.mark.slow  # a killed run and its resume (11 s)
def test_a_killed_run_resumes_without_redoing_finished_solves(tmp_path):
    """SIGKILL (snakemake and its jobs) in the middle of the solves; the rerun redoes nothing that
    had finished, and no file under a final name is half-written."""
    cfg = {
        "grid": [{"schemas": ["synthetic:n=6,d=4"], "workloads": ["random:2"], "methods": ["wff"]}],
        "release": False,
        "solve": {"batch_max_cells": 0, "batch_max_seconds": 0.0},  # 10 single solve jobs
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(SNAKEFILE),
        "-d",
        str(tmp_path),
        "--configfile",
        str(tmp_path / "config.yaml"),
        "--cores",
        "1",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    solves = tmp_path / "results" / "solves" / "wff"
    deadline = time.time() + 120
    try:
        while time.time() < deadline and len(list(solves.glob("[0-9a-f]*.h5"))) < 3:
            time.sleep(0.1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    done = {p: p.stat().st_mtime_ns for p in solves.glob("[0-9a-f]*.h5")}
    assert 3 <= len(done) < 10, "the run was not killed in the middle of the solves"
    for p in h5_files(tmp_path / "results"):  # everything under a final name is complete
        assert read_kind(p)
    subprocess.run([*cmd, "--unlock"], capture_output=True, timeout=120, check=True)
    rerun = snakemake(tmp_path, "--rerun-incomplete")
    jobs = jobs_run(rerun)
    assert 0 < jobs.get("solve", 0) <= 10 - len(done) + 1  # +1: a job killed right after its rename
    unchanged = [p for p, t in done.items() if p.stat().st_mtime_ns == t]
    assert len(unchanged) >= len(done) - 1
    assert (tmp_path / "results" / "tables" / "rmse.csv").is_file()


def test_random_views_stream_from_recipes_to_a_plan_file_equal_to_the_library_one(tmp_path, monkeypatch):
    """[20]^4 random:1,2 (400-cell pair tops, kept as recipes): decompose writes no Gram of them,
    the solve job rebuilds each, allocate reads the solutions one at a time (StoredSolutions, at
    most ``keep`` held), and the plan file is the one make_plan + save_plan writes: the same
    arrays, but for the noise scales, whose costs the allocate job computes from the eigenpairs
    the solve file stores (the library's plan: from the dense X), equal to rounding, and the
    plan's note that its dense X were stored as eigenpairs (its solutions were already)."""
    import h5py

    from querysmasher.planfile import save_plan

    monkeypatch.chdir(tmp_path)
    wpath = tmp_path / "w.h5"
    steps.write_workload_file(wpath, "synthetic:n=20,d=4", "random:1,2")
    steps.decompose_to_files(wpath, tmp_path / "d.json", tmp_path / "m.json", method="qs")
    man = json.loads((tmp_path / "m.json").read_text())
    tops = [s for s in man["subproblems"] if s["cells"] == 400]
    assert len(tops) == 6
    for s in tops:
        with h5py.File(layout.subproblem_path(s["key"]), "r") as f:
            assert len(f["matrices"]) == 0 and s["key"] not in f["matrices"]
    steps.solve_subproblem_files(
        [layout.subproblem_path(s["key"]) for s in man["subproblems"]], tmp_path / "s.h5", method="qs"
    )

    stored = cache.StoredSolutions([tmp_path / "s.h5"], keep=2)
    assert set(stored) == {s["key"] for s in man["subproblems"]} and not stored._held
    for key in stored:
        assert stored[key].loss > 0
        assert len(stored._held) <= 2
    eager, _ = cache.read_solutions([tmp_path / "s.h5"])
    assert {k: s.loss for k, s in eager.items()} == {k: stored[k].loss for k in stored}
    one = sorted(stored)[0]
    assert set(stored.restricted([one])) == {one}
    with pytest.raises(KeyError):
        stored.restricted(["0" * 20])

    steps.allocate_to_files(
        wpath,
        tmp_path / "d.json",
        [tmp_path / "s.h5"],
        tmp_path / "plan.h5",
        tmp_path / "plan.json",
        method="qs",
        budget=1.0,
    )
    save_plan(make_plan("synthetic:n=20,d=4", "random:1,2", "qs", Budget.from_beta(1.0)), tmp_path / "ref.h5")
    ours, ref = plan_file_content(tmp_path / "plan.h5"), plan_file_content(tmp_path / "ref.h5")
    differ = sorted(k for k in set(ours) | set(ref) if ours.get(k) != ref.get(k))
    if "views/sigma2" in differ and "/@summary" in differ:  # the summary's figures follow sigma2's rounding
        a, b = (json.loads(ast.literal_eval(c["/@summary"])) for c in (ours, ref))
        assert a.keys() == b.keys()
        for k in a:
            assert a[k] == (pytest.approx(b[k], rel=1e-12) if isinstance(b[k], float) else b[k]), k
        differ.remove("/@summary")
    assert [k for k in differ if not k.endswith("@storage")] in ([], ["views/sigma2"])
    assert all(ref.get(k) == "'eigenpairs'" and k not in ours for k in differ if k.endswith("@storage"))
    with h5py.File(tmp_path / "plan.h5") as a, h5py.File(tmp_path / "ref.h5") as b:
        np.testing.assert_allclose(a["views/sigma2"][()], b["views/sigma2"][()], rtol=1e-12)


def _random_row_solved(tmp_path):
    """random:1,2 over [6]^3 written, decomposed and solved by qs into tmp_path (w.h5, d.json, s.h5)."""
    wpath = tmp_path / "w.h5"
    steps.write_workload_file(wpath, "synthetic:n=6,d=3", "random:1,2")
    steps.decompose_to_files(wpath, tmp_path / "d.json", tmp_path / "m.json", method="qs")
    man = json.loads((tmp_path / "m.json").read_text())
    steps.solve_subproblem_files(
        [layout.subproblem_path(s["key"]) for s in man["subproblems"]], tmp_path / "s.h5", method="qs"
    )
    return wpath


def test_plan_only_summary_file_evaluates_like_the_plan_and_refuses_to_measure(tmp_path, monkeypatch, cli):
    """allocate with mechanisms=False (allocate.store_mechanisms: false, plan-only experiments)
    writes the plan's summary alone: evaluate reports the same figures as from the full plan file,
    the file holds no solution, and measuring it is one input error (exit 2, no output)."""
    import h5py
    import pandas as pd

    from querysmasher.pipeline.evaluate import evaluate

    monkeypatch.chdir(tmp_path)
    wpath = _random_row_solved(tmp_path)
    out = {}
    for mech in (True, False):
        plan, js = tmp_path / f"plan-{mech}.h5", tmp_path / f"plan-{mech}.json"
        steps.allocate_to_files(
            wpath, tmp_path / "d.json", [tmp_path / "s.h5"], plan, js, method="qs", budget=1.0, mechanisms=mech
        )
        out[mech] = (json.loads(js.read_text()), evaluate(plan, tmp_path / f"metrics-{mech}.json"))
    assert out[True][0]["predicted_rmse"] == out[False][0]["predicted_rmse"]
    assert {k: v for k, v in out[True][1].items() if k != "phases"} == {
        k: v for k, v in out[False][1].items() if k != "phases"
    }
    with h5py.File(tmp_path / "plan-False.h5") as f:
        assert f.attrs["kind"] == "plan-summary" and "solutions" not in f
    data = tmp_path / "d.csv"
    pd.DataFrame(np.random.default_rng(0).integers(0, 6, (50, 3)), columns=["a0", "a1", "a2"]).to_csv(data, index=False)
    r = cli("measure", "--plan", tmp_path / "plan-False.h5", "--data", data, "--out", tmp_path / "meas.h5")
    assert r.returncode == 2 and "without its mechanisms" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "meas.h5").exists()


def test_plan_only_summary_without_the_max_variance_report(tmp_path, monkeypatch):
    """allocate.max_variance: false (with store_mechanisms: false): the summary leaves the largest
    query variance out and never computes it; the other figures, and evaluate's, are unchanged."""
    from querysmasher import maxvar
    from querysmasher.pipeline.evaluate import evaluate

    monkeypatch.chdir(tmp_path)
    wpath = _random_row_solved(tmp_path)
    out = {}
    for report in (True, False):
        if not report:
            monkeypatch.setattr(maxvar, "max_variance_of", lambda plan: pytest.fail("the report ran"))
        plan, js = tmp_path / f"plan-{report}.h5", tmp_path / f"plan-{report}.json"
        steps.allocate_to_files(
            wpath,
            tmp_path / "d.json",
            [tmp_path / "s.h5"],
            plan,
            js,
            method="qs",
            budget=1.0,
            mechanisms=False,
            max_variance=report,
        )
        out[report] = (json.loads(js.read_text()), evaluate(plan, tmp_path / f"metrics-{report}.json"))
    assert (
        "max_variance" in out[True][0]
        and "max_variance" not in out[False][0]
        and "max_variance_query" not in out[False][0]
    )
    assert {
        k: v for k, v in out[True][0].items() if not k.startswith(("max_variance", "seconds", "phase_seconds"))
    } == {k: v for k, v in out[False][0].items() if not k.startswith(("seconds", "phase_seconds"))}
    assert {k: v for k, v in out[True][1].items() if k != "phases"} == {
        k: v for k, v in out[False][1].items() if k != "phases"
    }
