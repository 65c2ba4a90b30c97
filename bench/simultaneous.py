"""Benchmark: simultaneous intervals by simulation against Šidák's and Bonferroni's bounds.

For each (schema, workload) case, plans it with ``--method``, and for every workload view's answers
(and every estimable table) computes the simulated multiplier (querysmasher.simultaneous, its
default settings: 20,000 draws, risk 1e-6), Šidák's and Bonferroni's; prints the time of the
simulation, the peak memory, and the ratio simulated / Šidák (the interval's width against what is
published without the simulation; below 1 is narrower). Usage:

    python bench/simultaneous.py [--method qs] [--out bench/out/simultaneous.json]
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import numpy as np

CASES = (
    ("synthetic:n=10,d=6", "marginal:2"),
    ("synthetic:n=20,d=4", "prefix:1,2"),
    ("synthetic:n=50,d=3", "range:1"),
    ("synthetic:n=30,d=3", "prefix:2"),
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--method", default="qs")
    ap.add_argument("--confidence", type=float, default=0.95)
    ap.add_argument("--out", default="bench/out/simultaneous.json")
    args = ap.parse_args()

    from querysmasher.intervals import multiplier
    from querysmasher.measure import measurements_of
    from querysmasher.planning import make_plan
    from querysmasher.reconstruct import table_attrs, variances_of
    from querysmasher.simultaneous import SIMULTANEOUS, sidak, simulated

    c = args.confidence
    rows = []
    for schema, workload in CASES:
        plan = make_plan(schema, workload, method=args.method, beta=0.5)
        var = variances_of(plan)
        views = enumerate(plan.workload.views)
        sets = [(("answers", k), var.view(v), lambda e, v=v: e.view_answers(v)) for k, v in views]
        for attrs in table_attrs(plan):
            cells, _ = var.cells(attrs)
            if cells is not None:
                sets.append((("table", attrs), cells, lambda e, a=attrs: e.table(a)))
        values = sum(len(x) for _, x, _ in sets)
        measured = sum(m.rows for m in measurements_of(plan))
        t = time.perf_counter()
        z = simulated(plan, sets, c)
        seconds = time.perf_counter() - t
        for kind in ("answers", "table"):
            ratio = [z[key][0] / sidak(c, len(x)) for key, x, _ in sets if key[0] == kind]
            bonf = [multiplier(c, cells=len(x)) / sidak(c, len(x)) for key, x, _ in sets if key[0] == kind]
            if ratio:
                rows.append(
                    {
                        "schema": schema,
                        "workload": workload,
                        "sets": kind,
                        "count": len(ratio),
                        "simulated_over_sidak_median": float(np.median(ratio)),
                        "simulated_over_sidak_min": float(np.min(ratio)),
                        "bonferroni_over_sidak_median": float(np.median(bonf)),
                        "values": values,
                        "measured_values": measured,
                        "draws": SIMULTANEOUS.draws,
                        "seconds": seconds,
                    }
                )
                r = rows[-1]
                print(
                    f"{schema:20} {workload:12} {kind:7} x{r['count']:<3} simulated/Sidak median "
                    f"{r['simulated_over_sidak_median']:.3f} (min {r['simulated_over_sidak_min']:.3f}), "
                    f"Bonferroni/Sidak {r['bonferroni_over_sidak_median']:.4f}; {values} estimates, "
                    f"{measured} measured values, {seconds:.1f} s"
                )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak memory {peak:.0f} MB")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"rows": rows, "peak_mb": peak}, indent=1))


if __name__ == "__main__":
    main()
