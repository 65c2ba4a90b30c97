"""Benchmark: unbiased against consistent non-negative tables on Adult at small budgets (issue 44).

Plans the release workload (marginal tables of a few Adult attribute pairs and their 1-way
margins) with ``qs`` at each budget, measures the shipped Adult records with seeded numpy noise
(an experiment: the error against the true tables is computed here, never in a release), and
reports per budget the RMSE per cell against the true tables of the unbiased tables and of the
consistent non-negative ones (:mod:`querysmasher.consistent`) and of Private-PGM's model fitted to
the same measurements (:mod:`querysmasher.mbi_export`, ``MirrorDescent``, float64; skipped when the
extra ``mbi`` is not installed), their share of negative cells and the times of the fits, averaged
over the seeds. Usage:

    python bench/consistent.py [--rho 0.001,0.01,0.1] [--seeds 5] [--mbi-iters 2000]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

import querysmasher as qs
from querysmasher.consistent import consistent_tables
from querysmasher.data import load_records
from querysmasher.reconstruct import reconstruct
from querysmasher.schema import parse_schema

ROOT = Path(__file__).resolve().parents[1]
PAIRS = [("age", "sex"), ("sex", "income>50K"), ("education-num", "income>50K"), ("race", "sex")]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rho", default="0.001,0.01,0.1")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--mbi-iters", type=int, default=2000)
    ap.add_argument("--out", default="bench/out/consistent.json")
    args = ap.parse_args()
    try:
        import jax

        jax.config.update("jax_enable_x64", True)
        from mbi.estimation import MirrorDescent
    except ImportError:
        MirrorDescent = None
    schema = parse_schema(str(ROOT / "data" / "adult-domain.json"))
    records = load_records(ROOT / "data" / "adult.csv", schema, domain_file=ROOT / "data" / "adult-domain.json")
    names = schema.names
    singles = sorted({a for p in PAIRS for a in p}, key=names.index)
    terms = [f"marginal:({','.join(p)})" for p in PAIRS] + [f"marginal:({a})" for a in singles]
    tables = [tuple(sorted(names.index(a) for a in p)) for p in PAIRS] + [(names.index(a),) for a in singles]
    codes = np.asarray(records.codes)
    truth = {}
    for t in tables:
        idx = np.ravel_multi_index(tuple(codes[:, a] for a in t), tuple(schema.sizes[a] for a in t))
        truth[t] = np.bincount(idx, minlength=int(np.prod([schema.sizes[a] for a in t]))).astype(float)
    cells = sum(len(v) for v in truth.values())
    rows = []
    for rho in (float(r) for r in args.rho.split(",")):
        plan = qs.make_plan(schema, "+".join(terms), method="qs", rho=rho)
        err_u, err_c, err_m, neg, secs, secs_m = [], [], [], [], [], []
        for seed in range(args.seeds):
            release = plan.measure(records, seed=seed)
            est = reconstruct(plan, release)
            t0 = time.perf_counter()
            agreed = consistent_tables(plan, release, tables)
            secs.append(time.perf_counter() - t0)
            un = {t: np.asarray(est.table(t)) for t in tables}
            err_u.append(np.sqrt(sum(float(np.sum((un[t] - truth[t]) ** 2)) for t in tables) / cells))
            err_c.append(np.sqrt(sum(float(np.sum((agreed[t] - truth[t]) ** 2)) for t in tables) / cells))
            neg.append(sum(int(np.sum(un[t] < 0)) for t in tables) / cells)
            if MirrorDescent is not None:
                t0 = time.perf_counter()
                out = release.to_mbi()
                model = MirrorDescent().estimate(
                    out.domain, out.measurements, known_total=out.total, iters=args.mbi_iters
                )
                fitted = {t: np.asarray(model.project(tuple(names[a] for a in t)).datavector()) for t in tables}
                secs_m.append(time.perf_counter() - t0)
                err_m.append(np.sqrt(sum(float(np.sum((fitted[t] - truth[t]) ** 2)) for t in tables) / cells))
        row = {
            "rho": rho,
            "cells": cells,
            "seeds": args.seeds,
            "rmse_unbiased": float(np.mean(err_u)),
            "rmse_consistent": float(np.mean(err_c)),
            "ratio": float(np.mean(err_c) / np.mean(err_u)),
            "negative_cells_unbiased": float(np.mean(neg)),
            "consistent_seconds": float(np.median(secs)),
        }
        if err_m:
            row.update(
                rmse_private_pgm=float(np.mean(err_m)),
                private_pgm_ratio=float(np.mean(err_m) / np.mean(err_u)),
                private_pgm_seconds=float(np.median(secs_m)),
                private_pgm_iters=args.mbi_iters,
            )
        rows.append(row)
        print(json.dumps(row), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
