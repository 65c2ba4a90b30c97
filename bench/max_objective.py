"""Benchmark: the max-variance objective against the sum objective, per method.

For each (schema, workload) and method, plans with ``objective="sum"`` and ``objective="max"`` and
prints a markdown table: RMSE and largest query variance of both plans, the max plan's certified
lower bound and gap, and its planning time. Usage:

    python bench/max_objective.py [--out bench/out/max_objective.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from querysmasher.accounting import Budget
from querysmasher.planning import make_plan

CASES = [
    ("cps", "marginal:1,2", ("rp", "wff", "qs")),
    ("adult", "marginal:1,2", ("rp", "wff")),
    ("synthetic:n=10,d=10", "prefix:1+affine:2", ("rp", "wff", "qs")),
    ("synthetic:n=10,d=5", "prefix:1,2", ("wff", "qs")),
    ("synthetic:n=10,d=5", "range:1+abs:2", ("wff", "qs")),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/out/max_objective.json")
    args = ap.parse_args()
    beta1 = Budget.from_beta(1.0)
    rows = []
    print(
        "| schema | workload | method | sum: RMSE | sum: max variance | max: RMSE | max: max variance "
        "| max: certified lower bound (gap) | max: seconds |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for schema, spec, methods in CASES:
        for m in methods:
            s = make_plan(schema, spec, m, beta1).summary()
            t0 = time.perf_counter()
            x = make_plan(schema, spec, m, beta1, objective="max").summary()
            secs = time.perf_counter() - t0
            rows.append({"schema": schema, "workload": spec, "method": m, "sum": s, "max": x, "max_seconds": secs})
            print(
                f"| {schema} | {spec} | {m} | {s['rmse']:.4f} | {s['max_variance']:.4f} | "
                f"{x['rmse']:.4f} | {x['max_variance']:.4f} | "
                f"{x['max_variance_lower_bound']:.4f} ({x['max_variance_gap']:.1e}) | {secs:.1f} |",
                flush=True,
            )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main()
