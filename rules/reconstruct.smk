# Stage 6: answers and variances of every workload query -> answers.h5 (+ one CSV table per
# workload view in results/{experiment}/tables/ when reconstruct.csv is true).


rule reconstruct:
    input:
        plan=f"{R}/{{experiment}}/plan.h5",
        measurements=f"{R}/{{experiment}}/measurements.h5",
    output:
        **({"tables": directory(f"{R}/{{experiment}}/tables")} if CSV_TABLES else {}),
        answers=f"{R}/{{experiment}}/answers.h5",
    log:
        f"{R}/{{experiment}}/logs/reconstruct.log",
    benchmark:
        f"{R}/{{experiment}}/benchmarks/reconstruct.tsv"
    group:
        experiment_group
    threads: 1  # numerical work single-threaded (querysmasher.threads); the grid runs jobs side by side
    resources:
        # the plan (and the decomposition re-deriving its query factors), one view at a time
        mem_mb=stage_resource("reconstruct", "mem_mb"),
        runtime=stage_resource("reconstruct", "runtime"),
    params:
        max_answers=config["reconstruct"]["max_answers"],
        lib=lambda wc: lib("reconstruct", experiment_of(wc).method),
    script:
        "../scripts/reconstruct.py"
