"""Rules solve / solve_batch: subproblem file(s) -> one solve file
(querysmasher.pipeline.steps.solve_subproblem_files)."""

from querysmasher.threads import cap_process

sm = snakemake  # noqa: F821  (injected by the script: directive)
cap_process(sm.threads)  # before numpy loads: the job uses the threads its rule declares, no more

from querysmasher.pipeline import steps  # noqa: E402  (after the thread limits)

with steps.logged(sm.log[0]):
    subproblems = sm.input.subproblems if "subproblems" in sm.input.keys() else [sm.input.subproblem]
    context = list(sm.input.context)
    info = steps.solve_subproblem_files(
        list(subproblems),
        sm.output[0],
        method=sm.params.method,
        options=dict(sm.params.options),
        workload_path=context[0] if context else None,
    )
    print(info)
