"""Benchmark: measure with each Gaussian sampler (numpy vs OpenDP) on the Table 7 row (issue 12).

Plans range:1+affine:2+prefix:3 on synthetic:n=40,d=40 (qs), draws 100,000 synthetic records as in
bench_measure.py, then times ``measure_iter`` (marginals, X^(1/2), noise) over the first ``--views``
measured views with each sampler and reports seconds per noisy cell. The full row (all views) is
timed for numpy only when ``--full-numpy``; OpenDP's full-row time is extrapolated from its rate and
printed as such. Usage:

    python bench/bench_sampler.py [--views 40] [--full-numpy] [--out bench/out/sampler.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import resource
import time
from pathlib import Path

import numpy as np
import pandas as pd


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--schema", default="synthetic:n=40,d=40")
    ap.add_argument("--workload", default="range:1+affine:2+prefix:3")
    ap.add_argument("--method", default="qs")
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--views", type=int, default=40, help="measured views timed per sampler (largest first)")
    ap.add_argument("--full-numpy", action="store_true", help="also time numpy over every view")
    ap.add_argument("--out", default="bench/out/sampler.json")
    args = ap.parse_args()

    from querysmasher.accounting import Budget
    from querysmasher.data import validate_records
    from querysmasher.measure import measure_iter, measured_views
    from querysmasher.noise import make_noise
    from querysmasher.plan import make_plan
    from querysmasher.schema import parse_schema

    schema = parse_schema(args.schema)
    rng = np.random.default_rng(0)
    probs = [rng.dirichlet(np.ones(n)) for n in schema.sizes]
    codes = np.stack([rng.choice(n, size=args.records, p=p) for n, p in zip(schema.sizes, probs)], axis=1)
    records = validate_records(pd.DataFrame(codes, columns=schema.names), schema)
    t0 = time.perf_counter()
    plan = make_plan(schema, args.workload, args.method, Budget.from_beta(1.0))
    plan_s = time.perf_counter() - t0
    idx = measured_views(plan)
    cells = [math.prod(schema.sizes[a] for a in plan.views[i]) for i in idx]
    total_cells = int(sum(cells))
    out = {"args": vars(args), "plan_seconds": round(plan_s, 2), "measured_views": len(idx), "total_cells": total_cells, "samplers": {}}

    def timed(sampler: str, limit: int | None) -> dict:
        noise = make_noise(None, sampler)
        t = time.perf_counter()
        n = 0
        for _, y in itertools.islice(measure_iter(plan, records, noise), limit):
            n += y.size
        s = time.perf_counter() - t
        return {"views": limit or len(idx), "cells": n, "seconds": round(s, 2), "us_per_cell": round(1e6 * s / n, 3)}

    for sampler in ("numpy", "opendp"):
        r = timed(sampler, args.views)
        r["full_row_seconds_extrapolated"] = round(r["us_per_cell"] * 1e-6 * total_cells, 1)
        out["samplers"][sampler] = r
        print(sampler, r, flush=True)
    if args.full_numpy:
        out["samplers"]["numpy_full"] = timed("numpy", None)
        print("numpy full", out["samplers"]["numpy_full"], flush=True)
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
