"""Rule allocate: decomposition + solutions -> plan.h5, plan.json (querysmasher.pipeline.steps.allocate_to_files:
per-view methods allocate over the solve jobs' solutions; whole-workload methods and the max objective
plan here, through querysmasher.planning.make_plan)."""

from querysmasher.threads import cap_process

cap_process(snakemake.threads)  # noqa: F821  before numpy loads: the job uses the threads its rule declares

from querysmasher.pipeline import steps

sm = snakemake  # noqa: F821  (injected by the script: directive)
with steps.logged(sm.log[0]):
    p = sm.params
    summary = steps.allocate_to_files(
        sm.input.workload,
        sm.input.decomposition,
        list(sm.input.solves),
        sm.output.plan,
        sm.output.summary,
        method=p.method,
        objective=p.objective,
        budget=p.budget,
        delta=p.delta,
        neighbours=p.neighbours,
        options=dict(p.options),
        experiment=dict(p.experiment),
        mechanisms=p.mechanisms,
        max_variance=p.max_variance,
    )
    print(f"predicted RMSE {summary['predicted_rmse']:.6g}")
