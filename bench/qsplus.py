"""Benchmark: the marginal family (qsplus, querysmasher.marginal_family) against qs on the issue's cases.

Each case plans qs (the reference and the start), then qsplus to the certified gap, and writes one
JSON line to bench/out/qsplus.jsonl (git-ignored) and stdout: RMSE at beta = 1 (sum objective,
add-remove), qs RMSE, the ratio, the certified gap, seconds and peak memory (ru_maxrss of the run
so far; run one case per process for a per-case figure). Usage:

    python bench/qsplus.py --case table4-affine-10        # one named case (affine:2 alone)
    python bench/qsplus.py --case table4-paper-affine-10  # the paper's Table 4 cell (prefix:1+affine:2)
    python bench/qsplus.py --list                         # the named cases
    python bench/qsplus.py --schema synthetic:n=4,d=3 --workload affine:2
    python bench/qsplus.py --case table3-cps-affine --max-view-cells 400   # big views stay residual
    python bench/qsplus.py --case table3-cps-affine-asrun  # the paper's Table 3 workload (run from the repository root)
    python bench/qsplus.py --case table3-cps-affine-asrun --method restricted --verbose  # with the planner's progress
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import platform
import resource
import sys
import time
from pathlib import Path

from querysmasher.accounting import Budget
from querysmasher.marginal_family import plan

CASES = {
    "small-4x2-affine": ("synthetic:n=4,d=2", "affine:2"),
    "small-4x3-affine": ("synthetic:n=4,d=3", "affine:2"),
    **{
        f"table4-{fam}-{n}": (f"synthetic:n={n},d=40", f"{fam}:2")
        for n in (10, 20, 30, 40, 50)
        for fam in ("affine", "abs")
    },
    # the paper's Table 4 cells themselves: its affine and abs workloads hold the 1-way prefix queries too
    **{
        f"table4-paper-{fam}-{n}": (f"synthetic:n={n},d=40", f"prefix:1+{fam}:2")
        for n in (10, 20, 30, 40, 50)
        for fam in ("affine", "abs")
    },
    **{
        f"table5-{n}-d{d}": (f"synthetic:n={n},d={d}", "range:1+affine:2+prefix:3")
        for n in (10,)
        for d in (10, 20, 30, 40, 50)
    },
    **{f"table3-{s}-{fam}": (s, f"{fam}:2") for s in ("cps", "adult", "loans") for fam in ("affine", "abs")},
    # the paper's Table 3 workloads themselves (config/paper/table3_workloads.py): as its authors ran them, and as
    # described
    **{
        f"table3-{s}-{fam}-{ver}": (s, f"config/paper/workloads/table3-{s}-{fam}-{ver}.yaml")
        for s in ("cps", "adult", "loans")
        for fam in ("affine", "abs")
        for ver in ("asrun", "described")
    },
}


def run(
    schema: str,
    workload: str,
    target_gap: float,
    max_seconds: float,
    name: str = "",
    max_view_cells: int | None = None,
    options: dict | None = None,
) -> dict:
    t0 = time.perf_counter()
    p = plan(
        schema,
        workload,
        Budget.from_beta(1.0),
        target_gap=target_gap,
        max_seconds=max_seconds,
        max_view_cells=max_view_cells,
        optimiser_options=options,
    )
    out = {
        "case": name,
        "schema": schema,
        "workload": workload,
        "rmse": p.rmse,
        "qs_rmse": p.qs_rmse,
        "ratio": p.ratio,
        "gap": p.gap,
        "target_gap": target_gap,
        "lower_bound_rmse": math.sqrt(p.lower_bound / p.queries),
        "tied": p.tied,
        "marginal_views": len(p.views),
        "lower_dim": p.problem.lower_dim,
        "residual_only_views": len(p.residual_views),
        "max_view_cells": max_view_cells,
        "optimiser_options": options or {},
        "iterations": p.iterations,
        "seconds": time.perf_counter() - t0,
        "phase_seconds": p.phase_seconds,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "notes": p.notes,
        "machine": f"{platform.machine()} {platform.node()}",
    }
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", action="append", default=[])
    ap.add_argument("--schema")
    ap.add_argument("--workload")
    ap.add_argument("--target-gap", type=float, default=1e-4)
    ap.add_argument("--max-seconds", type=float, default=1800.0)
    ap.add_argument("--max-view-cells", type=int, default=None, help="larger views keep their qs residual mechanisms")
    ap.add_argument(
        "--method", default=None, help="optimiser: auto (default), symmetric, restricted, lbfgs, trust-krylov, newton"
    )
    ap.add_argument("--mu-factor", type=float, default=None, help="barrier weight factor per round (default 0.1)")
    ap.add_argument("--list", action="store_true")
    ap.add_argument(
        "--verbose",
        action="store_true",
        help="the planner's progress (INFO log: temperatures, Newton steps, bounds) on stderr",
    )
    ap.add_argument("--out", default="bench/out/qsplus.jsonl")
    a = ap.parse_args()
    if a.verbose:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    if a.list:
        for k, (s, w) in CASES.items():
            print(f"{k}: {s} {w}")
        return
    todo = [(k, *CASES[k]) for k in a.case]
    if a.schema and a.workload:
        todo.append(("", a.schema, a.workload))
    if not todo:
        ap.error("give --case NAME (see --list) or --schema and --workload")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    for name, s, w in todo:
        opts = {k: v for k, v in (("method", a.method), ("mu_factor", a.mu_factor)) if v is not None}
        row = run(s, w, a.target_gap, a.max_seconds, name, a.max_view_cells, opts)
        line = json.dumps(row)
        print(line, flush=True)
        with open(a.out, "a") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    sys.exit(main())
