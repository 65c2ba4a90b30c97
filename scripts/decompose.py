"""Checkpoint decompose: workload.h5 -> decomposition.json, manifest.json, and the content-addressed
subproblem / batch files (querysmasher.stages.decompose_to_files)."""

from querysmasher import logs, stages

sm = snakemake  # noqa: F821  (injected by the script: directive)
with stages.logged(sm.log[0]), logs.configured():
    p = sm.params
    info = stages.decompose_to_files(
        sm.input[0], sm.output.decomposition, sm.output.manifest,
        method=p.method, options=dict(p.options), batch_max_cells=p.batch_max_cells,
        batch_max_seconds=p.batch_max_seconds, batch_size=p.batch_size, batch_seconds=p.batch_seconds,
        experiment=sm.wildcards.experiment,
    )
    print(info)
