"""Rules solve / solve_batch: subproblem file(s) -> one solve file (querysmasher.pipeline.steps.solve_subproblem_files).

BLAS/OpenMP threads are capped at the rule's `threads` BEFORE numpy is imported.
"""

import os

sm = snakemake  # noqa: F821  (injected by the script: directive)
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = str(sm.threads)

from querysmasher.pipeline import steps  # noqa: E402  (after the thread limits)

with steps.logged(sm.log[0]):
    subproblems = sm.input.subproblems if "subproblems" in sm.input.keys() else [sm.input.subproblem]
    context = list(sm.input.context)
    info = steps.solve_subproblem_files(
        list(subproblems), sm.output[0], method=sm.params.method, options=dict(sm.params.options),
        workload_path=context[0] if context else None,
    )
    print(info)
