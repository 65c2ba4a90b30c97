"""Benchmark: measure and reconstruct a large workload from synthetic records (issue 4).

Default: range:1+affine:2+prefix:3 on synthetic:n=40,d=40 (10,700 views; the paper's Table 7 row)
with 100,000 records. Reports wall time and peak memory (RSS high-water mark) per phase, and writes
bench/out/measure.json. Usage:

    python bench/bench_measure.py [--schema S] [--workload W] [--method M] [--records N]
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--schema", default="synthetic:n=40,d=40")
    ap.add_argument("--workload", default="range:1+affine:2+prefix:3")
    ap.add_argument("--method", default="qs")
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--out", default="bench/out/measure.json")
    args = ap.parse_args()

    from querysmasher.accounting import Budget
    from querysmasher.data import validate_records
    from querysmasher.measure import load_measurements, make_rng, measure_iter, plan_digest, save_measurements
    from querysmasher.planfile import load_plan, save_plan
    from querysmasher.planning import make_plan
    from querysmasher.reconstruct import reconstruct, save_answers
    from querysmasher.schema import parse_schema

    phases: dict[str, dict] = {}

    def record(name: str, t0: float) -> None:
        phases[name] = {"seconds": round(time.perf_counter() - t0, 2), "peak_rss_mb_so_far": round(peak_mb())}
        print(name, phases[name], flush=True)

    tmp = Path(tempfile.mkdtemp(prefix="qs-bench-"))
    t0 = time.perf_counter()
    schema = parse_schema(args.schema)
    rng = np.random.default_rng(0)
    # Skewed synthetic records: independent attributes with a random categorical distribution each.
    probs = [rng.dirichlet(np.ones(n)) for n in schema.sizes]
    codes = np.stack([rng.choice(n, size=args.records, p=p) for n, p in zip(schema.sizes, probs)], axis=1)
    records = validate_records(pd.DataFrame(codes, columns=schema.names), schema)
    record("generate records", t0)

    t0 = time.perf_counter()
    plan = make_plan(schema, args.workload, args.method, Budget.from_beta(1.0))
    save_plan(plan, tmp / "plan.h5")
    record("plan", t0)

    t0 = time.perf_counter()
    plan = load_plan(tmp / "plan.h5")
    r, seeded = make_rng(1)
    save_measurements(
        tmp / "m.h5",
        plan,
        measure_iter(plan, records, r),
        seeded=seeded,
        plan_sha256=plan_digest(tmp / "plan.h5"),
        sampler="numpy",
    )
    record("measure", t0)

    t0 = time.perf_counter()
    with load_measurements(tmp / "m.h5") as meas:
        info = save_answers(tmp / "answers.h5", reconstruct(plan, meas))
    record("reconstruct", t0)

    sizes = {p.name: round(p.stat().st_size / 2**20, 1) for p in tmp.iterdir()}
    out = {
        "args": vars(args),
        "phases": phases,
        "file_mb": sizes,
        "views": len(plan.workload.views),
        "residual_views": len(plan.views),
        "answers": info,
        "rmse": plan.rmse,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))
    for p in tmp.iterdir():
        p.unlink()
    tmp.rmdir()


if __name__ == "__main__":
    main()
