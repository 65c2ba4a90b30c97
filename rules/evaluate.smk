# Stage 7: metrics.json -- predicted RMSE, and (release runs) the empirical RMSE of the answers
# against the true answers. This rule reads the records too: it is an EVALUATION, not a release
# (its output is not differentially private and is not meant to be published). Phase times and
# peak memory come from the benchmark files of the experiment's jobs and of its solve jobs.

_STAGES = ["workload", "decompose", "allocate"] + (["measure", "reconstruct"] if RELEASE else [])


rule evaluate:
    input:
        plan=f"{R}/{{experiment}}/plan.h5",
        manifest=f"{R}/{{experiment}}/manifest.json",
        **({"answers": f"{R}/{{experiment}}/answers.h5", "data": experiment_data_inputs} if RELEASE else {}),
        **{f"bench_{s}": f"{R}/{{experiment}}/benchmarks/{s}.tsv" for s in _STAGES},
    output:
        f"{R}/{{experiment}}/metrics.json",
    params:
        source=experiment_data_source if RELEASE else None,
        experiment=lambda wc: experiment_of(wc).as_dict(),
        stages=_STAGES,
        lib=lib("evaluate"),
    log:
        f"{R}/{{experiment}}/logs/evaluate.log",
    resources:
        mem_mb=4000,
        runtime=60,
    script:
        "../scripts/evaluate.py"
