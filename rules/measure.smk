# Stage 5: the release -> measurements.h5. The ONLY rule that reads records for a release (a CSV
# file, or seeded synthetic records when the data set is synthetic or its file is absent). The
# noise seed is the experiment's seed: experiments are explicitly seeded runs, and the file is
# marked seeded.


rule measure:
    input:
        plan=f"{R}/{{experiment}}/plan.h5",
        data=experiment_data_inputs,
    output:
        f"{R}/{{experiment}}/measurements.h5",
    log:
        f"{R}/{{experiment}}/logs/measure.log",
    benchmark:
        f"{R}/{{experiment}}/benchmarks/measure.tsv"
    group:
        experiment_group
    threads: 1  # numerical work single-threaded (querysmasher.threads); the grid runs jobs side by side
    resources:
        # the plan (and the decomposition re-deriving its query factors), the records, one view at a time
        mem_mb=stage_resource("measure", "mem_mb"),
        runtime=stage_resource("measure", "runtime"),
    params:
        source=experiment_data_source,
        seed=lambda wc: experiment_of(wc).seed,
        lib=lambda wc: lib("measure", experiment_of(wc).method),
    script:
        "../scripts/measure.py"
