# Stage 7: metrics.json -- predicted RMSE, and (release runs) the empirical RMSE of the answers
# against the true answers. This rule reads the records too: it is an EVALUATION, not a release
# (its output is not differentially private and is not meant to be published). Phase times and
# peak memory come from the benchmark files of the experiment's jobs and of its solve jobs.
# HDMM experiments release only where the full data vector fits (MEASURED, rules/common.smk).


rule evaluate:
    input:
        unpack(evaluate_inputs),
        plan=f"{R}/{{experiment}}/plan.h5",
        manifest=lambda wc: problem_path("manifest.json", wc),
    output:
        f"{R}/{{experiment}}/metrics.json",
    log:
        f"{R}/{{experiment}}/logs/evaluate.log",
    benchmark:
        f"{R}/{{experiment}}/benchmarks/evaluate.tsv"
    group:
        experiment_group
    threads: stage_threads_of("evaluate")  # one, or its views split over several for a large measured workload
    resources:
        # the plan, the records and one view's answers at a time (released), or the plan's summary
        mem_mb=stage_resource("evaluate", "mem_mb"),
        runtime=stage_resource("evaluate", "runtime"),
    params:
        source=lambda wc: experiment_data_source(wc) if MEASURED[wc.experiment] else None,
        experiment=lambda wc: experiment_of(wc).as_dict(),
        stages=evaluated_stages,
        lib=lambda wc: lib("evaluate", experiment_of(wc).method),
    script:
        "../scripts/evaluate.py"
