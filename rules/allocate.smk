# Stage 4: allocate the budget over the residual views -> plan.h5 + plan.json (predicted RMSE,
# certified lower bound when every view is certified, privacy as beta / rho / mu / (eps, delta)).
# HDMM (no decomposition, no solves) runs its whole-workload optimisers here (hdmm_steps).


rule allocate:
    input:
        workload=lambda wc: problem_path("workload.h5", wc),
        decomposition=lambda wc: problem_path("decomposition.json", wc),
        manifest=manifest_path,
        solves=experiment_solve_files,
    output:
        plan=f"{R}/{{experiment}}/plan.h5",
        summary=f"{R}/{{experiment}}/plan.json",
    params:
        method=lambda wc: experiment_of(wc).method,
        objective=lambda wc: experiment_of(wc).objective,
        budget=lambda wc: experiment_of(wc).budget,
        delta=config["delta"],
        experiment=lambda wc: experiment_of(wc).as_dict(),
        lib=lib("allocate"),
    log:
        f"{R}/{{experiment}}/logs/allocate.log",
    benchmark:
        f"{R}/{{experiment}}/benchmarks/allocate.tsv"
    resources:
        mem_mb=lambda wc: 4000 if experiment_of(wc).method == "hdmm" else 2000,  # HDMM optimises the whole workload here
        runtime=lambda wc: 120 if experiment_of(wc).method == "hdmm" else 30,
    script:
        "../scripts/allocate.py"
