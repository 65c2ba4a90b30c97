"""Metrics of one experiment: predicted and empirical RMSE, the calibration of the variances, phase times and
peak memory."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from ..allocation import is_certified
from ..atomic import write_json
from .datasets import load_dataset
from .layout import solve_benchmark_path, split_solve_path

__all__ = ["read_benchmark", "evaluate"]


def read_benchmark(path: str | Path) -> dict | None:
    """``{"seconds", "max_rss_mb"}`` of a Snakemake benchmark file (None when absent)."""
    p = Path(path)
    if not p.is_file():
        return None
    lines = [ln.split("\t") for ln in p.read_text().splitlines() if ln.strip()]
    if len(lines) < 2:
        return None
    rows = [dict(zip(lines[0], r)) for r in lines[1:]]

    def num(x):
        try:
            return float(x)
        except (TypeError, ValueError):
            return float("nan")

    return {"seconds": max(num(r.get("s")) for r in rows), "max_rss_mb": max(num(r.get("max_rss")) for r in rows)}


def _error_sums(plan, answers_path, records, views) -> tuple[float, float, float, int]:
    """Weighted squared error, weight, squared standardised error and its count over ``views``
    (indices of the workload's views), one view at a time: bounded memory."""
    from ..data import marginal  # in the body: the stage function's fingerprint follows it
    from ..decompose import view_answers  # in the body: the stage function's fingerprint follows it
    from ..reconstruct import released_answers  # loads h5py, numpy only where it is used

    sq = wsum = zsum = 0.0
    zn = 0
    for v, released, var in released_answers(plan, answers_path, views):
        truth = view_answers(plan.workload, v, marginal(records, v.attrs, plan.schema.sizes))
        err = released - truth
        sq += v.weight * float(np.sum(err * err))
        wsum += v.weight * err.shape[0]
        if var is not None:
            ok = var > 0
            zsum += float(np.sum(err[ok] ** 2 / var[ok]))
            zn += int(ok.sum())
    return sq, wsum, zsum, zn


def evaluate(
    plan_path,
    out_path,
    *,
    manifest_path=None,
    benchmarks: dict | None = None,
    answers_path=None,
    source: dict | None = None,
    experiment: dict | None = None,
) -> dict:
    """Metrics of one experiment: predicted RMSE (from the plan's stored summary) and, with
    ``answers_path``, the empirical RMSE of the released answers against the true answers computed
    from the records (an evaluation, not a release: it reads the records, and its output is not
    private), the mean squared standardised error (about 1 when the variances are right; plans
    whose answers carry variances), phase times and peak memory (Snakemake benchmark files; the
    solve phase sums every solve file the experiment uses, shared ones included). Plans of every
    kind (:mod:`querysmasher.planfiles`)."""
    from ..planfiles import load_any_plan, read_plan_summary  # loads h5py only where it is used

    s = read_plan_summary(plan_path)  # the summary stored at planning: nothing re-derived here
    m = dict(experiment or {})
    m.update(
        {
            "predicted_rmse": s["rmse"],
            "queries": s["queries"],
            "workload_views": s["views"],
            "residual_views": s.get("residual_views"),
            "measured_views": s.get("measured_views"),
            "distinct_solves": s.get("distinct_solves", 0),
            "privacy": {k: s[k] for k in ("beta", "rho", "mu", "epsilon", "delta", "source", "neighbours") if k in s},
            "certified": is_certified(s),
            "lower_bound_rmse": s.get("lower_bound_rmse") if is_certified(s) else None,
            "notes": s.get("notes", []),
        }
    )
    if answers_path:
        from ..threads import budget, parallel_map  # in the body: the stage function's fingerprint follows it

        plan = load_any_plan(plan_path)
        records = load_dataset(source, plan.schema)
        # the views in as many shards as the job has threads (forked workers share plan and records)
        shards = [
            list(range(i, len(plan.workload.views), budget())) for i in range(min(budget(), len(plan.workload.views)))
        ]
        parts = list(parallel_map(lambda views: _error_sums(plan, answers_path, records, views), shards))
        sq, wsum, zsum, zn = (sum(p[i] for p in parts) for i in range(4))
        m.update(
            {
                "empirical_rmse": math.sqrt(sq / wsum) if wsum else 0.0,
                "mean_squared_z": zsum / zn if zn else None,
                "records": len(records),
                "data": source,
            }
        )
    phases: dict[str, dict] = {}
    for stage, path in (benchmarks or {}).items():
        b = read_benchmark(path)
        if b:
            phases[stage] = b
    if manifest_path:
        man = json.loads(Path(manifest_path).read_text())
        found = [read_benchmark(solve_benchmark_path(*split_solve_path(p))) for p in man["solve_files"]]
        found = [b for b in found if b]
        if found:
            phases["solve"] = {
                "seconds": sum(b["seconds"] for b in found),
                "max_rss_mb": max(b["max_rss_mb"] for b in found),
                "jobs": len(found),
            }
        m["solve_files"] = len(man["solve_files"])
    m["phases"] = phases
    m["total_seconds"] = sum(p["seconds"] for p in phases.values())
    m["peak_memory_mb"] = max((p["max_rss_mb"] for p in phases.values()), default=None)
    write_json(out_path, m)
    return m
