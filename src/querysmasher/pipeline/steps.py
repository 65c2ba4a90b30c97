"""The file-level steps each rule script calls: decompose, solve, allocate, measure, reconstruct, evaluate
(and the log redirection around them).

The scripts (``scripts/*.py``) only read their ``snakemake`` object and call one function of this
package; everything they do is testable without Snakemake. They plan, measure and reconstruct
through the same functions as the command line and the API (:func:`querysmasher.planning.make_plan`,
:mod:`querysmasher.stages`), with the same checks, whatever the method: the method table
(:mod:`querysmasher.methods`) says whether a method is a per-view solver (decomposed into
subproblems solved by their own jobs) or a whole-workload planner (planned in the allocate job).
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
import warnings
from pathlib import Path

from ..accounting import parse_budget
from ..allocation import is_certified
from ..atomic import write_json
from ..data import warn_dropped
from ..decompose import Decomposition, SubworkloadGram, decompose
from ..linalg import MatrixStore
from ..methods import get_method
from ..plan import Plan
from ..planning import make_plan
from ..queryfactor import rederive_solutions
from ..workloadfile import read_workload_file, write_workload_file
from .cache import (
    BASE_MEM_MB,
    StoredSolutions,
    batch_cost,
    batch_id,
    estimate_cost,
    estimate_decompose_mem_mb,
    plan_batches,
    read_subproblem,
    runtime_minutes,
    write_batch,
    write_solutions,
    write_subproblem,
)
from .datasets import load_dataset
from .layout import batch_path, solve_path, solver_namespace, subproblem_path, workload_id

__all__ = [
    "logged",
    "write_workload_file",
    "read_workload_file",
    "decompose_to_files",
    "solve_subproblem_files",
    "allocate_to_files",
    "measure_to_file",
    "reconstruct_to_file",
]

CONTEXT_OVERHEAD_MIN_SECONDS = 1.0  # a context solver's re-decomposition shorter than this does not decide batching


@contextlib.contextmanager
def logged(path: str | Path | None):
    """Send stdout, stderr, warnings and the library's log lines to a log file for the duration of a stage."""
    if not path:
        yield
        return
    from .. import logs  # in the body: the stage function's fingerprint follows it

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with (
        open(path, "w") as fh,
        contextlib.redirect_stdout(fh),
        contextlib.redirect_stderr(fh),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("always")
        warnings.showwarning = lambda m, c, f, ln, file=None, line=None: print(
            f"warning: {c.__name__}: {m}", file=fh, flush=True
        )
        with logs.configured():  # the library's INFO lines (timed) go to the same log file
            yield


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
    w = read_workload_file(workload_path)
    if get_method(method).whole_workload:  # planned whole in the allocate job: no views, no subproblems
        return _empty_decomposition(
            w,
            decomposition_path,
            manifest_path,
            method=method,
            options=options,
            workload_path=workload_path,
            problem=problem,
        )
    d = decompose(w, lazy=True)  # a random view's large Gram goes to its subproblem file as a recipe, not held
    names = w.schema.names
    solver = get_method(method).build(**(options or {}))
    context = ""
    if hasattr(solver, "prepare"):
        context = workload_id(w)
        solver.prepare(d)  # fails here, before any solve job, when the workload does not suit the solver
    ns = solver_namespace(method, options, context)
    views = [
        {"attrs": list(a), "names": [names[i] for i in a], "key": d.keys[a][0], "scale": d.keys[a][1]} for a in d.grams
    ]
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
    # Below a second the re-decomposition is dwarfed by a job's process start (about 1 s) and does
    # not decide: a measured time that small only varies with the machine's load, and the job graph
    # must not (a loaded run would batch a subproblem an idle one solves alone).
    overhead = d.seconds if context and d.seconds >= CONTEXT_OVERHEAD_MIN_SECONDS else 0.0
    # ... and holds that decomposition while it solves (its memory, as the decompose job's)
    context_mb = float(estimate_decompose_mem_mb(w, lazy=True) - BASE_MEM_MB) if context else 0.0
    if context:
        batch_size = max(batch_size, len(distinct))
    for key, g in sorted(distinct.items()):
        write_subproblem(key, g, d.store, subproblem_path(key))
        cost = estimate_cost(g, d.store, method, options, solver=solver, context_mb=context_mb)
        is_cheap = (
            not g.sizes
            or g.single_kron
            or g.cells <= batch_max_cells
            or cost["seconds"] <= max(batch_max_seconds, overhead)
        )
        if context and not is_cheap:  # its own job re-runs the decomposition before solving
            cost = {
                **cost,
                "seconds": round(cost["seconds"] + overhead, 3),
                "runtime": runtime_minutes(cost["seconds"] + overhead),
            }
        subs[key] = {
            "key": key,
            "sizes": list(g.sizes),
            "cells": g.cells,
            "terms": len(g.terms),
            "dense_terms": sum(t.dense for t in g.terms),
            "single_kron": g.single_kron,
            "views": len(per_key[key]),
            "example_view": [names[i] for i in per_key[key][0]],
            "cost": cost,
            "batched": bool(is_cheap),
            "solve_file": solve_path(ns, key),
        }
        if is_cheap:
            cheap.append(key)
    batches = []
    for members in plan_batches(
        cheap, batch_size, {k: subs[k]["cost"]["seconds"] for k in cheap}, batch_seconds, shared=not context
    ):
        bid = batch_id(members)
        write_batch(bid, members, batch_path(bid))
        file_id = f"batch-{bid}"
        for k in members:
            subs[k]["solve_file"] = solve_path(ns, file_id)
        batches.append(
            {
                "id": bid,
                "file_id": file_id,
                "keys": members,
                "solve_file": solve_path(ns, file_id),
                "cost": batch_cost([subs[k]["cost"] for k in members], context_mb, overhead),
            }
        )
    write_json(
        decomposition_path,
        {
            "problem": problem,
            "schema": w.schema.name,
            "workload": w.spec,
            "seconds": d.seconds,
            "workload_views": len({v.attrs for v in w.views}),
            "views": views,
        },
    )
    manifest = {
        "problem": problem,
        "method": method,
        "options": dict(options or {}),
        "namespace": ns,
        "context": context,
        "workload_file": str(workload_path),
        "residual_views": len(views),
        "distinct": len(subs),
        "subproblems": list(subs.values()),
        "batches": batches,
        "solve_files": sorted({s["solve_file"] for s in subs.values()}),
    }
    write_json(manifest_path, manifest)
    return {"residual_views": len(views), "distinct": len(subs), "batched": len(cheap), "batches": len(batches)}


def _empty_decomposition(
    w, decomposition_path, manifest_path, *, method: str, options, workload_path, problem: str
) -> dict:
    """The decompose checkpoint of a whole-workload method: no residual views, no subproblems, no
    solve files (the rules downstream see an empty manifest)."""
    write_json(
        decomposition_path,
        {
            "problem": problem,
            "schema": w.schema.name,
            "workload": w.spec,
            "seconds": 0.0,
            "workload_views": len({v.attrs for v in w.views}),
            "views": [],
        },
    )
    write_json(
        manifest_path,
        {
            "problem": problem,
            "method": method,
            "options": dict(options or {}),
            "namespace": method,
            "context": "",
            "workload_file": str(workload_path),
            "residual_views": 0,
            "distinct": 0,
            "subproblems": [],
            "batches": [],
            "solve_files": [],
        },
    )
    return {"residual_views": 0, "distinct": 0, "batched": 0, "batches": 0}


def solve_subproblem_files(
    subproblem_paths,
    out_path: str | Path,
    *,
    method: str,
    options: dict | None = None,
    workload_path: str | Path | None = None,
) -> dict:
    """Solve subproblem files with one solver instance (batches share its per-factor caches) and
    write every solution to the solve file ``out_path`` (kind ``solve``, one group per key).

    Solvers with ``prepare`` (workload context, e.g. RP+'s per-attribute bases) get the
    decomposition of ``workload_path``, re-run here (deterministic and cheap), and solve its Gram of
    each key -- equal to the file's, but on the real attributes of the workload's first view with
    that key, as :func:`querysmasher.planning.make_plan` does."""
    solver = get_method(method).build(**(options or {}))
    distinct = None
    if hasattr(solver, "prepare"):
        if not workload_path:
            raise ValueError(f"method {method!r} reads workload context: give workload_path")
        decomp = decompose(
            read_workload_file(workload_path), lazy=True
        )  # as the decompose job: one large random Gram at a time
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
        print(
            f"solved {key}: {gram.cells} cells, {len(gram.terms)} terms, loss {sol.loss:.6g}, "
            f"{results[-1][2]:.2f} s ({sol.solver}) {sol.note}",
            flush=True,
        )
    write_solutions(out_path, method, options, results)
    return {"solved": len(results), "seconds": sum(r[2] for r in results)}


def _assemble_from_files(w, decomposition_path, solve_paths, method: str, budget):
    """The residual plan of per-view solutions computed by solve jobs: the budget allocated over the
    residual views of ``decomposition.json`` with the solutions of the solve files."""
    from ..planners.residual import assemble_plan  # in the body: the stage function's fingerprint follows it

    dj = json.loads(Path(decomposition_path).read_text())
    sizes = w.schema.sizes
    grams, keys = {}, {}
    for v in dj["views"]:
        a = tuple(v["attrs"])
        grams[a] = SubworkloadGram(a, tuple(sizes[i] for i in a), ())  # terms live in the subproblem files
        keys[a] = (v["key"], float(v["scale"]))
    d = Decomposition(w, MatrixStore(), grams, float(dj["seconds"]))
    d.__dict__["keys"] = keys  # the cached property, from the file
    sols = StoredSolutions(solve_paths)  # read one at a time: the plan's mechanisms may not fit in memory together
    secs = sols.seconds
    used = {k for k, _ in keys.values()}
    missing = sorted(used - set(sols))
    if missing:
        raise ValueError(f"no solution for {len(missing)} subproblem(s), e.g. {missing[0]}")
    sols = sols.restricted(used)
    # views held over their query factor: the operator of this workload's own F (what measure
    # re-derives from the plan file), not of the F the solve job read (a shared subproblem file)
    sols = rederive_solutions(w, sols, list(grams), [keys[a][0] for a in grams])
    return assemble_plan(d, sols, method, budget, {"decompose": d.seconds, "solve": sum(secs[k] for k in used)})


def allocate_to_files(
    workload_path,
    decomposition_path,
    solve_paths,
    plan_path,
    plan_json_path,
    *,
    method: str,
    budget,
    delta: float | None = None,
    objective: str = "sum",
    neighbours: str = "add-remove",
    options: dict | None = None,
    experiment: dict | None = None,
    mechanisms: bool = True,
    max_variance: bool = True,
) -> dict:
    """The allocate step: the plan of one experiment, written to ``plan.h5`` (of its kind; with
    ``mechanisms=False``, for plan-only experiments, its summary alone:
    :func:`querysmasher.planfiles.save_plan_summary`) and ``plan.json`` (predicted RMSE, certified
    bound when every view is certified, privacy as beta, rho-zCDP, mu-GDP and (epsilon, delta),
    whether it can be measured). Per-view methods with the sum objective allocate over the solutions
    of the solve jobs; whole-workload methods and the max objective (which re-solves the views under
    its own query weights) plan here, through :func:`querysmasher.planning.make_plan`.
    ``max_variance=False`` (with ``mechanisms=False``) leaves the largest query variance out of a
    residual plan's summary (:meth:`querysmasher.plan.Plan.summary`)."""
    from ..planfiles import save_any_plan, save_plan_summary  # in the body: the stage function's fingerprint follows it

    w = read_workload_file(workload_path)
    b = parse_budget(budget, delta, neighbours)
    m = get_method(method)
    if m.whole_workload or objective != "sum":
        plan = make_plan(w.schema, w, method, b, objective=objective, options=options)
    else:
        m.check(objective=objective, neighbours=b.neighbours)
        plan = _assemble_from_files(w, decomposition_path, solve_paths, method, b)
    if mechanisms:
        save_any_plan(plan, plan_path)
        summary = plan.summary()
    else:
        summary = plan.summary(max_variance=False) if not max_variance and isinstance(plan, Plan) else plan.summary()
        save_plan_summary(plan, plan_path, dict(summary))
    summary.update(experiment or {})
    summary["predicted_rmse"] = plan.rmse
    summary["certified"] = is_certified(summary)
    summary["privacy"] = plan.budget.to_dict()
    summary["releasable"] = m.measurable(w.schema)
    write_json(plan_json_path, summary)
    return summary


def measure_to_file(plan_path, out_path, *, source: dict, seed: int) -> dict:
    """The release of an experiment: the plan's mechanisms on the records with a fixed noise seed
    (experiments are explicitly seeded runs; the measurements file is marked ``seeded``), with the
    privacy re-check before any record is read, as the command line does."""
    from ..measure import (  # in the body: the stage function's fingerprint follows it
        check_plan,
        measure_plan_to_file,
        plan_digest,
    )
    from ..noise import make_noise  # in the body: the stage function's fingerprint follows it
    from ..planfiles import load_any_plan  # in the body: the stage function's fingerprint follows it

    plan = load_any_plan(plan_path)
    check_plan(plan)  # the privacy cost of what will be applied, before any record is read
    records = load_dataset(source, plan.schema)
    warn_dropped(records)
    noise = make_noise(int(seed), "numpy")  # evaluate mode: seeded numpy noise, marked as such
    print(f"warning: fixed noise seed {seed}: this release is for experiments only", file=sys.stderr)
    measure_plan_to_file(plan, records, noise, out_path, plan_sha256=plan_digest(plan_path))
    return {"seeded": noise.seeded}


def reconstruct_to_file(
    plan_path, measurements_path, out_path, *, csv_dir: str | Path | None = None, max_answers: int | None = None
) -> dict:
    """Answers (and variances) of every workload query, plus CSV tables when ``csv_dir`` is given
    (an empty folder for plans without per-view tables), with the measurements checked against the
    plan, as the command line does."""
    from ..measure import plan_digest  # in the body: the stage function's fingerprint follows it
    from ..planfiles import load_any_plan  # in the body: the stage function's fingerprint follows it
    from ..reconstruct import has_per_view_tables, reconstruct_plan_to_file  # loads numpy only where it is used

    plan = load_any_plan(plan_path)
    if csv_dir and not has_per_view_tables(plan):
        Path(csv_dir).mkdir(parents=True, exist_ok=True)
        csv_dir = None
    return reconstruct_plan_to_file(
        plan, measurements_path, out_path, plan_sha256=plan_digest(plan_path), csv_dir=csv_dir, max_answers=max_answers
    )
