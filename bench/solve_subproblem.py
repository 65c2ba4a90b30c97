"""Solve one subproblem file of a workflow run with a given method and thread budget; print the
wall time, the path the solver took and its certified gap.

    python bench/solve_subproblem.py results/subproblems/KEY.h5 [--method qs] [--threads N]
    python bench/solve_subproblem.py --random-pair N [--method qs] [--threads N]

(``--random-pair N``: the top residual of one ``random:2`` view over [N]^2, Table 4's random cells.)

Run it once per thread count, one after the other on an otherwise idle machine, to see whether a
solve job would go faster with more threads; the CPU seconds compare two versions of the solver
fairly even beside other work (run each version's tree alternately, with PYTHONPATH=TREE/src).
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("subproblem", nargs="?")
    ap.add_argument(
        "--random-pair", type=int, metavar="N", help="solve the [N]^2 random:2 top residual instead of a file"
    )
    ap.add_argument("--method", default="qs")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    from querysmasher.threads import cap_process

    cap_process(args.threads)  # before numpy loads, as a solve job does
    from querysmasher.methods import get_method
    from querysmasher.pipeline.cache import read_subproblem

    if args.random_pair:
        from querysmasher.decompose import decompose
        from querysmasher.schema import parse_schema
        from querysmasher.workload import parse_workload

        d = decompose(parse_workload("random:2", parse_schema(f"synthetic:n={args.random_pair},d=2")))
        gram, store, key = d.grams[(0, 1)], d.store, f"random pair [{args.random_pair}]^2"
    elif args.subproblem:
        key, gram, store = read_subproblem(args.subproblem)
    else:
        ap.error("give a subproblem file or --random-pair N")
    solver = get_method(args.method).build()
    t0, c0 = time.perf_counter(), time.process_time()
    sol = solver.solve(gram, store)
    print(
        f"{key}: {gram.cells} cells, {args.threads} thread(s), "
        f"{time.perf_counter() - t0:.2f} s ({time.process_time() - c0:.2f} s CPU), "
        f"{sol.solver}, gap {sol.gap:.1e}, loss {sol.loss:.8g}"
    )


if __name__ == "__main__":
    main()
