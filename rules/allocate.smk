# Stage 4: allocate the budget over the residual views -> plan.h5 + plan.json (predicted RMSE,
# certified lower bound when every view is certified, privacy as beta / rho / mu / (eps, delta)).
# Whole-workload methods (hdmm, mm, plugin planners: no decomposition, no solves) and the max objective
# plan here (querysmasher.planning.make_plan).


rule allocate:
    input:
        workload=lambda wc: problem_path("workload.h5", wc),
        decomposition=lambda wc: problem_path("decomposition.json", wc),
        manifest=manifest_path,
        solves=experiment_solve_files,
    output:
        plan=f"{R}/{{experiment}}/plan.h5",
        summary=f"{R}/{{experiment}}/plan.json",
    log:
        f"{R}/{{experiment}}/logs/allocate.log",
    benchmark:
        f"{R}/{{experiment}}/benchmarks/allocate.tsv"
    group:
        experiment_group
    threads: stage_threads_of("allocate")  # one; or, for large dense solutions, its variance report split over forked workers
    resources:
        # what the job holds (querysmasher.pipeline.resources: the solutions, or a whole-workload
        # method's strategy, which plans here); a planner's time is not estimated: 2 hours for those
        mem_mb=stage_resource("allocate", "mem_mb"),
        runtime=stage_resource("allocate", "runtime", floor=lambda wc: 120 if whole_workload(wc) else 0),
    params:
        method=lambda wc: experiment_of(wc).method,
        objective=lambda wc: experiment_of(wc).objective,
        neighbours=lambda wc: experiment_of(wc).neighbours,
        options=lambda wc: solver_options(experiment_of(wc).method),
        budget=lambda wc: experiment_of(wc).budget,
        delta=config["delta"],
        experiment=lambda wc: experiment_of(wc).as_dict(),
        mechanisms=lambda wc: STORE_MECHANISMS or MEASURED[wc.experiment],  # plan-only: the summary may do
        max_variance=REPORT_MAX_VARIANCE,
        lib=lambda wc: lib("allocate", experiment_of(wc).method),
    script:
        "../scripts/allocate.py"
