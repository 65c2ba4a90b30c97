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


def _key(wc):
    return wc.key


def _batch(wc):
    return f"batch-{wc.bid}"


rule solve:
    input:
        subproblem=f"{R}/subproblems/{{key}}.h5",
        context=solve_context(_key),
    output:
        f"{R}/solves/{{ns}}/{{key}}.h5",
    params:
        method=solve_method,
        options=lambda wc: solver_options(solve_method(wc)),
        lib=lambda wc: lib("solve", solve_method(wc)),
    log:
        f"{R}/logs/solve/{{ns}}/{{key}}.log",
    benchmark:
        f"{R}/benchmarks/solve/{{ns}}/{{key}}.tsv"
    threads: SOLVE["threads"]
    priority: solve_priority(_key)  # longest first
    resources:
        mem_mb=solve_resource(_key, "mem_mb"),
        runtime=solve_resource(_key, "runtime"),
    script:
        "../scripts/solve.py"


rule solve_batch:
    input:
        members=f"{R}/batches/{{bid}}.json",
        subproblems=batch_members,
        context=solve_context(_batch),
    output:
        f"{R}/solves/{{ns}}/batch-{{bid}}.h5",
    params:
        method=solve_method,
        options=lambda wc: solver_options(solve_method(wc)),
        lib=lambda wc: lib("solve", solve_method(wc)),
    log:
        f"{R}/logs/solve/{{ns}}/batch-{{bid}}.log",
    benchmark:
        f"{R}/benchmarks/solve/{{ns}}/batch-{{bid}}.tsv"
    threads: 1
    priority: solve_priority(_batch)
    group:
        solve_batch_group  # on a cluster: a context solver's batches, by decompose chunk (rules/common.smk)
    resources:
        mem_mb=solve_resource(_batch, "mem_mb"),
        runtime=solve_resource(_batch, "runtime"),
    script:
        "../scripts/solve.py"
