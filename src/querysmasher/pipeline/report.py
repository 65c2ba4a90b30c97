"""The grid's report: aggregate tables (CSV) and figures (PNG) over every experiment's metrics."""

from __future__ import annotations

import json
from pathlib import Path

from ..atomic import atomic_path, write_text
from .layout import budget_slug

__all__ = ["aggregate"]

EXPERIMENT_COLUMNS = (
    "experiment",
    "schema",
    "workload",
    "method",
    "budget",
    "seed",
    "queries",
    "workload_views",
    "residual_views",
    "distinct_solves",
    "predicted_rmse",
    "lower_bound_rmse",
    "empirical_rmse",
    "mean_squared_z",
    "total_seconds",
    "peak_memory_mb",
    "certified",
)


def aggregate(metrics_paths, tables_dir, figures_dir) -> dict:
    """Tables and figures of the grid: ``experiments.csv`` (one row per experiment), ``rmse.csv``
    (predicted/empirical RMSE by schema, workload and budget x method, mean over seeds),
    ``resources.csv`` (time and peak memory against residual views); ``rmse.png``,
    ``time_vs_views.png``, ``memory_vs_views.png`` (matplotlib, Agg backend)."""
    import pandas as pd  # loads pandas only where it is used

    rows = []
    for p in metrics_paths:
        m = json.loads(Path(p).read_text())
        row = {k: m.get(k) for k in EXPERIMENT_COLUMNS}
        row["budget"] = budget_slug(row["budget"])
        row.update({f"{k}": m["privacy"][k] for k in ("beta", "rho", "mu", "epsilon", "delta")})
        for stage, ph in m.get("phases", {}).items():
            row[f"{stage}_seconds"] = ph["seconds"]
            row[f"{stage}_max_rss_mb"] = ph["max_rss_mb"]
        rows.append(row)
    df = pd.DataFrame(rows).sort_values(["schema", "workload", "method", "budget", "seed"]).reset_index(drop=True)
    tables_dir, figures_dir = Path(tables_dir), Path(figures_dir)
    write_text(tables_dir / "experiments.csv", df.to_csv(index=False))
    values = [c for c in ("predicted_rmse", "empirical_rmse") if c in df and df[c].notna().any()]
    rmse = df.pivot_table(index=["schema", "workload", "budget"], columns="method", values=values, aggfunc="mean")
    rmse.columns = [f"{v}_{meth}" for v, meth in rmse.columns]
    write_text(tables_dir / "rmse.csv", rmse.reset_index().to_csv(index=False))
    res_cols = [
        c
        for c in (
            "schema",
            "workload",
            "method",
            "budget",
            "seed",
            "workload_views",
            "residual_views",
            "distinct_solves",
            "total_seconds",
            "peak_memory_mb",
        )
        if c in df
    ] + sorted(c for c in df if c.endswith("_seconds") and c != "total_seconds")
    write_text(tables_dir / "resources.csv", df[res_cols].to_csv(index=False))
    _figures(df, figures_dir)
    return {"experiments": len(df)}


def _figures(df, figures_dir: Path) -> None:
    """``rmse.png`` (bars: predicted RMSE per method; crosses: empirical), ``time_vs_views.png`` and
    ``memory_vs_views.png`` (scatter against residual views)."""
    import matplotlib  # loads matplotlib only where it is used

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # loads matplotlib only where it is used

    figures_dir.mkdir(parents=True, exist_ok=True)
    methods = sorted(df["method"].unique())
    groups = df.groupby(["schema", "workload", "budget"], sort=True)
    labels = [f"{s}\n{w}\n{b}" for (s, w, b), _ in groups]
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(labels) * max(1, len(methods)) / 2), 4.5))
    width = 0.8 / max(1, len(methods))
    for j, meth in enumerate(methods):
        pred = [g[g.method == meth]["predicted_rmse"].mean() for _, g in groups]
        xs = [i + (j - (len(methods) - 1) / 2) * width for i in range(len(labels))]
        ax.bar(xs, pred, width, label=f"{meth} (predicted)")
        if "empirical_rmse" in df and df["empirical_rmse"].notna().any():
            emp = [g[g.method == meth]["empirical_rmse"].mean() for _, g in groups]
            ax.plot(xs, emp, "kx", label="empirical" if j == 0 else None)
    ax.set_xticks(range(len(labels)), labels, fontsize=7)
    ax.set_ylabel("RMSE")
    ax.set_title("RMSE by method and workload")
    ax.legend(fontsize=7)
    fig.tight_layout()
    _save_png(fig, figures_dir / "rmse.png")
    for col, name, ylabel in (
        ("total_seconds", "time_vs_views.png", "total time (s, benchmarks)"),
        ("peak_memory_mb", "memory_vs_views.png", "peak memory (MB, max RSS)"),
    ):
        fig, ax = plt.subplots(figsize=(6, 4.5))
        for meth in methods:
            g = df[(df.method == meth) & df[col].notna()]
            ax.scatter(g["residual_views"], g[col], label=meth)
        ax.set_xscale("log")
        ax.set_xlabel("residual views")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7)
        fig.tight_layout()
        _save_png(fig, figures_dir / name)
    plt.close("all")


def _save_png(fig, path: Path) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
