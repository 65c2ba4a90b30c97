"""Full-domain plans: a Plan whose one mechanism covers every attribute (``mm``, whole-workload plugins).

A whole-workload planner that measures the full data vector with one Gaussian mechanism X (over
every cell of the domain, row-major in schema order) only needs to choose X; :func:`full_domain_plan`
makes the plan of it: its loss tr(G X^+) over the full domain (unless given), its privacy cost
under the budget's neighbouring relation, the allocation of the budget, and ``layout =
"full-domain"``, so measure applies X's root to the full histogram and reconstruct marginalises the
full-domain estimate. Small domains only (the workload Gram is formed explicitly).

>>> import numpy as np
>>> from querysmasher.accounting import Budget
>>> from querysmasher.mechanisms import ViewMechanism
>>> from querysmasher.planning import parse_problem
>>> schema, workload = parse_problem("synthetic:n=3,d=2", "prefix:1")
>>> p = full_domain_plan(
...     schema, workload, "identity", Budget.from_beta(1.0), ViewMechanism("kron", (3, 3), (np.eye(3), np.eye(3)))
... )
>>> p.layout, p.views, round(p.total_variance, 6)   # 12 prefix queries: the sum of their sizes
('full-domain', [(0, 1)], 36.0)
"""

from __future__ import annotations

import numpy as np

from ..accounting import Budget
from ..allocation import allocate
from ..fulldomain import full_domain_gram
from ..linalg import content_hash, pinv_psd
from ..mechanisms import ViewMechanism
from ..plan import Plan
from ..schema import Schema
from ..solvers.base import ViewSolution
from ..workload import Workload

__all__ = ["full_domain_plan"]


def full_domain_plan(
    schema: Schema,
    workload: Workload,
    method: str,
    budget: Budget,
    mechanism: ViewMechanism,
    *,
    loss: float | None = None,
    lower_bound: float = 0.0,
    solver: str | None = None,
    note: str = "",
    phase_seconds: dict | None = None,
) -> Plan:
    """The plan measuring the full data vector with ``mechanism`` (see the module docstring)."""
    if tuple(mechanism.sizes) != tuple(schema.sizes):
        raise ValueError(f"a full-domain mechanism has the schema's sizes {schema.sizes}, not {mechanism.sizes}")
    if loss is None:
        loss = float(np.sum(full_domain_gram(workload) * pinv_psd(mechanism.dense_x())))
    gap = (loss - lower_bound) / loss if loss > 0 and lower_bound > 0 else float("nan")
    key = content_hash(method, workload.spec, str(schema.sizes))
    sol = ViewSolution(mechanism, loss, lower_bound, solver or method, note, gap)
    alloc = allocate([loss], budget.beta, [mechanism.cost(budget.neighbours)])
    return Plan(
        schema,
        workload,
        method,
        budget,
        [tuple(range(len(schema)))],
        [key],
        np.ones(1),
        np.array([loss]),
        np.array([lower_bound]),
        alloc,
        {key: sol},
        len({v.attrs for v in workload.views}),
        dict(phase_seconds or {}),
        [f"{sol.solver}: {note}"] if note else [],
        layout="full-domain",
    )
