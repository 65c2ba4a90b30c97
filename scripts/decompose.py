"""Checkpoint decompose: schema + workload spec -> workload.h5 (querysmasher.workloadfile.write_workload_file),
then workload.h5 -> decomposition.json, manifest.json, and the content-addressed subproblem / batch
files (querysmasher.pipeline.steps.decompose_to_files; empty for a whole-workload method)."""

from querysmasher.threads import cap_process

cap_process(snakemake.threads)  # noqa: F821  before numpy loads: the job uses the threads its rule declares

from querysmasher.pipeline import steps

sm = snakemake  # noqa: F821  (injected by the script: directive)
with steps.logged(sm.log[0]):
    p = sm.params
    print(steps.write_workload_file(sm.output.workload, p.schema, p.workload, all_numeric=p.all_numeric))
    print(
        steps.decompose_to_files(
            sm.output.workload,
            sm.output.decomposition,
            sm.output.manifest,
            method=p.method,
            options=dict(p.options),
            batch_max_cells=p.batch_max_cells,
            batch_max_seconds=p.batch_max_seconds,
            batch_size=p.batch_size,
            batch_seconds=p.batch_seconds,
            problem=sm.wildcards.problem,
        )
    )
