"""Rule allocate: decomposition + solutions -> plan.h5, plan.json (querysmasher.pipeline.steps.assemble_plan_from_files;
for HDMM, its whole-workload optimisers: querysmasher.pipeline.hdmm_steps.plan_hdmm_to_files; for objective
"max", the max-variance planning: querysmasher.pipeline.steps.plan_max_to_files)."""

from querysmasher.pipeline import hdmm_steps, steps

sm = snakemake  # noqa: F821  (injected by the script: directive)
with steps.logged(sm.log[0]):
    if sm.params.method in hdmm_steps.WHOLE_WORKLOAD_METHODS:
        summary = hdmm_steps.plan_hdmm_to_files(
            sm.input.workload, sm.output.plan, sm.output.summary, budget=sm.params.budget, delta=sm.params.delta,
            experiment=dict(sm.params.experiment),
        )
    elif sm.params.objective == "max":
        summary = steps.plan_max_to_files(
            sm.input.workload, sm.output.plan, sm.output.summary, method=sm.params.method, budget=sm.params.budget, delta=sm.params.delta,
            experiment=dict(sm.params.experiment),
        )
    else:
        summary = steps.assemble_plan_from_files(
            sm.input.workload, sm.input.decomposition, list(sm.input.solves), sm.output.plan, sm.output.summary,
            method=sm.params.method, budget=sm.params.budget, delta=sm.params.delta, experiment=dict(sm.params.experiment),
        )
    print(f"predicted RMSE {summary['predicted_rmse']:.6g}")
