"""The workflow's two modes: evaluate (the seeded grid) and release (results/releases/{name} only)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEFILE = REPO / "workflow" / "Snakefile"
pytestmark = pytest.mark.skipif(shutil.which("snakemake") is None, reason="snakemake is not installed")


def _run(wd: Path, config: dict, *args):
    (wd / "config.yaml").write_text(yaml.safe_dump(config))
    env = dict(os.environ, PYTHONPATH=str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(SNAKEFILE),
        "-d",
        str(wd),
        "--configfile",
        str(wd / "config.yaml"),
        "--cores",
        "2",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)


def _config(wd: Path, **release_edits) -> dict:
    n = 257
    rng = np.random.default_rng(4)
    pd.DataFrame({"a": rng.integers(0, 5, n), "b": rng.integers(0, 3, n)}).to_csv(wd / "d.csv", index=False)
    (wd / "domain.yaml").write_text("a: 5\nb: {size: 3, kind: categorical}\n")
    release = {
        "data": "d.csv",
        "domain": "domain.yaml",
        "tables": [{"marginal": ["a", "b"]}, {"prefix": ["a"]}],
        "budget": {"mu": 1.0},
    }
    release.update(release_edits)
    return {
        "grid": [{"schemas": ["cps"], "workloads": ["marginal:1"], "methods": ["rp"], "budgets": [1.0], "seeds": [0]}],
        "release": False,
        "releases": {"r1": release},
    }, n


def test_release_mode_writes_the_release_and_nothing_derived_from_the_records(tmp_path):
    config, n = _config(tmp_path)
    proc = _run(tmp_path, config)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "results" / "releases" / "r1"
    info = json.loads((out / "release.json").read_text())
    assert info["sampler"] == "discrete" and info["seeded"] is False
    assert (out / "a__b.csv").is_file() and (out / "answers" / "prefix__a.csv").is_file()
    # nothing but the release under results/releases/: its log and benchmark live elsewhere
    assert sorted(p.name for p in (tmp_path / "results" / "releases").iterdir()) == ["r1"]
    assert (tmp_path / "results" / "logs" / "releases" / "r1.log").is_file()
    assert (tmp_path / "results" / "benchmarks" / "releases" / "r1.tsv").is_file()
    # The experiments of the grid are plan-only (release: false): no rule but release read d.csv.
    assert not list((tmp_path / "results").glob("*/measurements.h5"))
    for p in (tmp_path / "results").rglob("*"):
        if p.is_file() and p.suffix in (".json", ".log", ".csv") and "releases" in p.parts:
            assert '"records"' not in p.read_text()


@pytest.mark.parametrize("edit, message", [({"seed": 0}, "'seed'"), ({"tables": [{"marginal": ["zz"]}]}, "'zz'")])
def test_a_bad_release_fails_before_any_job(tmp_path, edit, message):
    config, _ = _config(tmp_path, **edit)
    proc = _run(tmp_path, config, "-n")
    assert proc.returncode != 0 and message in proc.stderr + proc.stdout
    assert not (tmp_path / "results").exists()


_HOSTILE_RELEASES = {
    # a second budget: Snakemake's loader would keep the last one (500x the budget reviewed)
    "a duplicated key": ("r1", "    budget: {rho: 0.1}\n    budget: {rho: 50}\n", "'budget' is given twice"),
    # a name the workflow uses for its own folders
    "a reserved name": ("benchmarks", "    budget: {rho: 0.1}\n", "release name 'benchmarks'"),
    "another reserved name": ("logs", "    budget: {rho: 0.1}\n", "release name 'logs'"),
    # YAML 1.1 reads 1:30 as 90; the strict reader keeps it a string, which no budget accepts
    "a sexagesimal epsilon": ("r1", "    budget: {epsilon: 1:30, delta: 1e-6}\n", "1:30"),
}


@pytest.mark.parametrize("case", sorted(_HOSTILE_RELEASES))
def test_hostile_releases_stop_the_workflow_before_any_job_and_write_nothing(tmp_path, case):
    name, budget, message = _HOSTILE_RELEASES[case]
    config, _ = _config(tmp_path)
    del config["releases"]
    text = yaml.safe_dump(config) + (
        f"releases:\n  {name}:\n    data: d.csv\n    domain: domain.yaml\n    tables: [{{marginal: [a, b]}}]\n" + budget
    )
    (tmp_path / "hostile.yaml").write_text(text)
    env = dict(os.environ, PYTHONPATH=str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(SNAKEFILE),
        "-d",
        str(tmp_path),
        "--configfile",
        str(tmp_path / "hostile.yaml"),
        "--cores",
        "1",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode != 0, proc.stdout[-2000:]
    assert message in proc.stderr + proc.stdout
    assert not (tmp_path / "results").exists()  # no job ran: nothing under results/releases/ or anywhere else
