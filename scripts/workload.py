"""Rule workload: schema + workload spec -> workload.h5 (querysmasher.stages.write_workload_file)."""

from querysmasher import logs, stages

with stages.logged(snakemake.log[0]), logs.configured():  # noqa: F821  (snakemake is injected by the script: directive)
    p = snakemake.params  # noqa: F821
    print(stages.write_workload_file(snakemake.output[0], p.schema, p.workload, all_numeric=p.all_numeric))  # noqa: F821
