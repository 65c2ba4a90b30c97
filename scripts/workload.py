"""Rule workload: schema + workload spec -> workload.h5 (querysmasher.pipeline.steps.write_workload_file)."""

from querysmasher.pipeline import steps

with steps.logged(snakemake.log[0]):  # noqa: F821  (snakemake is injected by the script: directive)
    p = snakemake.params  # noqa: F821
    print(steps.write_workload_file(snakemake.output[0], p.schema, p.workload, all_numeric=p.all_numeric))  # noqa: F821
