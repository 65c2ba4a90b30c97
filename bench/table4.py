"""Reproduce the paper's Table 4 (d = 40, beta = 1) for every method; print a Markdown table.

Each cell is the RMSE computed now; the paper's figure is printed beside ours. `qs` cells carry
the certified lower bound. Usage: python bench/table4.py [--n 10 20] [--skip-qs-random-above 10]
Writes bench/out/table4.json.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from querysmasher.accounting import Budget
from querysmasher.errors import InputError
from querysmasher.hdmm import plan_hdmm
from querysmasher.planning import make_plan

# The paper's Table 4 (n = 10 and 20): RP+, HDMM, WFF, QS; None = NI (not implemented).
PAPER = {
    (10, "marginal:1,2"): (23.48, 23.48, 23.48, 23.48),
    (10, "prefix:1,2"): (36.23, 52.35, 39.70, 33.70),
    (10, "range:1,2"): (48.95, 68.98, 41.36, 41.08),
    (10, "circular:1,2"): (None, None, 39.77, 39.77),
    (10, "prefix:1+affine:2"): (62.48, None, 45.23, 28.25),
    (10, "prefix:1+abs:2"): (85.99, None, 64.11, 35.85),
    (10, "random:1,2"): (None, None, 107.81, 104.43),
    (20, "marginal:1,2"): (25.70, 25.70, 25.70, 25.70),
    (20, "prefix:1,2"): (52.63, 80.01, 62.95, 49.51),
    (20, "range:1,2"): (75.44, 109.56, 63.58, 63.32),
    (20, "circular:1,2"): (None, None, 63.01, 63.01),
    (20, "prefix:1+affine:2"): (110.30, None, 70.31, 35.71),
    (20, "prefix:1+abs:2"): (152.41, None, 102.54, 39.49),
    (20, "random:1,2"): (None, None, 234.89, 233.69),
}
METHODS = ("rp", "rpplus", "hdmm", "wff", "qs")


def run(n: int, workload: str, method: str) -> dict:
    schema = f"synthetic:n={n},d=40"
    t0 = time.perf_counter()
    try:
        if method == "hdmm":
            s = plan_hdmm(schema, workload, Budget.from_beta(1.0), seed=0).summary()
        else:
            s = make_plan(schema, workload, method, Budget.from_beta(1.0)).summary()
    except InputError as exc:
        return {"rmse": None, "error": str(exc)}
    return {
        "rmse": s["rmse"],
        "lower_bound_rmse": s.get("lower_bound_rmse"),
        "gap": s.get("gap"),
        "seconds": time.perf_counter() - t0,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, nargs="+", default=[10, 20])
    ap.add_argument(
        "--skip-qs-random-above",
        type=int,
        default=10,
        help="qs on random:1,2 solves 780 dense views; skip for larger n",
    )
    ap.add_argument("--out", default="bench/out/table4.json")
    args = ap.parse_args()
    rows = []
    print("| n | workload | rp | rpplus (paper) | hdmm (paper) | wff (paper) | qs (paper) | qs certified lower bound |")
    print("|---|---|---|---|---|---|---|---|")
    for (n, workload), paper in PAPER.items():
        if n not in args.n:
            continue
        res = {}
        for m in METHODS:
            if m == "qs" and workload.startswith("random") and n > args.skip_qs_random_above:
                res[m] = {"rmse": None, "error": "skipped (cost)"}
                continue
            res[m] = run(n, workload, m)
        rows.append(
            {"n": n, "workload": workload, "results": res, "paper": dict(zip(("rpplus", "hdmm", "wff", "qs"), paper))}
        )

        def cell(m):
            r = res[m]["rmse"]
            ours = (
                "NI" if r is None and "not support" in res[m].get("error", "") else ("—" if r is None else f"{r:.2f}")
            )
            if m == "rp":
                return ours
            p = rows[-1]["paper"][m]
            return f"{ours} ({'NI' if p is None else f'{p:.2f}'})"

        lb = res["qs"].get("lower_bound_rmse")
        print(
            f"| {n} | {workload} | "
            + " | ".join(cell(m) for m in METHODS)
            + f" | {'' if lb is None else f'{lb:.4f}'} |",
            flush=True,
        )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
