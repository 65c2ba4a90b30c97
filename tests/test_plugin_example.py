"""The example solver plugin (examples/querysmasher-plugin-example), installed with pip into a
temporary folder (never into the shared environment), found through its entry point by the CLI,
the contract kit and a one-experiment workflow grid."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from querysmasher.accounting import Budget
from querysmasher.planning import make_plan

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "querysmasher-plugin-example"
HAVE_SNAKEMAKE = subprocess.run([sys.executable, "-c", "import snakemake"], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory):
    """Environment variables under which the example plugin is installed (PYTHONPATH)."""
    tmp = tmp_path_factory.mktemp("plugin")
    src = tmp / "src"
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    site = tmp / "site"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(site),
            str(src),
        ],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0 and "bdist_wheel" in proc.stderr:
        pytest.skip(
            "the 'wheel' package is needed to build the example plugin without network (pip install -e '.[test]')"
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (site / "qs_plugin_example" / "__init__.py").is_file()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(REPO / "src"), env.get("PYTHONPATH", "")])
    return env


def run(env, *args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=600, **kw)


def test_not_registered_without_the_plugin():
    from querysmasher.solvers import SOLVERS

    assert "scaledid" not in SOLVERS  # the plugin lives only in the temporary folder


def test_cli_plan_with_the_plugin(plugin_env, tmp_path):
    r = run(
        plugin_env,
        "-m",
        "querysmasher",
        "plan",
        "--schema",
        "synthetic:n=4,d=3",
        "--workload",
        "prefix:1,2+abs:2",
        "--method",
        "scaledid",
        "--json",
        "--out",
        str(tmp_path / "p.h5"),
    )
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["method"] == "scaledid" and (tmp_path / "p.h5").is_file()
    # at scale 1 the plugin is ResidualPlanner's mechanism: the same predicted error, and never
    # better than the certified optimum of qs
    rp = make_plan("synthetic:n=4,d=3", "prefix:1,2+abs:2", "rp", Budget.from_beta(1.0))
    qs = make_plan("synthetic:n=4,d=3", "prefix:1,2+abs:2", "qs", Budget.from_beta(1.0))
    assert s["rmse"] == pytest.approx(rp.rmse, rel=1e-12) and s["rmse"] >= qs.rmse
    listed = run(
        plugin_env, "-m", "querysmasher", "plan", "--schema", "cps", "--workload", "prefix:1", "--method", "nope"
    )
    assert listed.returncode == 2 and "scaledid" in listed.stderr


def test_plugin_passes_the_contract_kit(plugin_env):
    code = "from querysmasher.testing import check_solver; print(check_solver('scaledid', draws=500))"
    r = run(plugin_env, "-c", code)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("scaledid: 2 workloads") and "Monte Carlo (500 draws)" in r.stdout


@pytest.mark.slow
def test_plugin_own_tests(plugin_env):
    tests = run(
        plugin_env, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(EXAMPLE), str(EXAMPLE / "tests")
    )
    assert tests.returncode == 0, tests.stdout[-2000:]


@pytest.mark.slow  # ~35 s on 2 busy cores
@pytest.mark.skipif(not HAVE_SNAKEMAKE, reason="snakemake is not installed (pip install -e '.[workflow]')")
def test_one_experiment_workflow_grid(plugin_env, tmp_path):
    cfg = {
        "schemas": {"tiny": {"spec": "synthetic:n=4,d=3", "data": {"synthetic": {"records": 300, "seed": 1}}}},
        "grid": [
            {"schemas": ["tiny"], "workloads": ["prefix:1,2"], "methods": ["scaledid"], "budgets": [1.0], "seeds": [0]}
        ],
        "solve": {"options": {"scaledid": {"scale": 0.5}}},  # a plugin's options reach its factory
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    r = run(
        plugin_env,
        "-m",
        "snakemake",
        "-s",
        str(REPO / "workflow" / "Snakefile"),
        "-d",
        str(tmp_path),
        "--configfile",
        str(tmp_path / "config.yaml"),
        "--cores",
        "2",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    name = "tiny__prefix-1-2__scaledid__beta1__seed0"
    m = json.loads((tmp_path / "results" / name / "metrics.json").read_text())
    # every view at half cost: the allocation uses each mechanism's actual cost, so the predicted
    # error is ResidualPlanner's
    rp = make_plan("synthetic:n=4,d=3", "prefix:1,2", "rp", Budget.from_beta(1.0))
    assert m["predicted_rmse"] == pytest.approx(rp.rmse, rel=1e-9) and m["empirical_rmse"] > 0
    assert [p.name for p in (tmp_path / "results" / "solves").iterdir()][0].startswith("scaledid-o")
    log = (tmp_path / "results" / name / "logs" / "allocate.log").read_text()
    assert "querysmasher: allocated beta 1" in log  # the library's log lines reach the rule's log file


@pytest.mark.skipif(not HAVE_SNAKEMAKE, reason="snakemake is not installed (pip install -e '.[workflow]')")
def test_a_whole_workload_planner_plugin_works_in_every_face(plugin_env, tmp_path):
    """The example's ``fullident`` planner, found through the entry-point group
    ``querysmasher.planners`` with no edit to querysmasher: the CLI plans, measures and reconstructs
    with it, the API plans and measures with it, a release spec names it, a workflow grid runs it."""
    import numpy as np
    import pandas as pd

    schema, workload = "synthetic:n=3,d=2", "prefix:1+marginal:2"
    records = pd.DataFrame(np.random.default_rng(0).integers(0, 3, (200, 2)), columns=["a0", "a1"])
    records.to_csv(tmp_path / "d.csv", index=False)
    # the identity over the 9 cells: every query's variance is its size (the cells it sums) / beta
    # CLI: plan, measure, reconstruct
    plan = tmp_path / "p.h5"
    r = run(
        plugin_env,
        "-m",
        "querysmasher",
        "plan",
        "--schema",
        schema,
        "--workload",
        workload,
        "--method",
        "fullident",
        "--json",
        "--out",
        str(plan),
    )
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    # prefix:1: per attribute the prefixes A <= 0, 1, 2 sum 3, 6, 9 cells; marginal:2: 9 cells of one each
    from querysmasher.allocation import BUDGET_MARGIN

    expected = (
        (2 * (3 + 6 + 9) + 9) / (2 * 3 + 9) / (1 - BUDGET_MARGIN)
    )  # mean squared error at beta 1 (the allocation keeps a margin)
    assert s["method"] == "fullident" and s["rmse"] == pytest.approx(expected**0.5, rel=1e-12)
    r = run(
        plugin_env,
        "-m",
        "querysmasher",
        "measure",
        "--plan",
        str(plan),
        "--data",
        str(tmp_path / "d.csv"),
        "--out",
        str(tmp_path / "m.h5"),
        "--seed",
        "1",
    )
    assert r.returncode == 0, r.stderr
    r = run(
        plugin_env,
        "-m",
        "querysmasher",
        "reconstruct",
        "--plan",
        str(plan),
        "--measurements",
        str(tmp_path / "m.h5"),
        "--out",
        str(tmp_path / "a.h5"),
    )
    assert r.returncode == 0 and json.loads(r.stdout)["queries"] == 15, r.stderr
    # API
    code = (
        "import querysmasher as qs, pandas as pd; "
        "p = qs.make_plan('synthetic:n=3,d=2', 'prefix:1+marginal:2', method='fullident'); "
        f"a = p.measure(pd.read_csv({str(tmp_path / 'd.csv')!r}), seed=2).reconstruct(); print(p.rmse, len(a.view(0)))"
    )
    r = run(plugin_env, "-c", code)
    assert r.returncode == 0, r.stderr[-2000:]
    rmse, rows = r.stdout.split()
    assert float(rmse) == pytest.approx(expected**0.5, rel=1e-12) and int(rows) == 3
    # a release spec
    (tmp_path / "dom.yaml").write_text("a0: 3\na1: 3\n")
    (tmp_path / "spec.yaml").write_text(
        yaml.safe_dump(
            {
                "data": "d.csv",
                "domain": "dom.yaml",
                "tables": [{"prefix": ["a0"]}, {"marginal": ["a0", "a1"]}],
                "budget": {"rho": 0.5},
                "method": "fullident",
            }
        )
    )
    r = run(plugin_env, "-m", "querysmasher", "release", str(tmp_path / "spec.yaml"), "--out", str(tmp_path / "rel"))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["method"] == "fullident" and (tmp_path / "rel" / "answers" / "prefix__a0.csv").is_file()
    # a workflow grid
    wd = tmp_path / "wf"
    wd.mkdir()
    cfg = {
        "schemas": {"tiny": {"spec": schema, "data": {"synthetic": {"records": 300, "seed": 1}}}},
        "grid": [
            {
                "schemas": ["tiny"],
                "workloads": [workload],
                "methods": ["fullident", "rp"],
                "budgets": [1.0],
                "seeds": [0],
            }
        ],
    }
    (wd / "config.yaml").write_text(yaml.safe_dump(cfg))
    r = run(
        plugin_env,
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
    )
    assert r.returncode == 0, r.stderr[-3000:]
    m = json.loads((wd / "results" / "tiny__prefix-1_marginal-2__fullident__beta1__seed0" / "metrics.json").read_text())
    assert m["predicted_rmse"] == pytest.approx(expected**0.5, rel=1e-9) and m["empirical_rmse"] > 0


def test_a_planner_with_its_own_plan_kind_round_trips_through_separate_processes(plugin_env, tmp_path):
    """The example's ``noisymarginals`` planner returns a record of its own (kind
    ``example-marginals-plan``, declared in the entry-point group ``querysmasher.plan_kinds``): the
    plan file one process writes is loaded, privacy-checked and measured by a fresh
    ``querysmasher measure`` process, and reconstructed by a third, with no edit to querysmasher."""
    import h5py
    import numpy as np
    import pandas as pd

    pd.DataFrame(np.random.default_rng(0).integers(0, 3, (300, 2)), columns=["a0", "a1"]).to_csv(
        tmp_path / "d.csv", index=False
    )
    plan, meas, answers = tmp_path / "p.h5", tmp_path / "m.h5", tmp_path / "a.h5"
    r = run(
        plugin_env,
        "-m",
        "querysmasher",
        "plan",
        "--schema",
        "synthetic:n=3,d=2",
        "--workload",
        "prefix:1+marginal:2",
        "--method",
        "noisymarginals",
        "--json",
        "--out",
        str(plan),
    )
    assert r.returncode == 0, r.stderr
    with h5py.File(plan) as f:
        assert f.attrs["kind"] == "example-marginals-plan"
    r = run(
        plugin_env,
        "-m",
        "querysmasher",
        "measure",
        "--plan",
        str(plan),
        "--data",
        str(tmp_path / "d.csv"),
        "--out",
        str(meas),
        "--seed",
        "3",
    )
    assert r.returncode == 0, r.stderr
    with h5py.File(meas) as f:
        assert f.attrs["sampler"] == "numpy" and f.attrs["method"] == "noisymarginals"
    r = run(
        plugin_env,
        "-m",
        "querysmasher",
        "reconstruct",
        "--plan",
        str(plan),
        "--measurements",
        str(meas),
        "--out",
        str(answers),
        "--csv",
        str(tmp_path / "csv"),
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["queries"] == 2 * 3 + 9
    # the generic stages wrote its tables from the kind's estimates and variances: every view's
    # table is its noisy marginal, with standard error sqrt(sigma2)
    index = json.loads((tmp_path / "csv" / "tables.json").read_text())
    assert [t["view"] for t in index["tables"]] == [["a0"], ["a1"], ["a0", "a1"]] and all(
        t["file"] for t in index["tables"]
    )
    with h5py.File(plan) as f:
        sigma2 = f["views/sigma2"][()]
    frame = pd.read_csv(tmp_path / "csv" / index["tables"][2]["file"])
    assert np.allclose(frame["std_error"], np.sqrt(sigma2[2])) and len(frame) == 9
    # an edited plan file (its noise halved: twice the privacy cost) is refused before records are read
    with h5py.File(plan, "r+") as f:
        f["views/sigma2"][...] = f["views/sigma2"][()] / 2
    r = run(
        plugin_env,
        "-m",
        "querysmasher",
        "measure",
        "--plan",
        str(plan),
        "--data",
        str(tmp_path / "nope.csv"),
        "--out",
        str(tmp_path / "m2.h5"),
    )
    assert r.returncode == 2 and "exceeds its budget" in r.stderr, r.stderr
    # without the plugin the kind is unknown: one line naming the entry-point group
    bare = run(
        dict(os.environ),
        "-m",
        "querysmasher",
        "measure",
        "--plan",
        str(plan),
        "--data",
        str(tmp_path / "d.csv"),
        "--out",
        str(tmp_path / "m3.h5"),
    )
    assert bare.returncode == 2 and "querysmasher.plan_kinds" in bare.stderr, bare.stderr
