"""The bench tools whose figures BENCHMARKS.md quotes: bench/makespan.py (the job graph read from
Snakemake's metadata records, list scheduling on K cores, the critical path, on a hand-made run
whose answers are worked out by hand) and bench/compare_tables.py."""

import base64
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _bench(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses resolve their annotations through it
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def makespan():
    return _bench("makespan")


def _record(wd: Path, output: str, rule: str, start: float, end: float, inputs: list[str]) -> None:
    meta = wd / ".snakemake" / "metadata"
    meta.mkdir(parents=True, exist_ok=True)
    name = base64.b64encode(output.encode()).decode().rstrip("=").replace("/", "@")
    (meta / name).write_text(
        json.dumps(
            {
                "rule": rule,
                "starttime": start,
                "endtime": end,
                "input": inputs,
                "job_hash": hash(output),
                "incomplete": False,
            }
        )
    )
    (wd / output).parent.mkdir(parents=True, exist_ok=True)
    (wd / output).write_text("x")


@pytest.fixture()
def run(tmp_path):
    """a (3 s) -> b (2 s); c (4 s) alone; d (1 s) after b and c: as run on one core."""
    _record(tmp_path, "r/a.txt", "ra", 0.0, 3.0, [])
    _record(tmp_path, "r/c.txt", "rc", 3.0, 7.0, [])
    _record(tmp_path, "r/b.txt", "rb", 7.0, 9.0, ["r/a.txt"])
    _record(tmp_path, "r/d.txt", "rd", 9.0, 10.0, ["r/b.txt", "r/c.txt"])
    return tmp_path


def test_the_job_graph_comes_from_the_records(makespan, run):
    jobs = makespan.read_jobs([run])
    by_rule = {j.rule: j for j in jobs.values()}
    assert set(by_rule) == {"ra", "rb", "rc", "rd"}
    assert by_rule["rb"].parents == {by_rule["ra"].key}
    assert by_rule["rd"].parents == {by_rule["rb"].key, by_rule["rc"].key}
    assert makespan.measured_wall(jobs) == 10.0


def test_list_scheduling_and_the_critical_path(makespan, run):
    jobs = makespan.read_jobs([run])
    assert makespan.simulate(jobs, 1) == pytest.approx(10.0)
    # two cores, longest ready job first: c and a at 0; b at 3 (ends 5); d after c (4) and b (5): 6
    assert makespan.simulate(jobs, 2) == pytest.approx(6.0)
    assert makespan.simulate(jobs, 64) == pytest.approx(6.0)
    seconds, chain = makespan.critical_path(jobs)
    assert seconds == pytest.approx(6.0) and [j.rule for j in chain] == ["ra", "rb", "rd"]
    # one more second per job: four jobs on one core, three on the critical path
    assert makespan.simulate(jobs, 1, overhead=1.0) == pytest.approx(14.0)
    assert makespan.simulate(jobs, 2, overhead=1.0) == pytest.approx(9.0)
    # a run twice as slow side by side: durations doubled, the graph unchanged
    assert makespan.simulate(makespan.slowed(jobs, 2.0), 2) == pytest.approx(12.0)


def test_calibration_recovers_the_overhead_of_a_run(makespan, tmp_path):
    """A one-core run whose jobs were 0.5 s apart: the overhead that reproduces its span is 0.5 s."""
    t = 0.0
    for i, seconds in enumerate([1.0, 2.0, 3.0]):
        _record(tmp_path, f"r/{i}.txt", f"r{i}", t, t + seconds, [f"r/{i - 1}.txt"] if i else [])
        t += seconds + 0.5
    jobs = makespan.read_jobs([tmp_path])
    assert makespan.measured_wall(jobs) == pytest.approx(7.0)
    assert makespan.calibrate(jobs, 1) == pytest.approx(1 / 3, rel=1e-6)  # 3 jobs share the 1 s of gaps


def test_cli_prints_the_projection(makespan, run, capsys):
    assert makespan.main([str(run), "--cores", "1", "2", "--startup", "5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [p["seconds"] for p in out["projections"]] == pytest.approx([15.0, 11.0])
    assert out["critical_path_seconds"] == pytest.approx(6.0) and out["jobs"] == 4


def test_compare_tables_finds_the_largest_difference_per_method(tmp_path):
    import pandas as pd

    compare = _bench("compare_tables").compare
    old = pd.DataFrame(
        {
            "table": [3, 3, 3],
            "dataset": ["cps", "cps", "adult"],
            "method": ["qs", "wff", "qs"],
            "rmse": [2.0, 3.0, 4.0],
            "lower_bound_rmse": [1.9, float("nan"), 3.9],
        }
    )
    new = old.copy()
    new.loc[2, "rmse"] = 4.0 * (1 + 1e-9)
    (tmp_path / "old.csv").write_text(old.to_csv(index=False))
    (tmp_path / "new.csv").write_text(new.to_csv(index=False))
    out = {(c, m): (n, rel) for c, m, n, rel in compare(str(tmp_path / "new.csv"), str(tmp_path / "old.csv"))}
    assert out[("rmse", "qs")][0] == 2 and out[("rmse", "qs")][1] == pytest.approx(1e-9, rel=1e-6)
    assert out[("rmse", "wff")] == (1, 0.0)
    assert ("lower_bound_rmse", "wff") not in out  # no finite pair to compare


def test_startup_workflow_has_one_job_per_kind_and_index(tmp_path):
    """bench/startup.py: its generated workflow dry-runs to one job of each kind per index, each
    stage script is what scripts/ do before their work, and the import split names the packages
    a stage loads."""
    import subprocess

    startup = _bench("startup")
    (tmp_path / "Snakefile").write_text(startup._snakefile(3))
    for k, body in startup.KINDS.items():
        if body is not None:
            (tmp_path / f"{k.replace('+', '_')}.py").write_text(body)
    out = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--quiet", "rules", "all"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    counts = {
        line.split()[0]: int(line.split()[1])
        for line in out.stdout.splitlines()
        if len(line.split()) == 2 and line.split()[1].isdigit()
    }
    assert {r: counts.get(r) for r in ("shell", "script", "stage", "stage_scipy")} == dict.fromkeys(
        ("shell", "script", "stage", "stage_scipy"), 3
    )
    assert "from querysmasher.pipeline import steps" in startup.KINDS["stage"]
    split = startup.import_split(1)
    assert split["querysmasher"] > 0 and split["numpy"] > 0 and "scipy" not in split


def test_requests_band_sets_aside_jobs_their_benchmark_did_not_sample():
    """bench/requests.py: a job that ended before Snakemake's first RSS sample records a few MB; it
    is unmeasured, not "outside the band"; a sampled job above 3 x peak + 500 MB is."""
    req = _bench("requests")
    unsampled = req.Job("allocate", "b.tsv", 591.0, 10.0, peak_mb=3.0, seconds=0.2)
    over = req.Job("allocate", "b.tsv", 4835.0, 84.0, peak_mb=346.0, seconds=306.8)
    fits = req.Job("allocate", "b.tsv", 1021.0, 84.0, peak_mb=346.0, seconds=306.8)
    assert unsampled.ratio is None and not unsampled.over and not unsampled.under
    assert over.over and not fits.over and not fits.under
