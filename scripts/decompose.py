"""Checkpoint decompose: schema + workload spec -> workload.h5 (querysmasher.pipeline.steps.write_workload_file),
then workload.h5 -> decomposition.json, manifest.json, and the content-addressed subproblem / batch
files (querysmasher.pipeline.steps.decompose_to_files; for HDMM an empty decomposition:
querysmasher.pipeline.hdmm_steps.decompose_hdmm)."""

from querysmasher.pipeline import hdmm_steps, steps

sm = snakemake  # noqa: F821  (injected by the script: directive)
with steps.logged(sm.log[0]):
    p = sm.params
    print(steps.write_workload_file(sm.output.workload, p.schema, p.workload, all_numeric=p.all_numeric))
    if p.method in hdmm_steps.WHOLE_WORKLOAD_METHODS:  # no residual views, no subproblems
        info = hdmm_steps.decompose_hdmm(sm.output.workload, sm.output.decomposition, sm.output.manifest, problem=sm.wildcards.problem)
    else:
        info = steps.decompose_to_files(
            sm.output.workload, sm.output.decomposition, sm.output.manifest,
            method=p.method, options=dict(p.options), batch_max_cells=p.batch_max_cells,
            batch_max_seconds=p.batch_max_seconds, batch_size=p.batch_size, batch_seconds=p.batch_seconds,
            problem=sm.wildcards.problem,
        )
    print(info)
