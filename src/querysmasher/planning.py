"""make_plan: the one entry every face calls to plan (parsing, checks, the method table, the planner).

The CLI, the Python API, release specs and the workflow all plan through :func:`make_plan`: it
parses the schema and the workload once, refuses attributes too large to plan before anything is
allocated, builds the budget by the one rule of :func:`querysmasher.accounting.make_budget`, asks
the method table (:mod:`querysmasher.methods`) whether the method supports the objective, the noise,
the neighbouring relation and the workload, and runs the method's planner:

* per-view solvers: the residual planner (:func:`querysmasher.planners.residual.plan_residual`), or
  the max-variance planner (:func:`querysmasher.planners.maxplan.plan_max`) for ``objective="max"``;
* whole-workload planners (``hdmm``, ``mm``, plugins): their own ``plan``.

>>> p = make_plan("synthetic:n=4,d=3", "prefix:1,2", "rp", rho=0.5)
>>> p.method, round(p.rmse, 3), p.budget.beta
('rp', 2.401, 1.0)
>>> make_plan("cps", "affine:2", "hdmm")
Traceback (most recent call last):
    ...
querysmasher.errors.InputError: method 'hdmm': cannot plan workload 'affine:2': hdmm does not support non-product families (affine, abs, random, custom): affine:2
"""  # noqa: E501  (a doctest's expected output is one line)

from __future__ import annotations

from .accounting import Budget, PureBudget, make_budget
from .errors import InputError
from .methods import get_method
from .planners.maxplan import plan_max
from .planners.residual import plan_residual
from .schema import Schema, check_attribute_sizes, parse_schema
from .workload import Workload, parse_workload

__all__ = ["make_plan", "parse_problem"]


def parse_problem(
    schema: Schema | str, workload: Workload | str, *, all_numeric: bool = False
) -> tuple[Schema, Workload]:
    """The schema and workload of a spec (strings are parsed; ``all_numeric`` makes every attribute
    numeric), with every attribute the workload uses checked against the size limit."""
    if isinstance(schema, str):
        schema = parse_schema(schema, all_numeric=all_numeric)
    if isinstance(workload, str):
        workload = parse_workload(workload, schema)
    check_attribute_sizes(schema, [a for v in workload.views for a in v.attrs])
    return schema, workload


def make_plan(
    schema: Schema | str,
    workload: Workload | str,
    method: str = "qs",
    budget: Budget | PureBudget | None = None,
    *,
    objective: str = "sum",
    options: dict | None = None,
    solver_options: dict | None = None,
    all_numeric: bool = False,
    noise: str = "gaussian",
    neighbours: str | None = None,
    beta: float | None = None,
    rho: float | None = None,
    mu: float | None = None,
    epsilon: float | None = None,
    delta: float | None = None,
):
    """Plan ``workload`` over ``schema`` with ``method`` (see the module docstring).

    The budget is a :class:`~querysmasher.accounting.Budget` (or :class:`PureBudget`) or one keyword
    (beta, rho, mu, epsilon + delta; default beta = 1), with ``neighbours`` (default add-remove) and
    ``noise`` (gaussian, or laplace for pure epsilon-DP). ``options`` are the method's own
    (``solver_options`` is the same, its older name). Returns the planner's plan.
    """
    if options is not None and solver_options is not None:
        raise InputError("options", "solver_options", "give options once")
    options = dict(options if options is not None else solver_options or {})
    if budget is not None:
        if any(v is not None for v in (beta, rho, mu, epsilon, delta)):
            raise InputError("budget", budget, "give a Budget or keywords, not both")
        if neighbours is not None and neighbours != budget.neighbours:
            budget = (
                budget.with_neighbours(neighbours)
                if isinstance(budget, Budget)
                else make_budget(epsilon=budget.epsilon, noise="laplace", neighbours=neighbours)
            )
        noise = budget.noise
    else:
        budget = make_budget(
            beta=beta, rho=rho, mu=mu, epsilon=epsilon, delta=delta, neighbours=neighbours or "add-remove", noise=noise
        )
    m = get_method(method)
    m.check(objective=objective, noise=noise, neighbours=budget.neighbours)
    schema, workload = parse_problem(schema, workload, all_numeric=all_numeric)
    why = m.unsupported(workload)
    if why:
        raise InputError("method", method, f"cannot plan workload {workload.spec!r}: {why}")
    if m.whole_workload:
        return m.build(**options).plan(schema, workload, budget, objective=objective)
    if objective == "max":
        return plan_max(schema, workload, method, budget, solver_options=options)

    return plan_residual(workload, method, m.build(**options), budget)
