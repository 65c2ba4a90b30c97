"""Rule allocate: decomposition + solutions -> plan.h5, plan.json (querysmasher.pipeline.steps.assemble_plan_from_files)."""

from querysmasher.pipeline import steps

sm = snakemake  # noqa: F821  (injected by the script: directive)
with steps.logged(sm.log[0]):
    summary = steps.assemble_plan_from_files(
        sm.input.workload, sm.input.decomposition, list(sm.input.solves), sm.output.plan, sm.output.summary,
        method=sm.params.method, budget=sm.params.budget, delta=sm.params.delta, experiment=dict(sm.params.experiment),
    )
    print(f"predicted RMSE {summary['predicted_rmse']:.6g}")
