"""The file-level steps each rule script calls: workload, decompose, solve, allocate, measure, reconstruct (and the log redirection around them).

The scripts (``scripts/*.py``) only read their ``snakemake`` object and call one function of this
package; everything they do is testable without Snakemake.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
import warnings
from pathlib import Path

from ..atomic import write_json
from .cache import batch_id, estimate_cost, plan_batches, read_solutions, read_subproblem, runtime_minutes, write_batch, write_solutions, write_subproblem
from ..accounting import parse_budget
from .datasets import load_dataset
from .layout import batch_path, solve_path, solver_namespace, subproblem_path, workload_id

__all__ = [
    "logged", "write_workload_file", "read_workload_file", "decompose_to_files", "solve_subproblem_files",
    "assemble_plan_from_files", "plan_max_to_files", "measure_to_file", "reconstruct_to_file",
]


@contextlib.contextmanager
def logged(path: str | Path | None):
    """Send stdout, stderr, warnings and the library's log lines to a log file for the duration of a stage."""
    if not path:
        yield
        return
    from .. import logs

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh, contextlib.redirect_stdout(fh), contextlib.redirect_stderr(fh), warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda m, c, f, ln, file=None, line=None: print(f"warning: {c.__name__}: {m}", file=fh, flush=True)
        with logs.configured():  # the library's INFO lines (timed) go to the same log file
            yield


def write_workload_file(path: str | Path, schema_spec: str, workload_spec: str, *, all_numeric: bool = False) -> dict:
    """Parse a schema and a workload and store them (custom queries included): every later stage
    reads the workload from this file, never from the config."""
    from ..io import atomic_h5, put_custom_queries, put_json
    from ..schema import parse_schema
    from ..workload import parse_workload

    schema = parse_schema(schema_spec, all_numeric=all_numeric)
    w = parse_workload(workload_spec, schema)
    with atomic_h5(path, kind="workload") as f:
        put_json(f, "schema", schema.to_dict())
        f.attrs["schema_spec"] = str(schema_spec)
        f.attrs["workload"] = w.spec
        put_custom_queries(f, w.custom)
    return {"schema": schema.name, "workload": w.spec, "views": len(w.views), "queries": w.query_count()}


def read_workload_file(path: str | Path):
    """The :class:`Workload` stored by :func:`write_workload_file`."""
    from ..io import get_custom_queries, get_json, open_h5
    from ..schema import Schema
    from ..workload import parse_workload

    with open_h5(path, "workload") as f:
        schema = Schema.from_dict(get_json(f, "schema"))
        return parse_workload(str(f.attrs["workload"]), schema, get_custom_queries(f))


def decompose_to_files(
    workload_path: str | Path,
    decomposition_path: str | Path,
    manifest_path: str | Path,
    *,
    method: str,
    options: dict | None = None,
    batch_max_cells: int = 400,
    batch_max_seconds: float = 0.5,
    batch_size: int = 100,
    batch_seconds: float = 300.0,
    problem: str = "",
) -> dict:
    """The decompose checkpoint: residual views -> ``decomposition.json``; distinct subproblems ->
    ``results/subproblems/{key}.h5`` (if absent) and ``manifest.json``; cheap subproblems
    (single-Kronecker, <= ``batch_max_cells`` cells, or estimated <= ``batch_max_seconds``) are
    grouped by :func:`~querysmasher.pipeline.cache.plan_batches` (at most ``batch_size`` keys and
    about ``batch_seconds`` of estimated work per batch) and listed in ``results/batches/{bid}.json``
    (if absent)."""
    from ..decompose import decompose
    from ..solvers import get_solver

    w = read_workload_file(workload_path)
    d = decompose(w)
    names = w.schema.names
    solver = get_solver(method, **(options or {}))
    context = ""
    if hasattr(solver, "prepare"):
        context = workload_id(w)
        solver.prepare(d)  # fails here, before any solve job, when the workload does not suit the solver
    ns = solver_namespace(method, options, context)
    views = [{"attrs": list(a), "names": [names[i] for i in a], "key": d.keys[a][0], "scale": d.keys[a][1]} for a in d.grams]
    per_key: dict[str, list] = {}
    for a in d.grams:
        per_key.setdefault(d.keys[a][0], []).append(a)
    subs, cheap = {}, []
    distinct = d.distinct()
    # A solver with workload context re-runs this decomposition in every solve job before its first
    # solve (solve_files_to_file): a subproblem cheaper than that overhead is batched, and batches
    # are as large as batch_seconds allows (RP+ on random:1,2 over [20]^40 re-decomposed for 20 s in
    # each of 23 batch jobs of millisecond solves). Their namespace is the workload's own, so no
    # other experiment shares these batches: no content-defined boundaries either.
    overhead = d.seconds if context else 0.0
    if context:
        batch_size = max(batch_size, len(distinct))
    for key, g in sorted(distinct.items()):
        write_subproblem(key, g, d.store, subproblem_path(key))
        cost = estimate_cost(g.sizes, len(g.terms), g.single_kron, method, options)
        is_cheap = not g.sizes or g.single_kron or g.cells <= batch_max_cells or cost["seconds"] <= max(batch_max_seconds, overhead)
        subs[key] = {
            "key": key, "sizes": list(g.sizes), "cells": g.cells, "terms": len(g.terms), "dense_terms": sum(t.dense for t in g.terms),
            "single_kron": g.single_kron, "views": len(per_key[key]), "example_view": [names[i] for i in per_key[key][0]],
            "cost": cost, "batched": bool(is_cheap), "solve_file": solve_path(ns, key),
        }
        if is_cheap:
            cheap.append(key)
    batches = []
    for members in plan_batches(cheap, batch_size, {k: subs[k]["cost"]["seconds"] for k in cheap}, batch_seconds, shared=not context):
        bid = batch_id(members)
        write_batch(bid, members, batch_path(bid))
        file_id = f"batch-{bid}"
        for k in members:
            subs[k]["solve_file"] = solve_path(ns, file_id)
        costs = [subs[k]["cost"] for k in members]
        total = sum(c["seconds"] for c in costs)
        batches.append({
            "id": bid, "file_id": file_id, "keys": members, "solve_file": solve_path(ns, file_id),
            "cost": {"seconds": round(total, 3), "mem_mb": max(c["mem_mb"] for c in costs), "runtime": runtime_minutes(total)},
        })
    write_json(decomposition_path, {
        "problem": problem, "schema": w.schema.name, "workload": w.spec, "seconds": d.seconds,
        "workload_views": len({v.attrs for v in w.views}), "views": views,
    })
    manifest = {
        "problem": problem, "method": method, "options": dict(options or {}), "namespace": ns, "context": context,
        "workload_file": str(workload_path), "residual_views": len(views), "distinct": len(subs),
        "subproblems": list(subs.values()), "batches": batches,
        "solve_files": sorted({s["solve_file"] for s in subs.values()}),
    }
    write_json(manifest_path, manifest)
    return {"residual_views": len(views), "distinct": len(subs), "batched": len(cheap), "batches": len(batches)}


def solve_subproblem_files(subproblem_paths, out_path: str | Path, *, method: str, options: dict | None = None, workload_path: str | Path | None = None) -> dict:
    """Solve subproblem files with one solver instance (batches share its per-factor caches) and
    write every solution to the solve file ``out_path`` (kind ``solve``, one group per key).

    Solvers with ``prepare`` (workload context, e.g. RP+'s per-attribute bases) get the
    decomposition of ``workload_path``, re-run here (deterministic and cheap), and solve its Gram of
    each key -- equal to the file's, but on the real attributes of the workload's first view with
    that key, as :func:`querysmasher.planning.make_plan` does."""
    import numpy as np  # noqa: F401  (after the caller's thread limits)

    from ..solvers import get_solver

    solver = get_solver(method, **(options or {}))
    distinct = None
    if hasattr(solver, "prepare"):
        from ..decompose import decompose

        if not workload_path:
            raise ValueError(f"method {method!r} reads workload context: give workload_path")
        decomp = decompose(read_workload_file(workload_path))
        solver.prepare(decomp)
        distinct = decomp.distinct()
    results = []
    for p in subproblem_paths:
        key, gram, store = read_subproblem(p)
        if distinct is not None:  # the same Gram, on the attributes of the workload's first view with this key
            if key not in distinct:
                raise ValueError(f"subproblem {key} is not part of the workload {workload_path}")
            gram, store = distinct[key], decomp.store
        t0 = time.perf_counter()
        sol = solver.solve(gram, store)
        results.append((key, sol, time.perf_counter() - t0))
        print(f"solved {key}: {gram.cells} cells, {len(gram.terms)} terms, loss {sol.loss:.6g}, {results[-1][2]:.2f} s ({sol.solver}) {sol.note}", flush=True)
    write_solutions(out_path, method, options, results)
    return {"solved": len(results), "seconds": sum(r[2] for r in results)}


def assemble_plan_from_files(
    workload_path, decomposition_path, solve_paths, plan_path, plan_json_path, *, method: str, budget, delta: float | None = None, experiment: dict | None = None,
) -> dict:
    """Allocate the budget over the residual views of ``decomposition.json`` with the solutions of
    the solve files; write ``plan.h5`` and ``plan.json`` (predicted RMSE, certified bound when
    every view is certified, privacy as beta, rho-zCDP, mu-GDP and (epsilon, delta))."""
    from ..decompose import Decomposition, SubworkloadGram
    from ..linalg import MatrixStore
    from ..planners.residual import assemble_plan
    from ..queryfactor import rederive_solutions

    w = read_workload_file(workload_path)
    dj = json.loads(Path(decomposition_path).read_text())
    sizes = w.schema.sizes
    grams, keys = {}, {}
    for v in dj["views"]:
        a = tuple(v["attrs"])
        grams[a] = SubworkloadGram(a, tuple(sizes[i] for i in a), ())  # terms live in the subproblem files
        keys[a] = (v["key"], float(v["scale"]))
    d = Decomposition(w, MatrixStore(), grams, float(dj["seconds"]))
    d.__dict__["keys"] = keys  # the cached property, from the file
    sols, secs = read_solutions(solve_paths)
    missing = sorted({k for k, _ in keys.values()} - set(sols))
    if missing:
        raise ValueError(f"no solution for {len(missing)} subproblem(s), e.g. {missing[0]}")
    # views held over their query factor: the operator of this workload's own F (what measure
    # re-derives from the plan file), not of the F the solve job read (a shared subproblem file)
    sols = rederive_solutions(w, sols, list(grams), [keys[a][0] for a in grams])
    used = {k for k, _ in keys.values()}
    plan = assemble_plan(d, sols, method, parse_budget(budget, delta), {"decompose": d.seconds, "solve": sum(secs[k] for k in used)})
    return _write_plan(plan, plan_path, plan_json_path, experiment)


def _write_plan(plan, plan_path, plan_json_path, experiment: dict | None) -> dict:
    """plan.h5 and plan.json (the plan's summary with the experiment's fields, the predicted RMSE,
    whether it is certified, and its privacy in every unit); returns the summary."""
    from ..plan import save_plan

    save_plan(plan, plan_path)
    summary = plan.summary()
    summary.update(experiment or {})
    summary["predicted_rmse"] = plan.rmse
    summary["certified"] = plan.certified
    summary["privacy"] = plan.budget.to_dict()
    write_json(plan_json_path, summary)
    return summary


def plan_max_to_files(workload_path, plan_path, plan_json_path, *, method: str, budget, delta: float | None = None, experiment: dict | None = None) -> dict:
    """Objective "max": the whole max-variance planning (:func:`querysmasher.maxplan.plan_max`, which
    re-solves the views under its own query weights; the sum-objective solves are not used); writes
    ``plan.h5`` and ``plan.json`` like :func:`assemble_plan_from_files`."""
    from ..planning import make_plan

    w = read_workload_file(workload_path)
    plan = make_plan(w.schema, w, method, parse_budget(budget, delta), objective="max")
    return _write_plan(plan, plan_path, plan_json_path, experiment)


def measure_to_file(plan_path, out_path, *, source: dict, seed: int) -> dict:
    """The release: run the plan's mechanisms on the records with a fixed noise seed (experiments
    are explicitly seeded runs; the measurements file is marked ``seeded``)."""
    from ..data import warn_dropped
    from ..measure import check_budget, make_rng, measure_iter, plan_digest, save_measurements
    from ..plan import load_plan

    plan = load_plan(plan_path)
    check_budget(plan)  # before any record is read
    records = load_dataset(source, plan.schema)
    warn_dropped(records)
    rng, seeded = make_rng(int(seed))  # evaluate mode: seeded numpy noise, marked as such
    print(f"warning: fixed noise seed {seed}: this release is for experiments only", file=sys.stderr)
    save_measurements(out_path, plan, measure_iter(plan, records, rng), seeded=seeded, plan_sha256=plan_digest(plan_path))
    return {"seeded": seeded}


def reconstruct_to_file(plan_path, measurements_path, out_path, *, csv_dir: str | Path | None = None, max_answers: int | None = None) -> dict:
    """Answers (and variances) of every workload query, plus CSV tables when ``csv_dir`` is given."""
    from ..measure import load_measurements, plan_digest
    from ..plan import load_plan
    from ..reconstruct import DEFAULT_MAX_ANSWERS, reconstruct, save_answers, write_csv_tables

    plan = load_plan(plan_path)
    with load_measurements(measurements_path, plan_digest(plan_path)) as meas:
        rec = reconstruct(plan, meas)
        info = save_answers(out_path, rec, max_answers=DEFAULT_MAX_ANSWERS if max_answers is None else int(max_answers))
        if csv_dir:
            info["csv_tables"] = len(write_csv_tables(csv_dir, rec))
    return info
