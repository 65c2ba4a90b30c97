"""Consistent, non-negative tables from a release's noisy measurements (post-processing only).

The unbiased tables a release publishes can have negative cells at small budgets. This module
estimates, from the noisy measurements alone and their known noise, one non-negative table per
published attribute set such that every two tables agree on their shared margin (the total
included): the constrained maximum-likelihood estimate

    minimise  sum_k || Q_k M_k T_(A_k) - y_k ||^2 / sigma_k^2
    over      T_A >= 0 for every published table A,
              marginal of T_A on A & B  =  marginal of T_B on A & B  for every two tables,

where measurement k (:class:`querysmasher.measurement.LinearMeasurement`: operator Q_k on the
marginal of its attributes S_k, Gaussian noise of variance sigma_k^2, released vector y_k) reads
the first published table A_k containing S_k, through its marginalisation M_k (a measurement no
table contains, such as a pair's when that pair's table is not estimable, is left out). This is the
local-consistency estimator of ReM/GReM-LNN (NeurIPS 2024) and of Private-PGM's estimation over
the tables' cliques, written once against the measurement record, so every plan kind whose
measurements each read inside a published table gets it. The result is biased (it trades the
unbiasedness of the primary tables for non-negativity and consistency) and is labelled so; it
reads no record.

>>> import numpy as np, pandas as pd, querysmasher as qs
>>> plan = qs.make_plan("synthetic:n=3,d=2", "marginal:1,2", method="qs", beta=0.1)
>>> records = pd.DataFrame({"a0": [0, 1, 2, 2], "a1": [1, 1, 0, 2]})
>>> release = plan.measure(records, seed=0)
>>> tables = consistent_tables(plan, release, [(0,), (1,), (0, 1)])
>>> bool(min(t.min() for t in tables.values()) >= 0)
True
>>> bool(np.allclose(tables[(0, 1)].reshape(3, 3).sum(axis=1), tables[(0,)], atol=1e-6))
True
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from .errors import InputError
from .measure import measurements_of

__all__ = ["consistent_tables", "MAX_CELLS"]

MAX_CELLS = 200_000  # the tables' cells: the problem is one sparse quadratic program over them
MAX_VIEW_CELLS = 4096  # a measurement's operator is formed densely over its view's cells (128 MB at most)


def _marginal_matrix(sizes, attrs: tuple[int, ...], sub: tuple[int, ...]) -> sp.csr_matrix:
    """The sparse 0/1 matrix taking a table over ``attrs`` (cells row-major) to its marginal over
    ``sub``: each cell to the sub-cell it falls in (one entry per cell, never cells x cells dense)."""
    local = tuple(sizes[a] for a in attrs)
    keep = [i for i, a in enumerate(attrs) if a in sub]
    cells = math.prod(local)
    coords = np.unravel_index(np.arange(cells), local) if local else ()
    rows = np.ravel_multi_index([coords[i] for i in keep], [local[i] for i in keep]) if keep else np.zeros(cells, int)
    return sp.csr_matrix((np.ones(cells), (rows, np.arange(cells))), shape=(math.prod(local[i] for i in keep), cells))


def consistent_tables(plan, measurements, tables: list[tuple[int, ...]], *, solver: str = "CLARABEL") -> dict:
    """{attrs: non-negative cell estimates} for each of ``tables`` (attribute tuples in schema
    order), consistent on every shared margin, from ``measurements`` (the release's noisy vectors,
    :class:`querysmasher.measurement.Measurements`) of ``plan`` (module docstring). An InputError
    when no measurement reads inside a table (a full-domain strategy: HDMM), when the noise is not
    Gaussian, or when the tables hold more than MAX_CELLS cells or a measurement's view more than
    MAX_VIEW_CELLS."""
    import cvxpy as cp  # heavy: imported only when consistent tables are asked for

    sizes = plan.schema.sizes
    tables = [tuple(sorted(t)) for t in dict.fromkeys(tuple(sorted(t)) for t in tables)]
    cells = {t: math.prod(sizes[a] for a in t) for t in tables}
    if sum(cells.values()) > MAX_CELLS:
        raise InputError("postprocess consistent", sum(cells.values()), f"tables of more than {MAX_CELLS} cells in all")
    ms = measurements_of(plan)
    ys = {int(i): np.asarray(y, dtype=float).reshape(-1) for i, y in zip(measurements.index, measurements.y)}
    # the tables in units of the largest whitened measurement: counts of tens of thousands against
    # unit noise left the interior point method without a solution
    unit = max((float(np.max(np.abs(ys[m.index]))) / math.sqrt(m.scale) for m in ms), default=1.0) or 1.0
    variables = {t: cp.Variable(cells[t], nonneg=True) for t in tables}
    residuals = []
    for m in ms:
        if m.noise != "gaussian":
            raise InputError("postprocess consistent", m.noise, "needs Gaussian measurements (their least squares)")
        home = next((t for t in tables if set(m.attrs) <= set(t)), None)
        if home is None:
            continue
        view_cells = math.prod(sizes[a] for a in m.attrs)
        if view_cells > MAX_VIEW_CELLS:
            raise InputError(
                "postprocess consistent", view_cells, f"a measured view of more than {MAX_VIEW_CELLS} cells"
            )
        q = np.asarray(m.apply(np.eye(math.prod(sizes[a] for a in m.attrs))), dtype=float).reshape(m.rows, -1)
        op = q @ _marginal_matrix(sizes, home, tuple(m.attrs)) / math.sqrt(m.scale)
        residuals.append(op @ variables[home] - ys[m.index] / math.sqrt(m.scale) / unit)
    if not residuals:
        raise InputError("postprocess consistent", plan.method, "no measurement reads inside a published table")
    constraints = []
    for i, a in enumerate(tables):
        for b in tables[i + 1 :]:
            shared = tuple(x for x in a if x in b)
            constraints.append(
                _marginal_matrix(sizes, a, shared) @ variables[a] == _marginal_matrix(sizes, b, shared) @ variables[b]
            )
    objective = cp.Minimize(sum(cp.sum_squares(r) for r in residuals))
    problem = cp.Problem(objective, constraints)
    problem.solve(solver=solver)
    if problem.status not in ("optimal", "optimal_inaccurate"):
        raise RuntimeError(f"the consistent tables' quadratic program ended {problem.status}")
    return {t: unit * np.maximum(np.asarray(variables[t].value, dtype=float), 0.0) for t in tables}
