"""Benchmark: `plan` on large workloads — phase times, peak memory, certified gap, RMSE.

Each case runs in a fresh process (so peak RSS is per case). Default cases: the paper's Table 7
row (range:1+affine:2+prefix:3 on synthetic:n=40,d=40) with qs and wff, and Table 6's hardest
row (prefix:1,2 on synthetic:n=40,d=50). ``notes`` lists every view that fell back to a closed
form (no certificate). Usage:

    python bench/bench_plan.py [--case SCHEMA WORKLOAD METHOD]... [--out bench/out/plan.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

DEFAULT_CASES = [
    ("synthetic:n=40,d=40", "range:1+affine:2+prefix:3", "qs"),
    ("synthetic:n=40,d=40", "range:1+affine:2+prefix:3", "wff"),
    ("synthetic:n=40,d=50", "prefix:1,2", "qs"),
]

CHILD = """
import json, resource, sys, time
from querysmasher.accounting import Budget
from querysmasher.planning import make_plan
schema, workload, method = sys.argv[1:4]
t0 = time.perf_counter()
s = make_plan(schema, workload, method, Budget.from_beta(1.0)).summary()
s["wall_seconds"] = time.perf_counter() - t0
s["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(s))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", nargs=3, action="append", metavar=("SCHEMA", "WORKLOAD", "METHOD"))
    ap.add_argument("--out", default="bench/out/plan.json")
    args = ap.parse_args()
    results = []
    for schema, workload, method in args.case or DEFAULT_CASES:
        r = subprocess.run([sys.executable, "-c", CHILD, schema, workload, method], capture_output=True, text=True)
        if r.returncode != 0:  # report the case and go on with the others
            err = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
            print(json.dumps({"schema": schema, "workload": workload, "method": method, "error": err}), flush=True)
            results.append({"schema": schema, "workload": workload, "method": method, "error": err})
            continue
        s = json.loads(r.stdout.strip().splitlines()[-1])
        keep = {
            k: s.get(k)
            for k in (
                "schema",
                "workload",
                "method",
                "rmse",
                "gap",
                "lower_bound_rmse",
                "views",
                "residual_views",
                "distinct_solves",
                "phase_seconds",
                "wall_seconds",
                "peak_rss_mb",
                "notes",
            )
        }
        print(json.dumps(keep), flush=True)
        results.append(keep)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
