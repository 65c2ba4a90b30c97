"""Rule aggregate: every metrics.json of the grid -> results/tables/*.csv, results/figures/*.png."""

from querysmasher.threads import cap_process

cap_process(snakemake.threads)  # noqa: F821  before numpy loads: the job uses the threads its rule declares

from pathlib import Path

from querysmasher.pipeline.report import aggregate
from querysmasher.pipeline.steps import logged

sm = snakemake  # noqa: F821  (injected by the script: directive)
with logged(sm.log[0]):
    print(aggregate(list(sm.input), Path(sm.output.experiments).parent, Path(sm.output.fig_rmse).parent))
