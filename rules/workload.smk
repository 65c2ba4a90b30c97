# Stage 1: the experiment's schema and workload spec -> results/{experiment}/workload.h5.
# Every later stage reads the workload from this file (custom queries included), never the config.


rule workload:
    input:
        workload_inputs,
    output:
        f"{R}/{{experiment}}/workload.h5",
    params:
        schema=lambda wc: experiment_of(wc).schema_spec,
        all_numeric=lambda wc: experiment_of(wc).all_numeric,
        workload=lambda wc: experiment_of(wc).workload,
        lib=lib("workload"),
    log:
        f"{R}/{{experiment}}/logs/workload.log",
    benchmark:
        f"{R}/{{experiment}}/benchmarks/workload.tsv"
    resources:
        mem_mb=1000,
        runtime=10,
    script:
        "../scripts/workload.py"
