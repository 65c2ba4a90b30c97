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

from .fulldomain import is_full_domain_plan, marginal_estimable
from .tablefiles import write_table_files
from .workload import WorkloadView

__all__ = ["cells_estimable", "cell_variances", "write_tables", "write_table_files", "residual_table_data", "MAX_EXPLICIT_CELLS"]

MAX_EXPLICIT_CELLS = 4096  # cell variances through a non-Kronecker residual mechanism: explicit up to this many cells


def cells_estimable(plan, attrs: tuple[int, ...]) -> tuple[bool, str]:
    """(estimable, reason): whether every cell count of view ``attrs`` is estimable."""
    if is_full_domain_plan(plan):  # one mechanism over every attribute: its range, not residual views
        return marginal_estimable(plan, tuple(attrs))
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
