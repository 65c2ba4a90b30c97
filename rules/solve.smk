# Stage 3: solve the distinct subproblems. Solution files are content-addressed and shared by every
# experiment of the grid (and across runs):
#   results/solves/{ns}/{key}.h5          one expensive subproblem per job
#   results/solves/{ns}/batch-{bid}.h5    a batch of cheap ones (single-Kronecker, small or fast
#                                         ones; see pipeline.cache.plan_batches); identical batches -- same
#                                         member keys, hence same bid -- are shared by experiments
# {ns} is the method (+ -o{hash} of solver options, + -c{workload id} for solvers that read
# workload context via prepare(), which then re-run the deterministic decomposition of an
# experiment's workload.h5, an ancient() input so its mtime never triggers a re-solve).
# resources come from the manifest's cost estimate (doubled on a retry), and so does the priority:
# the longest solves start first.


rule solve:
    input:
        subproblem=f"{R}/subproblems/{{key}}.h5",
        context=solve_context(solve_file_of),
    output:
        f"{R}/solves/{{ns}}/{{key}}.h5",
    log:
        f"{R}/logs/solve/{{ns}}/{{key}}.log",
    benchmark:
        f"{R}/benchmarks/solve/{{ns}}/{{key}}.tsv"
    priority: solve_priority(solve_file_of)  # longest first
    threads: SOLVE["threads"]
    resources:
        mem_mb=solve_resource(solve_file_of, "mem_mb"),
        runtime=solve_resource(solve_file_of, "runtime"),
    params:
        method=solve_method,
        options=lambda wc: solver_options(solve_method(wc)),
        lib=lambda wc: lib("solve", solve_method(wc)),
    script:
        "../scripts/solve.py"


rule solve_batch:
    input:
        members=f"{R}/batches/{{bid}}.json",
        subproblems=batch_members,
        context=solve_context(batch_file_of),
    output:
        f"{R}/solves/{{ns}}/batch-{{bid}}.h5",
    log:
        f"{R}/logs/solve/{{ns}}/batch-{{bid}}.log",
    benchmark:
        f"{R}/benchmarks/solve/{{ns}}/batch-{{bid}}.tsv"
    priority: solve_priority(batch_file_of)
    group:
        solve_batch_group  # on a cluster: a context solver's batches, by decompose chunk (rules/common.smk)
    threads: 1
    resources:
        mem_mb=solve_resource(batch_file_of, "mem_mb"),
        runtime=solve_resource(batch_file_of, "runtime"),
    params:
        method=solve_method,
        options=lambda wc: solver_options(solve_method(wc)),
        lib=lambda wc: lib("solve", solve_method(wc)),
    script:
        "../scripts/solve.py"
