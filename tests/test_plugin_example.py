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
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index", "--target", str(site), str(src)],
        capture_output=True, text=True,
    )
    if proc.returncode != 0 and "bdist_wheel" in proc.stderr:
        pytest.skip("the 'wheel' package is needed to build the example plugin without network (pip install -e '.[test]')")
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
    r = run(plugin_env, "-m", "querysmasher", "plan", "--schema", "synthetic:n=4,d=3", "--workload", "prefix:1,2+abs:2", "--method", "scaledid", "--json", "--out", str(tmp_path / "p.h5"))
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["method"] == "scaledid" and (tmp_path / "p.h5").is_file()
    # at scale 1 the plugin is ResidualPlanner's mechanism: the same predicted error, and never
    # better than the certified optimum of qs
    rp = make_plan("synthetic:n=4,d=3", "prefix:1,2+abs:2", "rp", Budget.from_beta(1.0))
    qs = make_plan("synthetic:n=4,d=3", "prefix:1,2+abs:2", "qs", Budget.from_beta(1.0))
    assert s["rmse"] == pytest.approx(rp.rmse, rel=1e-12) and s["rmse"] >= qs.rmse
    listed = run(plugin_env, "-m", "querysmasher", "plan", "--schema", "cps", "--workload", "prefix:1", "--method", "nope")
    assert listed.returncode == 2 and "scaledid" in listed.stderr


def test_plugin_passes_the_contract_kit(plugin_env):
    code = "from querysmasher.testing import check_solver; print(check_solver('scaledid', draws=500))"
    r = run(plugin_env, "-c", code)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("scaledid: 2 workloads") and "Monte Carlo (500 draws)" in r.stdout


@pytest.mark.slow
def test_plugin_own_tests(plugin_env):
    tests = run(plugin_env, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(EXAMPLE), str(EXAMPLE / "tests"))
    assert tests.returncode == 0, tests.stdout[-2000:]


@pytest.mark.slow  # ~35 s on 2 busy cores
@pytest.mark.skipif(not HAVE_SNAKEMAKE, reason="snakemake is not installed (pip install -e '.[workflow]')")
def test_one_experiment_workflow_grid(plugin_env, tmp_path):
    cfg = {
        "schemas": {"tiny": {"spec": "synthetic:n=4,d=3", "data": {"synthetic": {"records": 300, "seed": 1}}}},
        "grid": [{"schemas": ["tiny"], "workloads": ["prefix:1,2"], "methods": ["scaledid"], "budgets": [1.0], "seeds": [0]}],
        "solve": {"options": {"scaledid": {"scale": 0.5}}},  # a plugin's options reach its factory
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    r = run(plugin_env, "-m", "snakemake", "-s", str(REPO / "workflow" / "Snakefile"), "-d", str(tmp_path), "--configfile", str(tmp_path / "config.yaml"), "--cores", "2")
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
