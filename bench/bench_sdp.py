"""Benchmark of the certified dense per-view solver (querysmasher.solvers.sdp.solve_dense).

Cases (every query centred along each attribute, as in the residual views):

* ``prefix100``: the 1-D prefix Gram, n = 100 (100 cells);
* ``affine20`` / ``affine50``: the two-way affine view A1 + A2 <= c, n = 20 / 50 (400 / 2,500 cells);
* ``mixed40``: the two-way affine Gram plus coef (C P^T P C) ⊗ (C P^T P C), n = 40 (1,600 cells),
  coef = 38 * 1^T P^T P 1 / n^2: what 38 three-way prefix views add once their third attribute is
  collapsed (each collapsed prefix attribute contributes sum over rows of mean(row)^2).

Each case runs in a fresh process so that its peak RSS (ru_maxrss) is its own; the tracemalloc
peak of the solve itself is reported too. Prints one line per case and writes bench/out/sdp.json.
Usage:

    PYTHONPATH=src python bench/bench_sdp.py [--cases prefix100,affine50] [--target-gap 1e-4]

Scaling table (issue 10): ``--table`` solves the two-way views the way ``qs`` does after issue 10
(the subquery matrix F, G = F^T F, :func:`solve_factored`) and, up to ``--before-max-cells``, the
way it did before (the dense c x c Gram and ``solve_dense`` of sdp.py at commit 20d1838, read from
git), and prints a markdown table of cells, rank, seconds, peak RSS and gap:

    PYTHONPATH=src python bench/bench_sdp.py --table [--views affine50,affine50x100,affine100,abs100,affine200]

(view names: family, then n or n1xn2; each query is centred along both attributes.)
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import sys
import time
import tracemalloc
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

CASES = ("prefix100", "affine20", "affine50", "mixed40")
TABLE_VIEWS = ("affine50", "affine50x100", "affine100", "abs100", "affine200")
BEFORE_COMMIT = "20d1838"  # sdp.py before issue 10


def centring(n: int) -> np.ndarray:
    return np.eye(n) - np.full((n, n), 1.0 / n)


def prefix_gram(n: int) -> np.ndarray:
    p = np.tril(np.ones((n, n)))  # row c: the query "A <= c"
    c = centring(n)
    return c @ p.T @ p @ c


def affine_gram(n: int) -> np.ndarray:
    a1, a2 = np.divmod(np.arange(n * n), n)  # cell a1 * n + a2
    q = np.array([a1 + a2 <= c for c in range(2 * n - 1)], dtype=float) @ np.kron(centring(n), centring(n))
    return q.T @ q


def mixed_gram(n: int) -> np.ndarray:
    ones = np.ones(n)
    p = np.tril(np.ones((n, n)))
    coef = 38 * float(ones @ p.T @ p @ ones) / n**2
    g = prefix_gram(n)
    return affine_gram(n) + coef * np.kron(g, g)


def build(case: str) -> np.ndarray:
    kind, n = case.rstrip("0123456789"), int(case.lstrip("abcdefghijklmnopqrstuvwxyz"))
    return {"prefix": prefix_gram, "affine": affine_gram, "mixed": mixed_gram}[kind](n)


def run_case(case: str, target_gap: float) -> dict:
    """Build and solve one case (in a worker process)."""
    from querysmasher.solvers.sdp import solve_dense

    G = build(case)
    tracemalloc.start()
    t0 = time.perf_counter()
    r = solve_dense(G, target_gap=target_gap)
    wall = time.perf_counter() - t0
    _, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "case": case,
        "cells": G.shape[0],
        "rank": int(np.linalg.matrix_rank(G, hermitian=True)),
        "seconds": round(wall, 2),
        "solver_seconds": round(r.seconds, 2),
        "iterations": r.iterations,
        "factorizations": r.factorizations,
        "loss": r.loss,
        "lower_bound": r.lower_bound,
        "gap": r.gap,
        "converged": r.converged,
        "max_diag_X": float(r.X.diagonal().max()),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "traced_peak_mb": round(traced_peak / 2**20),
    }


def view_factor(view: str) -> np.ndarray:
    """The centred subquery matrix (rows x cells) of a two-way view named like ``affine50x100``."""
    from querysmasher.decompose import subquery_matrix
    from querysmasher.families import pair_query_matrix

    family = view.rstrip("0123456789x")
    dims = view[len(family) :].split("x")
    n1, n2 = int(dims[0]), int(dims[-1])
    return subquery_matrix(pair_query_matrix(family, n1, n2), (n1, n2), (True, True))


def _old_sdp():
    """sdp.py as it was before issue 10, loaded from git as a module."""
    import importlib.util
    import subprocess
    import tempfile

    src = subprocess.run(
        ["git", "show", f"{BEFORE_COMMIT}:src/querysmasher/solvers/sdp.py"], capture_output=True, text=True, check=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / "sdp_before.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("sdp_before", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["sdp_before"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def run_view(view: str, how: str, target_gap: float) -> dict:
    """Solve one two-way view ``after`` (factored) or ``before`` (dense Gram, old solver), in a worker."""
    t0 = time.perf_counter()
    F = view_factor(view)
    if how == "after":
        from querysmasher.solvers.sdp import solve_factored

        r = solve_factored(F, target_gap=target_gap)
        rank = r.rank
    else:
        from threadpoolctl import threadpool_limits

        old = _old_sdp()
        G = F.T @ F  # what decompose built before (plus its projections)
        with threadpool_limits(limits=1, user_api="blas"):  # as the new code on a busy machine: favours "before"
            r = old.solve_dense(G, target_gap=target_gap)
        rank = int(np.linalg.matrix_rank(F))
    return {
        "view": view,
        "how": how,
        "cells": F.shape[1],
        "rank": rank,
        "seconds": round(time.perf_counter() - t0, 2),
        "gap": r.gap,
        "converged": r.converged,
        "loss": r.loss,
        "lower_bound": r.lower_bound,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def table(args) -> None:
    spawn = multiprocessing.get_context("spawn")
    rows = []
    for view in args.views.split(","):
        cells = view_factor(view).shape[1]
        res = {}
        for how in ("before", "after"):
            if how == "before" and cells > args.before_max_cells:
                continue
            load = os.getloadavg()[0]
            with ProcessPoolExecutor(max_workers=1, mp_context=spawn) as pool:
                res[how] = pool.submit(run_view, view, how, args.target_gap).result()
            res[how]["load_average_before"] = round(load, 2)
            print(json.dumps(res[how]), flush=True)
        rows.append(res)
    print(
        "\n| view | cells | rank | before: s | before: peak MB | before: gap "
        "| after: s | after: peak MB | after: gap | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for res in rows:
        a = res["after"]
        b = res.get("before")
        before = f"{b['seconds']:.1f} | {b['peak_rss_mb']} | {b['gap']:.1e}" if b else "not run | | "
        load = max(r["load_average_before"] for r in res.values())
        print(
            f"| {a['view']} | {a['cells']} | {a['rank']} | {before} | "
            f"{a['seconds']:.1f} | {a['peak_rss_mb']} | {a['gap']:.1e} | {load:.1f} |"
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"target_gap": args.target_gap, "rows": rows}, indent=2))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--table", action="store_true", help="issue 10's scaling table (before/after) as markdown")
    ap.add_argument("--views", default=",".join(TABLE_VIEWS))
    ap.add_argument("--before-max-cells", type=int, default=5000)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--target-gap", type=float, default=1e-4)
    ap.add_argument("--out", default="bench/out/sdp.json")
    args = ap.parse_args()
    if args.table:
        return table(args)

    results = []
    spawn = multiprocessing.get_context("spawn")
    for case in args.cases.split(","):
        load = os.getloadavg()[0]  # the machine may be shared: timings mean little under load
        with ProcessPoolExecutor(max_workers=1, mp_context=spawn) as pool:
            res = pool.submit(run_case, case, args.target_gap).result()
        res["load_average_before"] = round(load, 2)
        results.append(res)
        print(
            f"{case:10s} cells={res['cells']:5d} rank={res['rank']:5d}  {res['seconds']:7.2f} s  "
            f"factorizations={res['factorizations']:4d}  iterations={res['iterations']:4d}  "
            f"gap={res['gap']:.2e}  loss={res['loss']:.8g}  lower={res['lower_bound']:.8g}  "
            f"peak_rss={res['peak_rss_mb']} MB  traced_peak={res['traced_peak_mb']} MB  load={load:.1f}",
            flush=True,
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"target_gap": args.target_gap, "cpu_count": os.cpu_count(), "results": results}, indent=2)
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
