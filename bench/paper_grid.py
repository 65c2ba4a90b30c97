"""Benchmark: the paper's whole evaluation grid (config/paper/table{2..7}.yaml) through Snakemake.

Runs each table's config in turn from the repository root, cold (``--cold`` removes ``results/``
first), then again with nothing changed, and records per table the wall time of both runs, the
number of jobs run (per rule), the summed job time per rule and the largest peak RSS of any job
(both from the rules' ``benchmark:`` files). With ``--budget-change N`` it then runs table N's
config with every budget halved (a copy under bench/out/) and reports which rules ran: allocation
and later stages only, when the experiments' problems (workload, decomposition) and solves are
shared. That run rewrites ``results/paper/tableN.*`` for the halved budgets (every RMSE x sqrt(2)):
rerun table N to restore them. Prints one JSON line per run and writes ``bench/out/paper_grid.json``.
Usage:

    python bench/paper_grid.py [--cold] [--tables 2,3,4,5,6,7] [--cores all] [--budget-change 2]

The tables and figures land in ``results/paper/`` as for a user's run.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import shutil
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def benchmark_rows(since: float):
    """(rule, row) of every benchmark file under results/ written after ``since`` (Snakemake's
    per-job record; the rule is the file's stem, solve jobs are ``solve`` and solve batches ``batch``)."""
    for tsv in (ROOT / "results").glob("**/benchmarks/**/*.tsv"):
        if tsv.stat().st_mtime < since:
            continue
        rule = "batch" if tsv.stem.startswith("batch-") else ("solve" if "solve" in tsv.parts else tsv.stem)
        with tsv.open() as f:
            for row in csv.DictReader(f, delimiter="\t"):
                yield rule, row


def _number(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


def peak_rss_mb(since: float) -> float:
    """The largest max_rss of any job whose benchmark file was written after ``since``."""
    return max((v for _, row in benchmark_rows(since) if (v := _number(row.get("max_rss"))) == v), default=0.0)


def job_seconds_by_rule(since: float) -> dict[str, dict]:
    """Per rule, the jobs and their summed wall time since ``since``: where a run's time goes."""
    out: dict[str, dict] = {}
    for rule, row in benchmark_rows(since):
        r = out.setdefault(rule, {"jobs": 0, "seconds": 0.0})
        r["jobs"] += 1
        r["seconds"] = round(r["seconds"] + _number(row.get("s")), 1)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["seconds"]))


def jobs_by_rule(log: str) -> dict[str, int]:
    """Jobs run per rule: Snakemake logs each job as ``[local]rule NAME:`` or ``[local]checkpoint NAME:``
    (the job-stats table printed at the start misses jobs added by checkpoints)."""
    out: dict[str, int] = {}
    for m in re.finditer(r"^(?:local)?(?:rule|checkpoint) (\w+):$", log, re.MULTILINE):
        out[m.group(1)] = out.get(m.group(1), 0) + 1
    return dict(sorted(out.items()))


def halved_budget_config(table: int) -> Path:
    """Table ``table``'s config with every grid budget halved (numbers only: beta)."""
    import yaml

    cfg = yaml.safe_load((ROOT / f"config/paper/table{table}.yaml").read_text())
    for g in cfg["grid"]:
        g["budgets"] = [float(b) / 2 for b in g.get("budgets", [1.0])]
    path = ROOT / "bench" / "out" / f"table{table}-half-budget.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def run(table: int, cores: str, cfg: str | None = None) -> dict:
    cfg = cfg or f"config/paper/table{table}.yaml"
    t0, wall0 = time.time(), time.perf_counter()
    proc = subprocess.run(
        ["snakemake", "--cores", cores, "--configfile", cfg], cwd=ROOT, capture_output=True, text=True
    )
    wall = time.perf_counter() - wall0
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        print(log[-4000:])
        raise SystemExit(f"table {table}: snakemake exit {proc.returncode}")
    m = re.search(r"(\d+) of (\d+) steps \(100%\) done", log)
    return {
        "table": table,
        "wall_seconds": round(wall, 1),
        "jobs": int(m.group(2)) if m else 0,
        "rules": jobs_by_rule(log),
        "peak_job_rss_mb": round(peak_rss_mb(t0), 1),
        "job_seconds": job_seconds_by_rule(t0),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cold", action="store_true", help="remove results/ first (cold caches)")
    ap.add_argument("--tables", default="2,3,4,5,6,7")
    ap.add_argument("--cores", default="all")
    ap.add_argument(
        "--budget-change", type=int, default=0, metavar="N", help="then rerun table N with its budgets halved"
    )
    ap.add_argument("--out", default="bench/out/paper_grid.json")
    args = ap.parse_args()
    if args.cold:
        shutil.rmtree(ROOT / "results", ignore_errors=True)
    tables = [int(t) for t in args.tables.split(",") if t]  # "" with --budget-change: that run only
    out = {"cold": [], "rerun": []}
    for kind in ("cold", "rerun"):
        for t in tables:
            r = run(t, args.cores)
            r["run"] = kind
            print(json.dumps(r), flush=True)
            out[kind].append(r)
        total = sum(r["wall_seconds"] for r in out[kind])
        print(json.dumps({"run": kind, "total_wall_seconds": round(total, 1)}), flush=True)
    if args.budget_change:
        r = run(args.budget_change, args.cores, str(halved_budget_config(args.budget_change).relative_to(ROOT)))
        r["run"] = "budget-halved"
        print(json.dumps(r), flush=True)
        out["budget_change"] = r
    path = ROOT / args.out
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
