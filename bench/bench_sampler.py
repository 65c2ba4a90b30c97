"""Benchmark: measure with each Gaussian sampler (numpy, discrete, OpenDP) on the Table 7 row.

Plans range:1+affine:2+prefix:3 on synthetic:n=40,d=40 (qs), draws 100,000 synthetic records as in
bench_measure.py, times the privacy re-check, the whole measure (marginals, X^(1/2), noise) with
the samplers named by ``--full`` (default numpy), and each sampler alone on vectors of the largest
view's size; the noise time for every view is extrapolated from that rate (printed as such).
Usage:

    python bench/bench_sampler.py [--repeats 3] [--full numpy,discrete] [--out bench/out/sampler.json]
"""

from __future__ import annotations

import argparse
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
    ap.add_argument("--repeats", type=int, default=3, help="largest-view noise vectors drawn per sampler")
    ap.add_argument("--full", default="numpy", help="samplers that run the whole measure (opendp: hours)")
    ap.add_argument("--out", default="bench/out/sampler.json")
    args = ap.parse_args()

    from querysmasher.accounting import Budget
    from querysmasher.data import validate_records
    from querysmasher.measure import check_budget, measure_iter, measurements_of
    from querysmasher.noise import make_noise
    from querysmasher.planning import make_plan
    from querysmasher.schema import parse_schema

    schema = parse_schema(args.schema)
    rng = np.random.default_rng(0)
    probs = [rng.dirichlet(np.ones(n)) for n in schema.sizes]
    codes = np.stack([rng.choice(n, size=args.records, p=p) for n, p in zip(schema.sizes, probs)], axis=1)
    records = validate_records(pd.DataFrame(codes, columns=schema.names), schema)
    t0 = time.perf_counter()
    plan = make_plan(schema, args.workload, args.method, Budget.from_beta(1.0))
    plan_s = time.perf_counter() - t0
    ms = measurements_of(plan)
    cells = [math.prod(schema.sizes[a] for a in m.attrs) for m in ms]
    total_cells = int(sum(cells))
    out = {
        "args": vars(args),
        "plan_seconds": round(plan_s, 2),
        "measured_views": len(ms),
        "total_cells": total_cells,
        "samplers": {},
    }

    t = time.perf_counter()
    check_budget(plan)  # the privacy re-check: it computes every distinct X^(1/2), which measure reuses
    out["check_seconds"] = round(time.perf_counter() - t, 2)
    print("check", out["check_seconds"], flush=True)

    for sampler in ("numpy", "discrete", "opendp"):
        noise = make_noise(None, sampler)
        if sampler in args.full.split(","):
            t = time.perf_counter()
            n = sum(y.size for _, y in measure_iter(plan, records, noise))
            out["samplers"][sampler] = {"measure_all_views_seconds": round(time.perf_counter() - t, 2), "cells": n}
        else:
            out["samplers"][sampler] = {}
        # The sampler alone on vectors of the largest view size (64,000 cells for the Table 7 row).
        clean = np.zeros(max(cells))
        t = time.perf_counter()
        for _ in range(args.repeats):
            noise.add_gaussian(clean, 1.0, sensitivity2=1.0)
        rate = (time.perf_counter() - t) / (args.repeats * clean.size)
        out["samplers"][sampler].update(
            {
                "noise_us_per_cell": round(1e6 * rate, 4),
                "noise_all_views_seconds_extrapolated": round(rate * total_cells, 1),
                "cells_per_hour": int(3600 / rate),
            }
        )
        print(sampler, out["samplers"][sampler], flush=True)
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
