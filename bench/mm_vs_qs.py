"""Benchmark: the residual optimum (qs) and the marginal family (qsplus) against the exact matrix
mechanism (mm) and the SVD bound.

For 1-, 2- and 3-attribute synthetic domains up to the dense limit and every query family, prints a
markdown table of RMSE at beta = 1: qs, qsplus (certified within its family; "--" where the
workload has no view of two attributes, so qsplus is qs), mm (certified), the SVD bound (no
Gaussian mechanism does better), and the ratios qsplus/qs, mm/qs (how much mechanisms outside the
residual family gain) and SVD/mm.
Usage:

    python bench/mm_vs_qs.py [--quick] [--out bench/out/mm_vs_qs.json]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

from querysmasher.accounting import Budget
from querysmasher.errors import InputError
from querysmasher.planning import make_plan

PRODUCT = ["marginal", "prefix", "range", "circular"]


def cases(quick: bool) -> list[tuple[str, str]]:
    out = []
    for n in [10, 64] if quick else [10, 64, 256]:
        out += [(f"synthetic:n={n},d=1", f"{f}:1") for f in PRODUCT + ["random"]]
    for n in [6] if quick else [6, 12, 20]:
        s = f"synthetic:n={n},d=2"
        out += [(s, f"{f}:1,2") for f in PRODUCT] + [
            (s, "affine:2"),
            (s, "abs:2"),
            (s, "random:2"),
            (s, "prefix:1+affine:2"),
            (s, "hybrid:1,2"),
        ]
    for n in [4] if quick else [4, 8]:
        s = f"synthetic:n={n},d=3"
        out += [(s, f"{f}:1,2,3") for f in PRODUCT] + [
            (s, "prefix:1+affine:2"),
            (s, "range:1+abs:2"),
            (s, "random:1,2"),
        ]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default="bench/out/mm_vs_qs.json")
    args = ap.parse_args()
    rows = []
    print(
        "| domain | workload | cells | qs RMSE | qsplus RMSE (certified gap) | mm RMSE (certified gap) "
        "| SVD bound RMSE | qsplus / qs | mm / qs | SVD / mm | qsplus / mm seconds |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    beta1 = Budget.from_beta(1.0)
    for schema, spec in cases(args.quick):
        qs = make_plan(schema, spec, "qs", beta1)
        t0 = time.perf_counter()
        try:
            plus = make_plan(schema, spec, "qsplus", beta1)
        except InputError:  # no view of two attributes: the marginal family is the residual one
            plus = None
        plus_secs = time.perf_counter() - t0
        t0 = time.perf_counter()
        mm = make_plan(schema, spec, "mm", beta1)
        secs = time.perf_counter() - t0
        svd = math.sqrt(mm.svd_bound / mm.queries)
        row = {
            "schema": schema,
            "workload": spec,
            "cells": mm.schema.domain_cells(),
            "qs": qs.rmse,
            "mm": mm.rmse,
            "mm_gap": mm.gap,
            "svd": svd,
            "mm_seconds": secs,
            "mm_solver": mm.solutions[mm.keys[0]].solver,
            "qsplus": None if plus is None else plus.rmse,
            "qsplus_gap": None if plus is None else plus.gap,
            "qsplus_seconds": plus_secs,
        }
        rows.append(row)
        plus_cells = (
            ("--", "--") if plus is None else (f"{plus.rmse:.4f} ({plus.gap:.0e})", f"{plus.rmse / qs.rmse:.4f}")
        )
        print(
            f"| {schema.removeprefix('synthetic:')} | {spec} | {row['cells']} | {qs.rmse:.4f} | {plus_cells[0]} | "
            f"{mm.rmse:.4f} ({mm.gap:.0e}) | {svd:.4f} | "
            f"{plus_cells[1]} | {mm.rmse / qs.rmse:.4f} | {svd / mm.rmse:.4f} | {plus_secs:.1f} / {secs:.1f} |",
            flush=True,
        )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
