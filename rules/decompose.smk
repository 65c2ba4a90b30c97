# Stage 2 (a checkpoint): residual decomposition -> results/problems/{problem}/decomposition.json +
# manifest.json (one per problem: every budget and seed of it shares them).
# Side effects, content-addressed and written ONLY IF ABSENT (an existing file is never touched,
# so its mtime never changes and its solution is never redone):
#   results/subproblems/{key}.h5  the unit-trace Gram of each distinct subproblem
#   results/batches/{bid}.json    the member keys of each batch of cheap subproblems
# The manifest lists, per distinct subproblem, its key, cells, terms, estimated cost and the
# solve file that will hold its solution; rules/solve.smk and allocate read it after this runs.


checkpoint decompose:
    input:
        f"{R}/problems/{{problem}}/workload.h5",
    output:
        decomposition=f"{R}/problems/{{problem}}/decomposition.json",
        manifest=f"{R}/problems/{{problem}}/manifest.json",
    params:
        method=lambda wc: problem_of(wc).method,
        options=lambda wc: solver_options(problem_of(wc).method),
        batch_max_cells=SOLVE["batch_max_cells"],
        batch_max_seconds=SOLVE["batch_max_seconds"],
        batch_size=SOLVE["batch_size"],
        batch_seconds=SOLVE["batch_seconds"],
        lib=lib("decompose"),
    log:
        f"{R}/problems/{{problem}}/logs/decompose.log",
    benchmark:
        f"{R}/problems/{{problem}}/benchmarks/decompose.tsv"
    resources:
        mem_mb=decompose_mem_mb,  # from the workload: the dense Grams it keeps (random views: one each)
        runtime=30,
    script:
        "../scripts/decompose.py"
