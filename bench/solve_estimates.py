"""Each solver's own estimate of a solve (``solver.estimate(gram, store)``) against the solve's
measured peak memory and time, subproblem by subproblem.

For every (schema, workload, method) given, the workload is decomposed and each distinct subproblem
of at least ``--min-cells`` cells is solved in a forked child: its memory is the child's peak
resident set (VmHWM) minus its resident set when the solve started (the parent's decomposition is
shared, as a solve job's own subproblem file would be), its time the solve's wall seconds.

    PYTHONPATH=src python bench/solve_estimates.py "synthetic:n=100,d=2|prefix:1+affine:2|qs,wff,rpplus"
    PYTHONPATH=src python bench/solve_estimates.py --min-cells 400 "synthetic:n=30,d=3|random:2|qs,wff" ...

Prints one line per (subproblem, method): cells, terms, the path the solver takes, estimated and
measured MB and seconds, and the ratios estimate / measured.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _reset_hwm() -> None:
    try:  # Linux: writing 5 to clear_refs resets VmHWM to the current RSS
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def _child(solver, gram, store, conn):
    _reset_hwm()
    rss0 = _status_kb("VmRSS")
    t0 = time.perf_counter()
    solver.solve(gram, store)
    secs = time.perf_counter() - t0
    conn.send(((_status_kb("VmHWM") - rss0) / 1024, secs))
    conn.close()


def measure(solver, gram, store) -> tuple[float, float]:
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_child, args=(solver, gram, store, child))
    p.start()
    out = parent.recv()
    p.join()
    return out


def main(argv=None) -> int:
    from threadpoolctl import threadpool_limits

    from querysmasher.decompose import decompose
    from querysmasher.methods import get_method
    from querysmasher.schema import parse_schema
    from querysmasher.solvers.base import estimate_solve
    from querysmasher.workload import parse_workload

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("specs", nargs="+", help="SCHEMA|WORKLOAD|METHOD[,METHOD...]")
    ap.add_argument("--min-cells", type=int, default=100)
    ap.add_argument("--max-subproblems", type=int, default=3, help="per spec, the largest ones")
    args = ap.parse_args(argv)
    print(
        f"{'spec':44s} {'method':7s} {'cells':>6s} {'terms':>5s} {'path':9s} {'est MB':>8s} {'peak MB':>8s} "
        f"{'est/peak':>8s} {'est s':>7s} {'s':>7s} {'est/s':>6s}"
    )
    with threadpool_limits(limits=1, user_api="blas"):  # as a solve job with threads: 1
        for spec in args.specs:
            schema_spec, workload_spec, methods = spec.split("|")
            w = parse_workload(workload_spec, parse_schema(schema_spec))
            d = decompose(w)
            subs = sorted(
                ((k, g) for k, g in d.distinct().items() if g.cells >= args.min_cells), key=lambda kg: -kg[1].cells
            )[: args.max_subproblems]
            for method in methods.split(","):
                solver = get_method(method).build()
                if hasattr(solver, "prepare"):
                    solver.prepare(d)
                for key, g in subs:
                    e = estimate_solve(solver, g, d.store)
                    mb, secs = measure(solver, g, d.store)
                    est_mb = e.peak_bytes / 2**20
                    print(
                        f"{schema_spec + ' ' + workload_spec:44s} {method:7s} {g.cells:6d} {len(g.terms):5d} "
                        f"{e.path:9s} {est_mb:8.1f} {mb:8.1f} "
                        f"{(est_mb / mb if mb > 0 else float('inf')):8.2f} {e.seconds:7.2f} {secs:7.2f} "
                        f"{(e.seconds / secs if secs > 0 else float('inf')):6.2f}",
                        flush=True,
                    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
