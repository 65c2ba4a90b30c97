"""The workflow's decompose step on Table 4's ``random:1,2`` over [n]^40, alone, in a scratch folder:
its wall time and peak memory (ru_maxrss), lazily (the workflow: each random view's Gram kept as a
recipe, written to its subproblem file as one) or eagerly (every Gram held until the files are
written, as before issue 23's streaming decompose).

    python bench/decompose_stream.py N [--eager] [--method qs]

At n = 50 it runs about 13 minutes on one core (780 random views of 7,500 x 2,500 queries).
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=int)
    ap.add_argument("--method", default="qs")
    ap.add_argument("--eager", action="store_true", help="hold every Gram (the decompose before streaming)")
    args = ap.parse_args()
    from querysmasher.threads import cap_process

    cap_process(1)  # as the decompose job
    import querysmasher.decompose as dec
    from querysmasher.pipeline import steps

    if args.eager:
        real = dec.decompose
        steps_decompose = lambda w, lazy=None: real(w, lazy=False)  # noqa: E731
        dec.decompose = steps_decompose
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        t0 = time.perf_counter()
        steps.write_workload_file("w.h5", f"synthetic:n={args.n},d=40", "random:1,2")
        out = steps.decompose_to_files("w.h5", "d.json", "m.json", method=args.method, problem="bench")
        secs = time.perf_counter() - t0
        disk = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(tmp) for f in fs)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"[{args.n}]^40 random:1,2 {args.method} {'eager' if args.eager else 'lazy'}: "
        f"{secs:.1f} s, peak {peak:.0f} MB, "
        f"{disk / 2**20:.0f} MB written, {out}"
    )


if __name__ == "__main__":
    main()
