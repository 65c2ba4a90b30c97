"""Publishable tables: what a reader can use, each row with its standard error.

For every workload view the reconstruction gives a table T̂_A over the view's cells. A cell count is
estimable (T̂_A unbiased for it) only when every residual view A' ⊆ A is measured by a mechanism of
full rank on its residual space (rank prod_{i in A'} (n_i - 1)); rank-deficient mechanisms (e.g. QS or
WFF on abs/affine workloads) estimate only the workload's queries, and T̂_A is then a projection, not
a table of counts. So:

* ``<attrs>.csv``: per-cell ``estimate`` and ``std_error`` where estimable; otherwise no per-cell file
  (``tables.json`` says why);
* ``answers/<family>__<attrs>.csv``: every workload query's ``answer`` and ``std_error`` (always
  unbiased), queries numbered per attribute for product families;
* ``postprocessed/<attrs>.csv`` (optional, clearly labelled): per-cell estimates made non-negative and
  integer, each table rescaled to the same estimated total so the tables agree on it. Biased; for
  display only, never a replacement for the unbiased estimates.

Every file is written to a temporary name and renamed into place.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd

from .atomic import atomic_path, write_json
from .families import count_1d
from .filenames import distinct_file_names
from .workload import WorkloadView

__all__ = ["cells_estimable", "cell_variances", "write_tables", "write_table_files", "residual_table_data", "MAX_EXPLICIT_CELLS"]

MAX_EXPLICIT_CELLS = 4096  # cell variances through a non-Kronecker residual mechanism: explicit up to this many cells


def cells_estimable(plan, attrs: tuple[int, ...]) -> tuple[bool, str]:
    """(estimable, reason): whether every cell count of view ``attrs`` is estimable."""
    sizes = plan.schema.sizes
    measured = {a: i for i, a in enumerate(plan.views) if np.isfinite(plan.allocation.sigma2[i])}
    for r in range(len(attrs) + 1):
        for sub in itertools.combinations(attrs, r):
            name = ",".join(plan.schema.names[a] for a in sub) or "total"
            if sub not in measured:
                return False, f"residual view ({name}) is not measured"
            need = math.prod(sizes[a] - 1 for a in sub)
            got = plan.solutions[plan.keys[measured[sub]]].mechanism.rank()
            if got < need:
                return False, f"the mechanism of residual view ({name}) has rank {got} < {need}: the table is a projection"
    return True, ""


def cell_variances(plan, attrs: tuple[int, ...]) -> np.ndarray | None:
    """Variance of every cell estimate of view ``attrs`` (None when too costly to compute)."""
    from .variances import query_variances, view_variances

    if not attrs:
        return query_variances(plan, (), np.ones((1, 1)))
    # view_variances is factor-wise for kron residual views and explicit (sub-view cells squared) otherwise.
    subs = {s for r in range(len(attrs) + 1) for s in itertools.combinations(attrs, r)}
    for i, a in enumerate(plan.views):
        if a in subs and np.isfinite(plan.allocation.sigma2[i]) and not plan.solutions[plan.keys[i]].mechanism.FACTORWISE:
            if math.prod(plan.schema.sizes[x] for x in a) > MAX_EXPLICIT_CELLS:
                return None
    return view_variances(plan, WorkloadView(tuple(attrs), "marginal", 1.0, ("marginal",) * len(attrs)))


def _write_csv(frame: pd.DataFrame, path: Path) -> None:
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False)


def _cell_frame(plan, attrs) -> pd.DataFrame:
    names, sizes = plan.schema.names, plan.schema.sizes
    shape = tuple(sizes[a] for a in attrs)
    idx = np.indices(shape).reshape(len(attrs), -1) if attrs else np.zeros((0, 1), dtype=int)
    return pd.DataFrame({names[a]: idx[k] for k, a in enumerate(attrs)})


def _postprocess(table: np.ndarray, total: float) -> np.ndarray:
    """Non-negative integers summing to round(max(total, 0)) (largest remainders)."""
    x = np.clip(table, 0, None)
    target = int(round(max(total, 0.0)))
    if x.sum() <= 0 or target == 0:
        return np.zeros(len(x), dtype=np.int64)
    x = x * (target / x.sum())
    base = np.floor(x).astype(np.int64)
    extra = target - int(base.sum())
    if extra > 0:
        base[np.argsort(-(x - base), kind="stable")[:extra]] += 1
    return base


def _answers_frame(plan, v: WorkloadView, answers: np.ndarray, variances: np.ndarray) -> pd.DataFrame:
    names, sizes = plan.schema.names, plan.schema.sizes
    if v.factors:
        counts = tuple(count_1d(f, sizes[a]) for f, a in zip(v.factors, v.attrs))
        idx = np.indices(counts).reshape(len(counts), -1)
        frame = pd.DataFrame({f"{names[a]}_{f}_query": idx[k] for k, (a, f) in enumerate(zip(v.attrs, v.factors))})
    else:
        frame = pd.DataFrame({"query": np.arange(len(answers))})
    frame["answer"] = answers
    frame["std_error"] = np.sqrt(np.maximum(variances, 0))
    return frame


def write_tables(folder: str | Path, rec, *, answers: bool = True, postprocessed: bool = False, max_answers: int = 1_000_000) -> dict:
    """Write the publishable tables of a reconstruction into ``folder`` (see the module docstring);
    return (and write as ``tables.json``) an index of what was written and what was omitted, why."""
    tables, view_answers, total = residual_table_data(rec)
    return write_table_files(folder, rec.plan, tables, view_answers if answers else (), total=total, postprocessed=postprocessed,
                             max_answers=max_answers)


def residual_table_data(rec):
    """(tables, view_answers, total) of a residual plan's reconstruction, as
    :func:`write_table_files` takes them."""
    from .variances import ViewVarianceMemo

    plan = rec.plan
    variances = ViewVarianceMemo(plan)
    tables = []
    for attrs in dict.fromkeys(v.attrs for v in plan.workload.views):
        ok, why = cells_estimable(plan, attrs)
        var = cell_variances(plan, attrs) if ok else None
        if ok and var is None:
            why = f"a residual view of more than {MAX_EXPLICIT_CELLS} cells has a non-Kronecker mechanism: cell variances not computed"
        tables.append((attrs, rec.table(attrs) if var is not None else None, var, why))
    total = float(rec.table(())[0]) if cells_estimable(plan, ())[0] else None
    view_answers = [(v, lambda v=v: (rec.view_answers(v), variances(v))) for v in plan.workload.views]
    return tables, view_answers, total


def write_table_files(folder: str | Path, plan, tables, view_answers, *, total: float | None, postprocessed: bool = False,
                      max_answers: int = 1_000_000) -> dict:
    """The files of :func:`write_tables` for a plan of any kind: ``tables`` is one (attrs, cell
    estimates or None, their variances or None, why omitted) per table, ``view_answers`` one
    (workload view, callable -> (answers, variances)) per workload view in the workload's order
    (computed only for views that are written), ``total`` the estimated total the postprocessed
    tables are rescaled to (None: no postprocessed tables)."""
    folder = Path(folder)
    index: dict = {"tables": [], "answers": [], "postprocessed": []}
    names = plan.schema.names
    views = [attrs for attrs, *_ in tables]
    # file names from attribute names (data read from a domain file): never a path, never shared
    table_files = dict(zip(views, distinct_file_names([names[a] for a in attrs] for attrs in views)))
    for attrs, table, var, why in tables:
        entry = {"view": [names[a] for a in attrs]}
        if table is None or var is None:
            entry.update(file=None, omitted=why)
        else:
            frame = _cell_frame(plan, attrs)
            frame["estimate"] = table
            frame["std_error"] = np.sqrt(np.maximum(var, 0))
            path = folder / f"{table_files[attrs]}.csv"
            _write_csv(frame, path)
            entry.update(file=path.name)
            if postprocessed and total is not None:
                pp = _cell_frame(plan, attrs)
                pp["count"] = _postprocess(table, total)
                pp_path = folder / "postprocessed" / f"{table_files[attrs]}.csv"
                _write_csv(pp, pp_path)
                index["postprocessed"].append(str(pp_path.relative_to(folder)))
        index["tables"].append(entry)
    view_answers = list(view_answers)
    if view_answers:
        answer_files = distinct_file_names((v.family, *(names[a] for a in v.attrs), *((str(k),) if v.family == "custom" else ()))
                                           for k, (v, _) in enumerate(view_answers))
        for k, (v, compute) in enumerate(view_answers):
            n = plan.workload.view_count(v)
            name = answer_files[k]
            if n > max_answers:
                index["answers"].append({"view": name, "file": None, "omitted": f"{n} queries > {max_answers}"})
                continue
            path = folder / "answers" / f"{name}.csv"
            _write_csv(_answers_frame(plan, v, *compute()), path)
            index["answers"].append({"view": name, "file": str(path.relative_to(folder)), "weight": v.weight})
    if postprocessed:
        index["postprocessed_note"] = ("non-negative integer counts, each table rescaled to the estimated total; biased, "
                                       "for display only; the unbiased estimates with standard errors are the tables above")
    write_json(folder / "tables.json", index)
    return index
