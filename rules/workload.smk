# Stage 1: the problem's schema and workload spec -> results/problems/{problem}/workload.h5 (a problem
# is (schema, workload, method): every budget and seed of it shares this file).
# Every later stage reads the workload from this file (custom queries included), never the config.


rule workload:
    input:
        workload_inputs,
    output:
        f"{R}/problems/{{problem}}/workload.h5",
    params:
        schema=lambda wc: problem_of(wc).schema_spec,
        all_numeric=lambda wc: problem_of(wc).all_numeric,
        workload=lambda wc: problem_of(wc).workload,
        lib=lib("workload"),
    log:
        f"{R}/problems/{{problem}}/logs/workload.log",
    benchmark:
        f"{R}/problems/{{problem}}/benchmarks/workload.tsv"
    resources:
        mem_mb=1000,
        runtime=10,
    script:
        "../scripts/workload.py"
