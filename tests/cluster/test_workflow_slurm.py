"""The project's real workflow, submitted to the local SLURM cluster through profiles/slurm."""

import json

import pytest
from slurm_helpers import REPO_ROOT, assert_snakemake_ok, run_snakemake_on_slurm

from querysmasher.accounting import Budget
from querysmasher.planning import make_plan

pytestmark = pytest.mark.cluster

TINY = """
schemas:
  tiny:
    spec: "synthetic:n=4,d=3"
    data:
      synthetic: {records: 500, seed: 3}
grid:
  - schemas: [tiny]
    workloads: ["prefix:1,2"]
    methods: [rp, qs]
    budgets: [1.0]
    seeds: [0]
release: true
"""


def test_real_workflow_runs_on_slurm(slurm_cluster, tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(TINY)
    proc = run_snakemake_on_slurm(
        tmp_path, REPO_ROOT / "workflow" / "Snakefile", extra_args=["--configfile", str(cfg)], timeout=1500
    )
    assert_snakemake_ok(proc)
    log = proc.stdout + proc.stderr
    assert "SLURM" in log and "jobid" in log.lower()  # jobs were submitted to the cluster, not run locally
    for method in ("rp", "qs"):
        exp = tmp_path / "results" / f"tiny__prefix-1-2__{method}__beta1__seed0"
        metrics = json.loads((exp / "metrics.json").read_text())
        expected = make_plan("synthetic:n=4,d=3", "prefix:1,2", method, Budget.from_beta(1.0)).rmse
        assert metrics["predicted_rmse"] == pytest.approx(expected, rel=1e-9)
        assert (exp / "answers.h5").is_file() and (exp / "measurements.h5").is_file()
    assert (tmp_path / "results" / "tables" / "rmse.csv").is_file()
    # grouped submission (profiles/slurm, rules/common.smk): the decompose jobs go in one
    # submission, each experiment chain (allocate, measure, reconstruct, evaluate) in one; counted
    # against the rule instances that ran (one benchmark file each)
    submitted = log.count("has been submitted with SLURM jobid")
    ran = len(list((tmp_path / "results").rglob("benchmarks/**/*.tsv")))
    assert "Group job prepare0" in log and "Group job experiment0_0" in log
    assert 0 < submitted <= ran / 2, (submitted, ran)
