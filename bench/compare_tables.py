"""Compare two runs' paper tables (results/paper/tableN.csv): per method, the largest relative
difference of the predicted RMSE, the certified lower bound and the empirical RMSE over the rows
both runs have (matched by every non-numeric column: table, dataset, workload, method, ...).

    python bench/compare_tables.py NEW/results/paper/table3.csv OLD/results/paper/table3.csv

Use it to check that a refactor left every figure of the grid where it was.
"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

COLUMNS = ("rmse", "lower_bound_rmse", "empirical_rmse")


def compare(new_csv: str, old_csv: str) -> list[tuple[str, str, int, float]]:
    """(column, method, rows compared, largest relative difference) for every column and method."""
    a, b = pd.read_csv(new_csv), pd.read_csv(old_csv)
    keys = [c for c in a.columns if a[c].dtype.kind != "f" and c in b.columns and c not in ("status", "paper_queries")]
    m = a.merge(b, on=keys, suffixes=("", "_old"))
    out = []
    for c in COLUMNS:
        if c not in a.columns or c + "_old" not in m.columns:
            continue
        for method, g in m.groupby("method"):
            x, y = g[c].to_numpy(float), g[c + "_old"].to_numpy(float)
            ok = np.isfinite(x) & np.isfinite(y)
            if ok.any():
                rel = np.abs(x[ok] - y[ok]) / np.maximum(np.abs(y[ok]), 1e-300)
                out.append((c, str(method), int(ok.sum()), float(rel.max())))
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[3].strip(), file=sys.stderr)
        return 2
    rows_new, rows_old = len(pd.read_csv(argv[0])), len(pd.read_csv(argv[1]))
    print(f"{argv[0]}: {rows_new} rows; {argv[1]}: {rows_old} rows")
    for c, method, n, rel in compare(*argv):
        print(f"  {c:18s} {method:8s} {n:4d} rows  largest relative difference {rel:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
