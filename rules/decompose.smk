# Stage 2 (a checkpoint): residual decomposition -> decomposition.json + manifest.json.
# Side effects, content-addressed and written ONLY IF ABSENT (an existing file is never touched,
# so its mtime never changes and its solution is never redone):
#   results/subproblems/{key}.h5  the unit-trace Gram of each distinct subproblem
#   results/batches/{bid}.json    the member keys of each batch of cheap subproblems
# The manifest lists, per distinct subproblem, its key, cells, terms, estimated cost and the
# solve file that will hold its solution; rules/solve.smk and allocate read it after this runs.


checkpoint decompose:
    input:
        f"{R}/{{experiment}}/workload.h5",
    output:
        decomposition=f"{R}/{{experiment}}/decomposition.json",
        manifest=f"{R}/{{experiment}}/manifest.json",
    params:
        method=lambda wc: experiment_of(wc).method,
        options=lambda wc: solver_options(experiment_of(wc).method),
        batch_max_cells=SOLVE["batch_max_cells"],
        batch_max_seconds=SOLVE["batch_max_seconds"],
        batch_size=SOLVE["batch_size"],
        batch_seconds=SOLVE["batch_seconds"],
        lib=lib("decompose"),
    log:
        f"{R}/{{experiment}}/logs/decompose.log",
    benchmark:
        f"{R}/{{experiment}}/benchmarks/decompose.tsv"
    resources:
        mem_mb=decompose_mem_mb,  # from the workload: the dense Grams it keeps (random views: one each)
        runtime=30,
    script:
        "../scripts/decompose.py"
