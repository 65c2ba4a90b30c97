"""HDMM in the workflow: the file-level steps of a whole-workload baseline, beside the per-view ones.

HDMM plans one strategy for the whole workload (:func:`querysmasher.hdmm.plan_hdmm`): it has no
residual decomposition and no per-view solve jobs, so its ``decompose`` step writes a manifest with
no subproblems, its ``allocate`` step runs the HDMM optimisers, and ``measure`` / ``reconstruct``
work on the full data vector -- only where the domain allows (:func:`releasable`); elsewhere the
workflow evaluates the predicted error only, which the paper's tables mark ``*``.

:func:`unsupported` says whether a method can plan a workload at all (the paper's ``NI``).

>>> from querysmasher.schema import parse_schema
>>> from querysmasher.workload import parse_workload
>>> unsupported("hdmm", parse_workload("prefix:1+affine:2", parse_schema("synthetic:n=4,d=3")))
'hdmm does not support non-product families (affine, abs, random, custom): affine:2'
>>> unsupported("qs", parse_workload("prefix:1+affine:2", parse_schema("synthetic:n=4,d=3")))
''
>>> releasable("hdmm", parse_schema("cps")), releasable("hdmm", parse_schema("synthetic:n=10,d=40"))
(True, False)
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from ..atomic import write_json
from ..accounting import parse_budget
from .datasets import load_dataset
from .evaluate import read_benchmark
from .steps import read_workload_file

__all__ = [
    "WHOLE_WORKLOAD_METHODS", "unsupported", "releasable", "set_aside_unsupported", "releasable_experiments", "decompose_hdmm", "plan_hdmm_to_files", "measure_hdmm",
    "reconstruct_hdmm", "evaluate_hdmm",
]

WHOLE_WORKLOAD_METHODS: tuple[str, ...] = ("hdmm",)


def unsupported(method: str, workload) -> str:
    """Why ``method`` cannot plan ``workload`` ("" when it can). Only HDMM has such limits: its
    implicit workloads are Kronecker products, so non-product families are not implemented."""
    if method != "hdmm":
        return ""
    from ..errors import InputError
    from ..hdmm.implicit import ImplicitWorkload

    try:
        ImplicitWorkload.from_workload(workload)
    except InputError as exc:
        return f"{exc.value} {exc.reason}"
    return ""


def releasable(method: str, schema) -> bool:
    """Whether the method can measure and reconstruct on this schema (HDMM: the full data vector
    must fit, at most ``MAX_DOMAIN_CELLS`` cells)."""
    if method != "hdmm":
        return True
    from ..hdmm.plan import MAX_DOMAIN_CELLS

    return schema.domain_cells() <= MAX_DOMAIN_CELLS


def _parsed(e, cache: dict):
    from ..schema import parse_schema
    from ..workload import parse_workload

    key = (e.schema_spec, e.all_numeric, e.workload)
    if key not in cache:
        schema = parse_schema(e.schema_spec, all_numeric=e.all_numeric)
        cache[key] = (schema, parse_workload(e.workload, schema))
    return cache[key]


def set_aside_unsupported(experiments: dict, policy: str = "error") -> tuple[dict, dict]:
    """Split a grid (name -> experiment) into those whose method can plan their workload and those
    it cannot (name -> the experiment's dict plus ``reason``). With ``policy="error"`` an
    unsupported experiment is a config error naming it (one line); with ``"skip"`` it is set aside
    (the paper's tables print NI for it)."""
    from ..errors import InputError

    cache: dict = {}
    ok, skipped = {}, {}
    for name, e in experiments.items():
        why = unsupported(e.method, _parsed(e, cache)[1]) if e.method in WHOLE_WORKLOAD_METHODS else ""
        if not why:
            ok[name] = e
        elif policy == "skip":
            skipped[name] = {**e.as_dict(), "schema_spec": e.schema_spec, "reason": why}
        else:
            raise InputError("config grid", name, f"{why} (set 'unsupported: skip' to leave such experiments out)")
    if not ok:
        raise InputError("config", "grid", "no experiment of the grid is supported by its method")
    return ok, skipped


def releasable_experiments(experiments: dict) -> dict[str, bool]:
    """Name -> whether the experiment's method can release on its schema (:func:`releasable`)."""
    cache: dict = {}
    return {name: e.method not in WHOLE_WORKLOAD_METHODS or releasable(e.method, _parsed(e, cache)[0]) for name, e in experiments.items()}


def decompose_hdmm(workload_path, decomposition_path, manifest_path, *, problem: str = "") -> dict:
    """The decompose checkpoint of an HDMM problem: no residual views, no subproblems, no solve
    files (the rules downstream see an empty manifest)."""
    w = read_workload_file(workload_path)
    write_json(decomposition_path, {
        "problem": problem, "schema": w.schema.name, "workload": w.spec, "seconds": 0.0,
        "workload_views": len({v.attrs for v in w.views}), "views": [],
    })
    write_json(manifest_path, {
        "problem": problem, "method": "hdmm", "options": {}, "namespace": "hdmm", "context": "",
        "workload_file": str(workload_path), "residual_views": 0, "distinct": 0, "subproblems": [], "batches": [],
        "solve_files": [],
    })
    return {"residual_views": 0, "distinct": 0, "batched": 0, "batches": 0}


def plan_hdmm_to_files(workload_path, plan_path, summary_path, *, budget, delta: float | None = None, experiment: dict | None = None) -> dict:
    """The allocate step of an HDMM experiment: run the HDMM optimisers (seed 0), write the plan
    file (kind ``hdmm-plan``) and its summary."""
    from ..hdmm import plan_hdmm
    from ..hdmm.files import save_hdmm_plan

    w = read_workload_file(workload_path)
    plan = plan_hdmm(w.schema, w, parse_budget(budget, delta))
    save_hdmm_plan(plan, plan_path)
    summary = plan.summary()
    summary.update(experiment or {})
    summary.update({"predicted_rmse": plan.rmse, "certified": False, "privacy": plan.budget.to_dict(),
                    "releasable": releasable("hdmm", w.schema)})
    write_json(summary_path, summary)
    return summary


def measure_hdmm(plan_path, out_path, *, source: dict, seed: int) -> dict:
    """The release of an HDMM plan (full data vector; fails in one line above the domain limit)."""
    from ..hdmm.files import check_measurable, load_hdmm_plan, measure_hdmm_to_file
    from ..measure import make_rng, plan_digest

    plan = load_hdmm_plan(plan_path)
    check_measurable(plan)  # before any record is read
    records = load_dataset(source, plan.schema)
    rng, seeded = make_rng(int(seed))
    print(f"warning: fixed noise seed {seed}: this release is for experiments only")
    measure_hdmm_to_file(plan, records, rng, out_path, seeded=seeded, plan_sha256=plan_digest(plan_path))
    return {"records": len(records), "dropped": records.dropped, "seeded": seeded}


def reconstruct_hdmm(plan_path, measurements_path, out_path) -> dict:
    from ..hdmm.files import load_hdmm_plan, reconstruct_hdmm_to_file
    from ..measure import plan_digest

    return reconstruct_hdmm_to_file(load_hdmm_plan(plan_path), measurements_path, out_path, plan_digest(plan_path))


def evaluate_hdmm(plan_path, out_path, *, benchmarks: dict | None = None, answers_path=None, source: dict | None = None,
                  experiment: dict | None = None) -> dict:
    """Metrics of an HDMM experiment, with the keys of :func:`querysmasher.pipeline.evaluate.evaluate`: the
    predicted RMSE (from the plan's summary: re-deriving the plan is the measure step's job) and,
    after a release, the empirical RMSE against the true answers (an evaluation, not a release)."""
    import numpy as np

    from ..data import marginal
    from ..families import query_matrix_1d
    from ..io import get_json, open_h5
    from ..linalg import kron_apply
    from ..schema import Schema
    from ..workload import parse_workload

    with open_h5(plan_path, "hdmm-plan") as f:
        s = get_json(f, "summary")
        schema = Schema.from_dict(get_json(f, "schema"))
        workload = parse_workload(str(f.attrs["workload"]), schema)
    m = dict(experiment or {})
    m.update({
        "predicted_rmse": s["rmse"], "queries": s["queries"], "workload_views": s["views"], "residual_views": None,
        "measured_views": None, "distinct_solves": 0, "privacy": {k: s[k] for k in ("beta", "rho", "mu", "epsilon", "delta")},
        "certified": False, "lower_bound_rmse": None, "notes": s.get("notes", []), "optimizer": s.get("optimizer"),
        "releasable": releasable("hdmm", schema),
    })
    if answers_path:
        records = load_dataset(source, schema)
        sq = wsum = 0.0
        t0 = time.perf_counter()
        with open_h5(answers_path, "answers") as f:
            offs = f["views/answer_offsets"][()]
            answers = f["views/answers"]
            for i, v in enumerate(workload.views):
                released = answers[int(offs[i]):int(offs[i + 1])]
                sizes = tuple(schema.sizes[a] for a in v.attrs)  # HDMM views are products of 1-D families
                truth = kron_apply([query_matrix_1d(fam, n) for fam, n in zip(v.factors, sizes)], marginal(records, v.attrs, schema.sizes), sizes)
                err = released - truth
                sq += v.weight * float(np.sum(err * err))
                wsum += v.weight * err.shape[0]
        m.update({"empirical_rmse": math.sqrt(sq / wsum) if wsum else 0.0, "mean_squared_z": None, "records": len(records),
                  "data": source, "evaluate_seconds": time.perf_counter() - t0})
    phases = {}
    for stage, path in (benchmarks or {}).items():
        b = read_benchmark(path)
        if b:
            phases[stage] = b
    m["phases"] = phases
    m["solve_files"] = 0
    m["total_seconds"] = sum(p["seconds"] for p in phases.values())
    m["peak_memory_mb"] = max((p["max_rss_mb"] for p in phases.values()), default=None)
    write_json(Path(out_path), m)
    return m
