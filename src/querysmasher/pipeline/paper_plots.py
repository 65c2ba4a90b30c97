"""Figures of the paper's tables (matplotlib, Agg backend): ours as solid lines, the paper's dashed.

- Table 4: RMSE against n, one panel per workload family, one line per method;
- Table 5: RMSE against d, one panel per n;
- Tables 6-7: solve time and peak memory against the number of workload views (log-log).
"""

from __future__ import annotations

from pathlib import Path

from ..atomic import atomic_path

__all__ = ["FIGURES", "plot_table"]

FIGURES: dict[int, tuple[str, ...]] = {
    2: (),
    3: (),
    4: ("rmse-vs-n",),
    5: ("rmse-vs-d",),
    6: ("solve-time-vs-views", "memory-vs-views"),
    7: ("solve-time-vs-views", "memory-vs-views"),
}
_COLORS = {"rp": "tab:gray", "rpplus": "tab:orange", "hdmm": "tab:purple", "wff": "tab:green", "qs": "tab:blue"}


def _save(fig, path: Path) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)


def _rmse_panels(df, panel: str, x: str, title: str, path: Path) -> None:
    import matplotlib.pyplot as plt  # loads matplotlib only where it is used

    panels = list(dict.fromkeys(df[panel])) or [""]
    cols = min(4, len(panels))
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 3.0 * rows), squeeze=False)
    for ax, key in zip(axes.flat, panels):
        sub = df[df[panel] == key]
        for method in dict.fromkeys(sub["method"]):
            g = sub[(sub["method"] == method) & (sub["status"] != "NI")].sort_values(x)
            c = _COLORS.get(method)
            if g["rmse"].notna().any():
                ax.plot(g[x], g["rmse"], "o-", color=c, label=method, ms=3)
            if g["paper"].notna().any():
                ax.plot(g[x], g["paper"], "x--", color=c, alpha=0.6, ms=3)
        ax.set_title(f"{panel} = {key}" if panel != "workload" else str(key), fontsize=9)
        ax.set_xlabel(x)
        ax.set_ylabel("RMSE")
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(
        handles,
        labels,
        loc="lower center",
        ncol=max(1, len(labels)),
        fontsize=7,
        title="solid: ours, dashed: paper",
        title_fontsize=7,
    )
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    _save(fig, path)


def _loglog(df, ours: str, paper: str, ylabel: str, title: str, path: Path) -> None:
    import matplotlib.pyplot as plt  # loads matplotlib only where it is used

    fig, ax = plt.subplots(figsize=(6, 4.5))
    for n in sorted(set(df["n"])):
        g = df[df["n"] == n].sort_values("views")
        line = ax.plot(g["views"], g[ours], "o-", ms=4, label=f"ours, n={n}")[0]
        if g[paper].notna().any():
            ax.plot(g["views"], g[paper], "x--", ms=4, color=line.get_color(), alpha=0.6, label=f"paper, n={n}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("workload views")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    _save(fig, path)


def plot_table(table: int, df, paths: dict[str, str | Path]) -> None:
    """Write the figures ``FIGURES[table]`` to ``paths[name]`` (an empty table gives empty axes)."""
    import matplotlib  # loads matplotlib only where it is used

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # loads matplotlib only where it is used

    try:
        if table == 4:
            _rmse_panels(df, "workload", "n", "Table 4: RMSE against n (d = 40, beta = 1)", Path(paths["rmse-vs-n"]))
        elif table == 5:
            _rmse_panels(
                df,
                "n",
                "d",
                "Table 5: RMSE against d (range:1 + affine:2 + prefix:3, beta = 1)",
                Path(paths["rmse-vs-d"]),
            )
        elif table in (6, 7):
            if df.empty:
                for name in FIGURES[table]:
                    fig = plt.figure()
                    _save(fig, Path(paths[name]))
                return
            _loglog(
                df,
                "solve_s",
                "paper_solve_s",
                "solve time (s)",
                f"Table {table}: solve time against views (ours: 2 cores; paper: 128)",
                Path(paths["solve-time-vs-views"]),
            )
            _loglog(
                df,
                "mem_gb",
                "paper_mem_gb",
                "peak memory (GB)",
                f"Table {table}: peak memory against views",
                Path(paths["memory-vs-views"]),
            )
    finally:
        plt.close("all")
