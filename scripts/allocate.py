"""Rule allocate: decomposition + solutions -> plan.h5, plan.json (stages.assemble_plan_from_files)."""

from querysmasher import logs, stages

sm = snakemake  # noqa: F821  (injected by the script: directive)
with stages.logged(sm.log[0]), logs.configured():
    summary = stages.assemble_plan_from_files(
        sm.input.workload, sm.input.decomposition, list(sm.input.solves), sm.output.plan, sm.output.summary,
        method=sm.params.method, budget=sm.params.budget, delta=sm.params.delta, experiment=dict(sm.params.experiment),
    )
    print(f"predicted RMSE {summary['predicted_rmse']:.6g}")
