# Stage 1 (a checkpoint): the problem's schema and workload spec -> results/problems/{problem}/
# workload.h5, then its residual decomposition -> decomposition.json + manifest.json (a problem is
# (schema, workload, method): every budget, seed and objective of it shares these files). One job,
# not two: a job's process start and imports cost more than writing the workload file.
# Every later stage reads the workload from workload.h5 (custom queries included), never the config.
# Side effects, content-addressed and written ONLY IF ABSENT (an existing file is never touched,
# so its mtime never changes and its solution is never redone):
#   results/subproblems/{key}.h5  the unit-trace Gram of each distinct subproblem
#   results/batches/{bid}.json    the member keys of each batch of cheap subproblems
# The manifest lists, per distinct subproblem, its key, cells, terms, estimated cost and the
# solve file that will hold its solution; rules/solve.smk and allocate read it after this runs.


checkpoint decompose:
    input:
        workload_inputs,
    output:
        workload=f"{R}/problems/{{problem}}/workload.h5",
        decomposition=f"{R}/problems/{{problem}}/decomposition.json",
        manifest=f"{R}/problems/{{problem}}/manifest.json",
    log:
        f"{R}/problems/{{problem}}/logs/decompose.log",
    benchmark:
        f"{R}/problems/{{problem}}/benchmarks/decompose.tsv"
    group:
        prepare_group
    threads: 1  # numerical work single-threaded (querysmasher.threads); the grid runs jobs side by side
    resources:
        mem_mb=decompose_mem_mb,  # from the workload: the dense Grams it keeps (random views: one each)
        runtime=decompose_runtime,
    params:
        schema=lambda wc: problem_of(wc).schema_spec,
        all_numeric=lambda wc: problem_of(wc).all_numeric,
        workload=lambda wc: problem_of(wc).workload,
        method=lambda wc: problem_of(wc).method,
        options=lambda wc: solver_options(problem_of(wc).method),
        batch_max_cells=SOLVE["batch_max_cells"],
        batch_max_seconds=SOLVE["batch_max_seconds"],
        batch_size=SOLVE["batch_size"],
        batch_seconds=SOLVE["batch_seconds"],
        lib=lambda wc: lib("decompose", problem_of(wc).method),
    script:
        "../scripts/decompose.py"
