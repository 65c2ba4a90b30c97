"""Every method through the workflow (hdmm and qs here; rp, rpplus and wff in test_workflow.py's tiny
grid, on the same workload and with the same checks), NI / * cells, and the paper configs and report.

Runs the snakemake CLI on a tiny grid in a temporary working directory (skips without snakemake).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from test_workflow import SNAKEFILE, jobs_run, needs_snakemake, snakemake  # noqa: I001  (tests/ is on sys.path)

from querysmasher.accounting import Budget
from querysmasher.hdmm import plan_hdmm
from querysmasher.planning import make_plan

REPO = Path(__file__).resolve().parents[1]
METHODS = ["hdmm", "qs"]  # the methods test_workflow.py's tiny grid leaves out
EVERY_METHOD = {
    "schemas": {"tiny": {"spec": "synthetic:n=4,d=3", "data": {"synthetic": {"records": 300, "seed": 1}}}},
    "grid": [  # both methods on one workload (hdmm: NI, no abs), and hdmm where it runs
        {"schemas": ["tiny"], "workloads": ["prefix:1+abs:2"], "methods": METHODS},
        {"schemas": ["tiny"], "workloads": ["prefix:1,2"], "methods": ["hdmm"]},
    ],
    "unsupported": "skip",
    "solve": {"batch_max_cells": 8, "batch_max_seconds": 0.0, "batch_size": 10},
    "paper": {"table": 4, "workloads": {"prefix:1,2": "prefix", "prefix:1+abs:2": "abs"}},
}


def test_workflow_schema_accepts_every_method_the_cli_accepts():
    import jsonschema

    from querysmasher.methods import method_names

    schema = yaml.safe_load((REPO / "config" / "schema.yaml").read_text())
    item = schema["properties"]["grid"]["items"]["properties"]["methods"]["items"]
    for method in method_names():  # the method table every face reads
        jsonschema.validate(method, item)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate("Not A Method!", item)


@pytest.fixture(scope="module")
def every_method_run(tmp_path_factory):
    if not (REPO / "workflow" / "Snakefile").is_file():
        pytest.skip("no workflow")
    wd = tmp_path_factory.mktemp("every")
    proc = snakemake(wd, config=EVERY_METHOD, timeout=900, check=False)
    if proc.returncode != 0 and "snakemake" in proc.stderr and "No module named" in proc.stderr:
        pytest.skip("snakemake is not installed")
    assert proc.returncode == 0, proc.stderr[-4000:]
    return wd, proc


@needs_snakemake
def test_hdmm_and_qs_run_end_to_end(every_method_run):
    wd, proc = every_method_run
    jobs = jobs_run(proc)
    # 3 experiments, hdmm on abs set aside (NI): 2 run, both released (64 cells: hdmm fits)
    for rule in ("decompose", "allocate", "measure", "reconstruct", "evaluate"):
        assert jobs[rule] == 2, rule
    for workload, slug in (("prefix:1,2", "prefix-1-2"), ("prefix:1+abs:2", "prefix-1_abs-2")):
        for method in METHODS if "abs" in workload else ["hdmm"]:
            path = wd / "results" / f"tiny__{slug}__{method}__beta1__seed0" / "metrics.json"
            if method == "hdmm" and "abs" in workload:
                assert not path.exists()
                continue
            m = json.loads(path.read_text())
            if method == "hdmm":
                expect = plan_hdmm("synthetic:n=4,d=3", workload, Budget.from_beta(1.0)).rmse
            else:
                expect = make_plan("synthetic:n=4,d=3", workload, method, Budget.from_beta(1.0)).rmse
            assert m["predicted_rmse"] == pytest.approx(expect, rel=1e-6), (workload, method)
            assert m["empirical_rmse"] > 0 and m["records"] == 300 and m["privacy"]["beta"] == 1.0
            assert {"measure", "reconstruct"} <= set(m["phases"])
            if method == "qs":
                assert m["lower_bound_rmse"] <= m["predicted_rmse"] and m["certified"]


@needs_snakemake
def test_paper_table_of_the_tiny_grid(every_method_run):
    wd, _ = every_method_run
    df = pd.read_csv(wd / "results" / "paper" / "table4.csv")
    assert len(df) == 3
    ni = df[df.status == "NI"]
    assert list(zip(ni.method, ni.workload)) == [("hdmm", "abs")]
    assert (
        df[df.status != "NI"]["rmse"].notna().all() and (df.status.fillna("") != "*").all()
    )  # 64 cells: hdmm releases
    qs = df[df.method == "qs"]
    assert qs["lower_bound_rmse"].notna().all() and (qs["gap"] >= 0).all()
    md = (wd / "results" / "paper" / "table4.md").read_text()
    assert "| n | Workload | #Queries | HDMM | QS | QS lower bound (gap) |" in md and "NI" in md
    assert (wd / "results" / "paper" / "figures" / "table4-rmse-vs-n.png").read_bytes()[:4] == b"\x89PNG"
    again = snakemake(wd, "-n")
    assert "Nothing to be done" in again.stdout + again.stderr


@needs_snakemake
def test_report_has_the_paper_table_with_its_caption(every_method_run, tmp_path):
    wd, _ = every_method_run
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
    html = out.read_text(errors="replace")
    assert "table4.md" in html and "Table 4: RMSE of 1-way" in html


@needs_snakemake
def test_unsupported_method_is_a_config_error_unless_skipped(tmp_path):
    cfg = {**EVERY_METHOD, "unsupported": "error"}
    cfg.pop("paper")
    proc = snakemake(tmp_path, "-n", config=cfg, check=False)
    assert proc.returncode != 0 and not jobs_run(proc)
    out = proc.stdout + proc.stderr
    assert "tiny__prefix-1_abs-2__hdmm__beta1__seed0" in out and "does not support non-product families" in out


@needs_snakemake
def test_hdmm_above_its_domain_limit_plans_without_release(tmp_path):
    cfg = {
        "grid": [{"schemas": ["synthetic:n=10,d=8"], "workloads": ["marginal:1"], "methods": ["hdmm"]}]
    }  # 10^8 cells
    jobs = jobs_run(snakemake(tmp_path, "-n", config=cfg))
    assert jobs["allocate"] == 1 and jobs["evaluate"] == 1 and "measure" not in jobs and "reconstruct" not in jobs


@needs_snakemake
@pytest.mark.parametrize(
    "table",
    # tables 2, 3 and 6 by default (one dry run each, 2-4 s), 4, 5 and 7 with the slow tests (4-6 s)
    [pytest.param(t, marks=() if t in (2, 3, 6) else pytest.mark.slow) for t in range(2, 8)],
)
def test_paper_configs_parse(tmp_path, table):
    """Each config/paper/table{N}.yaml merged over config/config.yaml, as from the repo root (dry run
    of the first stage: the full DAG needs the decompositions)."""
    (tmp_path / "config").mkdir()
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(SNAKEFILE),
        "-d",
        str(REPO),
        "-n",
        "--cores",
        "2",
        "--configfile",
        str(REPO / "config" / "config.yaml"),
        str(REPO / "config" / "paper" / f"table{table}.yaml"),
        "--until",
        "decompose",
        "--nolock",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cfg = yaml.safe_load((REPO / "config" / "paper" / f"table{table}.yaml").read_text())
    expected = sum(len(g["schemas"]) * len(g["workloads"]) * len(g["methods"]) for g in cfg["grid"])
    assert jobs_run(proc).get("decompose", 0) <= expected
