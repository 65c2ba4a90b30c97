"""The whole-family certificate of a restricted symmetric-reduction point (qsplus, marginal_family.symmetric_dual).

Solves the restricted reduction of a uniform all-pairs problem, then certifies its point over the
whole pair space; prints the solver's own (restricted) bound, the bound from minus the gradient
(the start) and the optimised bound, with seconds. One BLAS thread is advised:

    OMP_NUM_THREADS=1 python bench/whole_family_bound.py synthetic:n=8,d=6 prefix:1+abs:2 [--max-seconds S]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from querysmasher.accounting import Budget
from querysmasher.marginal_family import build_problem
from querysmasher.marginal_family.symmetric import solve_symmetric
from querysmasher.marginal_family.symmetric_dual import whole_family_bound
from querysmasher.planners.residual import plan_residual
from querysmasher.schema import parse_schema
from querysmasher.solvers.qs import QSSolver
from querysmasher.workload import parse_workload


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("schema")
    ap.add_argument("workload")
    ap.add_argument("--max-seconds", type=float, default=None)
    args = ap.parse_args()
    schema = parse_schema(args.schema)
    workload = parse_workload(args.workload, schema)
    problem = build_problem(workload, plan_residual(workload, "qs", QSSolver(), Budget.from_beta(1.0)))
    m = len(problem.views)
    t0 = time.perf_counter()
    sol = solve_symmetric(problem, restrict=True)
    solve_s = time.perf_counter() - t0
    c = sol.gram + np.diag(1 - np.diag(sol.gram))
    c = (1 - 1e-7) * c + 1e-7 * np.eye(len(c))  # as the planner: finite objective, unit diagonal
    f = problem.evaluate([problem.residual_gram(0, c / m)], 0.0, want_grad=False).f
    start = whole_family_bound(problem, c, max_seconds=0.0)
    t1 = time.perf_counter()
    bound = whole_family_bound(problem, c, objective=f, max_seconds=args.max_seconds)
    print(f"{args.schema} {args.workload}: objective {f:.10g}; restricted solve {solve_s:.1f} s, its bound gap {(f - sol.lower_bound) / f:.2e}; "
          f"minus the gradient: gap {(f - start) / f:.2e}; optimised: bound {bound:.10g}, gap {(f - bound) / f:.2e}, {time.perf_counter() - t1:.1f} s")


if __name__ == "__main__":
    main()
