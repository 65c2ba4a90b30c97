"""Solve one subproblem file of a workflow run with a given method and thread budget; print the
wall time, the path the solver took and its certified gap.

    python bench/solve_subproblem.py results/subproblems/KEY.h5 [--method qs] [--threads N]

Run it once per thread count, one after the other on an otherwise idle machine, to see whether a
solve job would go faster with more threads.
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("subproblem")
    ap.add_argument("--method", default="qs")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    from querysmasher.threads import cap_process

    cap_process(args.threads)  # before numpy loads, as a solve job does
    from querysmasher.methods import get_method
    from querysmasher.pipeline.cache import read_subproblem

    key, gram, store = read_subproblem(args.subproblem)
    solver = get_method(args.method).build()
    t0 = time.perf_counter()
    sol = solver.solve(gram, store)
    print(f"{key}: {gram.cells} cells, {args.threads} thread(s), {time.perf_counter() - t0:.2f} s, {sol.solver}, gap {sol.gap:.1e}")


if __name__ == "__main__":
    main()
