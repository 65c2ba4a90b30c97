"""The paper's tables and figures from a grid's results: ours beside the paper's published figures.

A paper config (``config/paper/table{2..7}.yaml``) has a ``paper:`` section naming the table and the
paper's row label of each grid workload. :func:`paper_table` turns the grid's ``metrics.json``
records (and the experiments the workflow skipped because the method does not support the
workload) into one long table:

* RMSE tables (2-5): one row per (dataset, n, d, workload, method) with our predicted RMSE, the
  empirical RMSE of a release (when run), for ``qs`` the certified lower bound and relative gap, the
  query count, the paper's figure and the relative difference ``ours / paper - 1``. ``status`` is
  ``NI`` when the method does not support the workload (no plan), ``*`` when the error is computable
  but the method cannot release (HDMM on a domain above its full-vector limit), else empty.
* timing tables (6-7): one row per (n, d) with QuerySmasher's phase times and peak memory from the
  rules' benchmark files, beside the paper's.

>>> m = {"schema_spec": "synthetic:n=10,d=40", "workload": "prefix:1+affine:2", "method": "qs",
...      "predicted_rmse": 28.0, "lower_bound_rmse": 27.9, "queries": 15220}
>>> row = paper_table(4, [m], [], {"prefix:1+affine:2": "affine"}).iloc[0]
>>> float(row["paper"]), round(float(row["rel_diff"]), 4), int(row["paper_queries"])
(28.25, -0.0088, 15220)
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from ..allocation import relative_gap
from ..atomic import write_text
from ..paper import METHOD_COLUMNS, PaperFigures, load_paper_figures
from .paper_plots import plot_table

__all__ = [
    "RMSE_TABLES",
    "TIMING_TABLES",
    "METHOD_ORDER",
    "row_keys",
    "not_measurable",
    "paper_table",
    "table_markdown",
    "write_paper_outputs",
    "CAPTIONS",
]

RMSE_TABLES = (2, 3, 4, 5)
TIMING_TABLES = (6, 7)
METHOD_ORDER = ("rp", "rpplus", "hdmm", "wff", "qs")
_SYNTHETIC = re.compile(r"^synthetic:n=(\d+),d=(\d+)$")
_DATASET_ORDER = {"adult": 0, "cps": 1, "loans": 2, "synthetic": 3}

CAPTIONS = {
    2: "Table 2: RMSE of hybrid marginal/prefix workloads at privacy cost beta = 1 (ours beside the paper's).",
    3: "Table 3: RMSE of 2-way affine and abs workloads at beta = 1; 'as run' rows are the paper's workloads, "
    "'(every pair)' rows the version the paper describes (no paper figure).",
    4: "Table 4: RMSE of 1-way + 2-way workloads at beta = 1 on [n]^40 (plan only: expected error).",
    5: "Table 5: RMSE of range:1 + affine:2 + prefix:3 at beta = 1 on [n]^d (plan only: expected error).",
    6: "Table 6: QuerySmasher phase times and peak memory, prefix:1,2 on [n]^d "
    "(this machine: 2 cores; paper: 128 cores).",
    7: "Table 7: QuerySmasher phase times and peak memory, range:1 + affine:2 + prefix:3 on [n]^d "
    "(this machine: 2 cores; paper: 128 cores).",
}


def row_keys(schema_spec: str) -> tuple[str, int | None, int | None]:
    """(dataset, n, d) of the paper's tables for a schema spec.

    >>> row_keys("adult"), row_keys("synthetic:n=20,d=40")
    (('adult', None, None), ('synthetic', 20, 40))
    """
    m = _SYNTHETIC.match(str(schema_spec).strip())
    if m:
        return "synthetic", int(m.group(1)), int(m.group(2))
    return str(schema_spec).strip(), None, None


def not_measurable(method: str, schema_spec: str) -> bool:
    """Whether the method computes its error but cannot release on this schema (the paper's *):
    HDMM above its full-data-vector limit."""
    if method != "hdmm":
        return False
    from ..hdmm.plan import MAX_DOMAIN_CELLS  # loads scipy, numpy only where it is used
    from ..schema import parse_schema  # in the body: the stage function's fingerprint follows it

    return parse_schema(schema_spec).domain_cells() > MAX_DOMAIN_CELLS


def _num(x) -> float | None:
    if x is None:
        return None
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


def _rmse_rows(
    table: int, metrics: list[dict], unsupported: list[dict], labels: dict, figs: PaperFigures
) -> list[dict]:
    rows = []
    for m, status in [(m, "") for m in metrics] + [(u, "NI") for u in unsupported]:
        dataset, n, d = row_keys(m["schema_spec"])
        label = labels.get(m["workload"], m["workload"])
        fig = figs.get(table, m["method"], dataset=dataset, n=n, d=d, workload=label)
        qfig = figs.get(table, "#Queries", dataset=dataset, n=n, d=d, workload=label)
        rmse = None if status else _num(m.get("predicted_rmse"))
        if not status and not_measurable(m["method"], m["schema_spec"]):
            status = "*"
        lb = _num(m.get("lower_bound_rmse")) if not status or status == "*" else None
        paper = fig.value if fig is not None else None
        rows.append(
            {
                "table": table,
                "dataset": dataset,
                "n": n,
                "d": d,
                "workload": label,
                "workload_spec": m["workload"],
                "method": m["method"],
                "queries": _num(m.get("queries")),
                "paper_queries": qfig.value if qfig else None,
                "status": status,
                "rmse": rmse,
                "empirical_rmse": None if status == "NI" else _num(m.get("empirical_rmse")),
                "lower_bound_rmse": lb,
                "gap": relative_gap(rmse**2, lb**2) if (lb and rmse) else None,
                "paper": paper,
                "paper_printed": fig.printed if fig is not None else "",
                "rel_diff": (rmse / paper - 1) if (rmse is not None and paper) else None,
                "reason": m.get("reason", ""),
            }
        )
    return rows


def _phase(m: dict, *stages: str) -> tuple[float | None, float | None]:
    ph = m.get("phases") or {}
    found = [ph[s] for s in stages if s in ph]
    if not found:
        return None, None
    return sum(p["seconds"] for p in found), max(p["max_rss_mb"] for p in found)


def _timing_rows(table: int, metrics: list[dict], figs: PaperFigures) -> list[dict]:
    rows = []
    for m in metrics:
        if m["method"] != "qs":
            continue
        _, n, d = row_keys(m["schema_spec"])
        decomp, r1 = _phase(m, "workload", "decompose")
        solve, r2 = _phase(m, "solve", "allocate")
        assem, r3 = _phase(m, "measure", "reconstruct")
        parts = [x for x in (decomp, solve, assem) if x is not None]
        rss = [x for x in (r1, r2, r3) if x is not None]
        row = {
            "table": table,
            "n": n,
            "d": d,
            "workload_spec": m["workload"],
            "views": _num(m.get("workload_views")),
            "decomp_s": decomp,
            "solve_s": solve,
            "assem_s": assem,
            "total_s": sum(parts) if parts else None,
            "mem_gb": max(rss) / 1024 if rss else None,
        }
        for col, key in (
            ("#Views", "views"),
            ("Decomp", "decomp_s"),
            ("Solve", "solve_s"),
            ("Assem", "assem_s"),
            ("Total", "total_s"),
            ("Mem", "mem_gb"),
        ):
            f = figs.get(table, col, n=n, d=d)
            row[f"paper_{key}"] = f.value if f is not None else None
            row[f"paper_{key}_printed"] = f.printed if f is not None else ""
        for key in ("total_s", "mem_gb"):
            ours, paper = row[key], row[f"paper_{key}"]
            bound = figs.get(table, {"total_s": "Total", "mem_gb": "Mem"}[key], n=n, d=d)
            exact = bound is not None and bound.flag != "<"
            row[f"{key}_ratio"] = (ours / paper) if (ours is not None and paper and exact) else None
        rows.append(row)
    return rows


def paper_table(
    table: int, metrics: list[dict], unsupported: list[dict], labels: dict, figs: PaperFigures | None = None
):
    """The long table (a pandas DataFrame) of one of the paper's tables; see the module docstring."""
    import pandas as pd  # loads pandas only where it is used

    figs = figs if figs is not None else load_paper_figures()
    if table in RMSE_TABLES:
        df = pd.DataFrame(_rmse_rows(table, metrics, unsupported, labels, figs))
        if df.empty:
            return df
        order = {lab: i for i, lab in enumerate(dict.fromkeys(labels.values()))}
        df["_ds"] = df["dataset"].map(lambda s: _DATASET_ORDER.get(s, 9))
        df["_w"] = df["workload"].map(lambda w: order.get(w, len(order)))
        df["_m"] = df["method"].map(lambda m: METHOD_ORDER.index(m) if m in METHOD_ORDER else len(METHOD_ORDER))
        df = df.sort_values(["_ds", "dataset", "n", "d", "_w", "_m"], na_position="first").drop(
            columns=["_ds", "_w", "_m"]
        )
    elif table in TIMING_TABLES:
        df = pd.DataFrame(_timing_rows(table, metrics, figs))
        if df.empty:
            return df
        df = df.sort_values(["n", "d"])
    else:
        raise ValueError(f"table {table} is not one of the paper's result tables (2-7)")
    return df.reset_index(drop=True)


def _fmt(x, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}f}"


def _pct(x) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:+.1f}%"


def table_markdown(table: int, df) -> str:
    """The table as Markdown, laid out like the paper's: one line per row, one column per method,
    each cell ``ours (paper, difference)``; for QS also its certified lower bound and gap."""
    lines = [f"**{CAPTIONS[table]}**", ""]
    if df.empty:
        return "\n".join(lines + ["(no results yet)", ""])
    records = df.astype(object).where(df.notna(), None).to_dict("records")
    if table in TIMING_TABLES:
        head = [
            "n",
            "d",
            "#Views",
            "Decomp (s)",
            "Solve (s)",
            "Assem (s)",
            "Total (s)",
            "Mem (GB)",
            "Total / paper",
            "Mem / paper",
        ]
        lines += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
        for r in records:

            def cell(key, digits=1):
                ours = _fmt(r[key], digits)
                return f"{ours} ({r[f'paper_{key}_printed']})" if r[f"paper_{key}_printed"] else ours

            ratio = lambda k: "" if r[k] is None else f"{r[k]:.2f}x"  # noqa: E731
            lines.append(
                "| "
                + " | ".join(
                    [
                        str(r["n"]),
                        str(r["d"]),
                        cell("views", 0),
                        cell("decomp_s"),
                        cell("solve_s"),
                        cell("assem_s"),
                        cell("total_s"),
                        cell("mem_gb", 2),
                        ratio("total_s_ratio"),
                        ratio("mem_gb_ratio"),
                    ]
                )
                + " |"
            )
        lines += ["", "Cells: ours (paper). Ratios only where the paper prints a value, not a bound.", ""]
        return "\n".join(lines)
    methods = [m for m in METHOD_ORDER if m in set(df["method"])] + sorted(set(df["method"]) - set(METHOD_ORDER))
    keys = ["dataset"] if table in (2, 3) else (["n"] if table == 4 else ["n", "d"])
    head = [k.capitalize() if k == "dataset" else k for k in keys] + ([] if table == 5 else ["Workload", "#Queries"])
    head += [METHOD_COLUMNS.get(m, m.upper()) for m in methods] + (["QS lower bound (gap)"] if "qs" in methods else [])
    lines += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    groups: dict[tuple, dict] = {}
    for r in records:
        groups.setdefault((r["dataset"], r["n"], r["d"], r["workload"]), {})[r["method"]] = r
    for (dataset, n, d, workload), by in groups.items():
        first = next(iter(by.values()))
        q = _fmt(first["queries"], 0)
        if first["paper_queries"] is not None and first["paper_queries"] != first["queries"]:
            q += f" (paper {_fmt(first['paper_queries'], 0)})"
        cells = [{"dataset": dataset, "n": str(n), "d": str(d)}[k] for k in keys] + (
            [] if table == 5 else [workload, q]
        )
        for m in methods:
            r = by.get(m)
            if r is None:
                cells.append("")
                continue
            ours = "NI" if r["status"] == "NI" else _fmt(r["rmse"]) + ("*" if r["status"] == "*" else "")
            if r["paper_printed"]:
                ours += f" ({r['paper_printed']}" + (f", {_pct(r['rel_diff'])})" if r["rel_diff"] is not None else ")")
            cells.append(ours)
        if "qs" in methods:
            r = by.get("qs")
            cells.append(
                "" if not r or r["lower_bound_rmse"] is None else f"{_fmt(r['lower_bound_rmse'])} ({r['gap']:.1e})"
            )
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Cells: our RMSE (the paper's figure, relative difference). NI: the method does not support the "
        "workload; *: error computable, release not runnable (full data vector too large).",
        "",
    ]
    return "\n".join(lines)


def write_paper_outputs(
    table: int,
    metrics: list[dict],
    unsupported: list[dict],
    labels: dict,
    csv_path,
    md_path,
    figure_paths: dict | None = None,
    figs: PaperFigures | None = None,
) -> dict:
    """Write ``table{N}.csv`` and ``.md`` (and the table's figures) atomically."""
    df = paper_table(table, metrics, unsupported, labels, figs)
    write_text(Path(csv_path), df.to_csv(index=False))
    write_text(Path(md_path), table_markdown(table, df))
    if figure_paths:
        plot_table(table, df, figure_paths)
    return {"table": table, "rows": len(df)}
